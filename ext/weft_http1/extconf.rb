# frozen_string_literal: true

require "mkmf"

# Warnings are errors-in-waiting for a parser on the hot path: build with the
# full set and keep our code clean (the fuzz build of the core adds -Werror).
$CFLAGS << " -Wall -Wextra -O2 -std=c99"

# Ruby's own headers trigger -Wunused-parameter under -Wextra. Include them as
# system headers so those warnings are silenced without hiding any of ours.
$INCFLAGS = $INCFLAGS.gsub(/-I(\$\((?:arch_)?hdrdir\)(?:\/ruby\/backward)?)/, '-isystem \1')

create_makefile("weft/http1/weft_http1")
