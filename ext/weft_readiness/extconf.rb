# frozen_string_literal: true

require "mkmf"

# The same warning set as ext/weft_http1: the build must stay clean under it.
$CFLAGS << " -Wall -Wextra -O2 -std=c99"

# Ruby's own headers trigger -Wunused-parameter under -Wextra: include them as system headers.
$INCFLAGS = $INCFLAGS.gsub(/-I(\$\((?:arch_)?hdrdir\)(?:\/ruby\/backward)?)/, '-isystem \1')

# Without epoll (not Linux) the extension still builds: Weft::Readiness.available? is then
# false and the server's idle pool uses its portable strategy.
have_header("sys/epoll.h")

create_makefile("weft/weft_readiness")
