/* libFuzzer harness for the response head parser: same checks as requests. */
#define FUZZ_RESPONSE 1
#include "fuzz_request.c"
