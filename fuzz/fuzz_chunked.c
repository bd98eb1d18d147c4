/*
 * libFuzzer harness for the chunked decoder core.
 * Decodes the input at once and one byte at a time (each byte in its own
 * exactly-sized heap allocation, so over-reads are caught) and requires the
 * same outcome, the same decoded bytes and the same consumed length.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../ext/weft_http1/http1.h"

#define CHECK(cond) do { if (!(cond)) { \
    fprintf(stderr, "check failed: %s (line %d)\n", #cond, __LINE__); abort(); } } while (0)

/* Returns H1C_DONE/H1C_MORE or a negative status; out/outlen/used are filled. */
static int decode(h1_chunked *c, const uint8_t *in, size_t len, uint8_t *out, size_t *outlen, size_t *used)
{
    size_t pos = 0, consumed, off, dlen;
    for (;;) {
        int r = h1_chunked_step(c, (const char *)in + pos, len - pos, &consumed, &off, &dlen);
        if (r < 0) return r;
        CHECK(consumed <= len - pos);
        if (r == H1C_DATA) {
            CHECK(off + dlen <= consumed);
            memcpy(out + *outlen, in + pos + off, dlen);
            *outlen += dlen;
        }
        pos += consumed;
        *used += consumed;
        if (r != H1C_DATA) return r;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    h1_chunked a, b;
    uint8_t *out1, *out2;
    size_t len1 = 0, len2 = 0, used1 = 0, used2 = 0, n;
    int r1, r2 = H1C_MORE;

    if (size > 8192) return 0;
    out1 = malloc(size + 1);
    out2 = malloc(size + 1);

    h1_chunked_init(&a, 1000, 3000, 64);
    r1 = decode(&a, data, size, out1, &len1, &used1);
    CHECK(len1 <= size && used1 <= size);
    if (r1 == H1C_DONE) CHECK(h1_chunked_done(&a));

    h1_chunked_init(&b, 1000, 3000, 64);
    for (n = 0; n < size; n++) {
        uint8_t *one = malloc(1);
        one[0] = data[n];
        r2 = decode(&b, one, 1, out2, &len2, &used2);
        free(one);
        if (r2 != H1C_MORE) break;
    }
    if (r1 < 0) {
        CHECK(r2 < 0);
        CHECK(r1 == r2);        /* no limits depend on how input is split here */
    } else {
        CHECK(r2 == r1);
        CHECK(used1 == used2);
        CHECK(len1 == len2 && memcmp(out1, out2, len1) == 0);
    }
    free(out1);
    free(out2);
    return 0;
}
