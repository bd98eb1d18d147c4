# frozen_string_literal: true

require "mkmf"

# The same warning set as the other extensions: the build must stay clean under it.
$CFLAGS << " -Wall -Wextra -O2 -std=c99"

# Ruby's own headers trigger -Wunused-parameter under -Wextra: include them as system headers.
$INCFLAGS = $INCFLAGS.gsub(/-I(\$\((?:arch_)?hdrdir\)(?:\/ruby\/backward)?)/, '-isystem \1')

# Neither libpq's headers nor pg's are needed: the functions are looked up at run time in the
# pg extension already loaded (see weft_pg.c). Without dlopen the extension still builds
# and Weft::Postgres uses its Ruby reader.
have_library("dl", "dlopen") unless have_func("dlopen", "dlfcn.h")
have_header("dlfcn.h")

create_makefile("weft/postgres/weft_pg")
