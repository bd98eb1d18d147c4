/*
 * Plain C unit test of the parser core, meant to be built with ASan/UBSan:
 *   fuzz/run builds and runs it before fuzzing.
 * Each case is parsed at once and byte-by-byte (tail poisoned); both must give
 * the expected result (head length, 0 = incomplete, or -status).
 */
#include <sanitizer/asan_interface.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../ext/weft_http1/http1.h"

typedef struct { int response; const char *in; long expect; } head_case;

#define HOST "Host: h\r\n"
static const head_case heads[] = {
    { 0, "GET / HTTP/1.1\r\n" HOST "\r\n", 27 },
    { 0, "GET / HTTP/1.1\r\n" HOST, 0 },
    { 0, "GET / HTTP/1.0\n\n", 16 },
    { 0, "\r\nGET / HTTP/1.0\r\n\r\n", 20 },
    { 0, "OPTIONS * HTTP/1.1\r\n" HOST "\r\n", 31 },
    { 0, "GET * HTTP/1.1\r\n" HOST "\r\n", -400 },
    { 0, "GET http://a/b HTTP/1.0\r\n\r\n", 27 },
    { 0, "GET / HTTP/2.0\r\n" HOST "\r\n", -505 },
    { 0, "GET / HTTP/1.1\r\n\r\n", -400 },                            /* no Host */
    { 0, "GET / HTTP/1.1\r\n" HOST HOST "\r\n", -400 },
    { 0, "GET / HTTP/1.1\r\n" HOST "A : b\r\n\r\n", -400 },
    { 0, "GET / HTTP/1.1\r\n" HOST "A: b\r\n c\r\n\r\n", -400 },       /* obs-fold */
    { 0, "GET / HTTP/1.1\r\n" HOST "A: b\rc\r\n\r\n", -400 },          /* bare CR */
    { 0, "GET / HTTP/1.1\r\n" HOST "A: \x01\r\n\r\n", -400 },
    { 0, "GET /\x80 HTTP/1.1\r\n" HOST "\r\n", -400 },
    { 0, "GET / HTTP/1.1\r\n" HOST "Content-Length: 1\r\nContent-Length: 2\r\n\r\n", -400 },
    { 0, "GET / HTTP/1.1\r\n" HOST "Content-Length: 9223372036854775808\r\n\r\n", -400 },
    { 0, "GET / HTTP/1.1\r\n" HOST "Content-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n", -400 },
    { 0, "GET / HTTP/1.1\r\n" HOST "Transfer-Encoding: gzip\r\n\r\n", -400 },
    { 0, "GET / HTTP/1.1\r\n" HOST "Transfer-Encoding: gzip, chunked\r\n\r\n", -501 },
    { 0, "GET / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n", -400 },
    { 0, "CONNECT h:1 HTTP/1.1\r\n" HOST "\r\n", -501 },
    { 1, "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n", 38 },
    { 1, "HTTP/1.1 204\r\n\r\n", 16 },
    { 1, "HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n", -502 },
    { 1, "HTTP/3.0 200 OK\r\n\r\n", -502 },
};

typedef struct { const char *in; int expect; const char *body; } chunk_case;
static const chunk_case chunks[] = {
    { "5\r\nhello\r\n0\r\n\r\n", H1C_DONE, "hello" },
    { "3;a=b\r\nabc\r\n0\r\nT: x\r\n\r\n", H1C_DONE, "abc" },
    { "3\r\nab", H1C_MORE, "ab" },
    { "3\r\nabcd\r\n", -400, "abc" },
    { "3\nabc\r\n0\r\n\r\n", -400, "" },
    { "ffffffffffffffffff\r\n", -400, "" },
    { "1\r\na\r\n0\r\nGET /x HTTP/1.1\r\n\r\n", -400, "a" },
    { "1\r\na\r\n0\r\nX-A : b\r\n\r\n", -400, "a" },
};

static int failures;

static long parse(int response, const char *s, size_t len, int bytewise)
{
    h1_header hs[100];
    h1_limits lim = { 8192, 65536, 100 };
    h1_parser p;
    char *buf = malloc(len ? len : 1);
    long r = 0;
    memcpy(buf, s, len);
    h1_parser_init(&p, response, &lim, hs);
    if (!bytewise) {
        r = h1_execute(&p, buf, len);
    } else {
        for (size_t n = 1; n <= len && r == 0; n++) {
            ASAN_POISON_MEMORY_REGION(buf + n, len - n);
            r = h1_execute(&p, buf, n);
            ASAN_UNPOISON_MEMORY_REGION(buf, len);
        }
    }
    free(buf);
    return r;
}

int main(void)
{
    for (size_t i = 0; i < sizeof(heads) / sizeof(heads[0]); i++) {
        size_t len = strlen(heads[i].in);
        for (int bw = 0; bw < 2; bw++) {
            long r = parse(heads[i].response, heads[i].in, len, bw);
            if (r != heads[i].expect) {
                printf("FAIL head %zu (%s): got %ld want %ld\n", i, bw ? "bytewise" : "whole", r, heads[i].expect);
                failures++;
            }
        }
    }
    for (size_t i = 0; i < sizeof(chunks) / sizeof(chunks[0]); i++) {
        h1_chunked c;
        char out[64];
        size_t olen = 0, pos = 0, len = strlen(chunks[i].in), consumed, off, dlen;
        int r;
        h1_chunked_init(&c, 0, UINT64_MAX, 1024);
        do {
            r = h1_chunked_step(&c, chunks[i].in + pos, len - pos, &consumed, &off, &dlen);
            if (r == H1C_DATA) { memcpy(out + olen, chunks[i].in + pos + off, dlen); olen += dlen; }
            if (r >= 0) pos += consumed;
        } while (r == H1C_DATA);
        if (r != chunks[i].expect || olen != strlen(chunks[i].body) || memcmp(out, chunks[i].body, olen)) {
            printf("FAIL chunk %zu: got %d (%zu body bytes)\n", i, r, olen);
            failures++;
        }
    }
    printf("selftest: %zu head cases x2, %zu chunked cases, %d failures\n",
           sizeof(heads) / sizeof(heads[0]), sizeof(chunks) / sizeof(chunks[0]), failures);
    return failures != 0;
}
