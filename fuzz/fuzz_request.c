/*
 * libFuzzer harness for the head parser core (ext/weft_http1/http1.c).
 *
 * Besides ASan/UBSan checks, it verifies two properties:
 *  1. Feeding the input one byte at a time (the buffer grows, as in a server)
 *     gives the same outcome as parsing it at once: same head length and the
 *     same parsed fields on success; failure iff the whole parse fails.
 *     (The status may differ on failure: incremental feeding can hit a size
 *     limit before the byte that makes the whole parse fail.)
 *  2. Everything reported lies inside the head and obeys the grammar.
 * Bytes past the current prefix are poisoned, so any read beyond `len`
 * during incremental feeding is reported by ASan.
 *
 * Built as-is for requests; fuzz_response.c includes it with FUZZ_RESPONSE.
 */
#include <sanitizer/asan_interface.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../ext/weft_http1/http1.h"

#ifndef FUZZ_RESPONSE
#define FUZZ_RESPONSE 0
#endif

#define MAX_HEADERS 16

static const h1_limits limits = { 256, 1024, MAX_HEADERS };

#define CHECK(cond) do { if (!(cond)) { \
    fprintf(stderr, "check failed: %s (line %d)\n", #cond, __LINE__); abort(); } } while (0)

static int is_tchar(unsigned char c)
{
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
           (c && strchr("!#$%&'*+-.^_`|~", c));
}

static void check_result(const h1_parser *p, const unsigned char *b, long r)
{
    CHECK((size_t)r == p->head_len);
    CHECK(p->nheaders <= MAX_HEADERS);
    CHECK(p->http_minor == 0 || p->http_minor == 1);
    CHECK(p->content_length >= -1);
    if (p->chunked) CHECK(p->content_length == -1);
    for (uint32_t i = 0; i < p->nheaders; i++) {
        const h1_header *h = &p->headers[i];
        CHECK(h->name_len > 0);
        CHECK((size_t)h->name_off + h->name_len <= (size_t)r);
        CHECK((size_t)h->value_off + h->value_len <= (size_t)r);
        for (uint32_t k = 0; k < h->name_len; k++) CHECK(is_tchar(b[h->name_off + k]));
        for (uint32_t k = 0; k < h->value_len; k++) {
            unsigned char c = b[h->value_off + k];
            CHECK(c == '\t' || c >= 0x20);
            CHECK(c != 0x7f);
        }
        if (h->value_len) {
            CHECK(b[h->value_off] != ' ' && b[h->value_off] != '\t');
            CHECK(b[h->value_off + h->value_len - 1] != ' ' && b[h->value_off + h->value_len - 1] != '\t');
        }
    }
    if (!p->is_response) {
        CHECK(p->method_len > 0 && p->target_len > 0);
        CHECK(p->target_off + p->target_len <= (size_t)r);
        CHECK(p->path_off + p->path_len <= (size_t)r);
        CHECK(p->query_off + p->query_len <= (size_t)r);
        for (size_t k = 0; k < p->target_len; k++) {
            unsigned char c = b[p->target_off + k];
            CHECK(c > 0x20 && c < 0x7f && c != '#');
        }
        CHECK(memchr(b + p->path_off, '?', p->path_len) == NULL);
    } else {
        CHECK(p->status_code >= 100 && p->status_code <= 599);
        CHECK(p->reason_off + p->reason_len <= (size_t)r);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    h1_header h1[MAX_HEADERS], h2[MAX_HEADERS];
    h1_parser whole, inc;
    unsigned char *buf;
    long r1, r2 = 0;
    size_t n;

    if (size > 4096) return 0;

    h1_parser_init(&whole, FUZZ_RESPONSE, &limits, h1);
    r1 = h1_execute(&whole, (const char *)data, size);
    CHECK(h1_execute(&whole, (const char *)data, size) == r1);   /* idempotent when finished */
    if (r1 > 0) check_result(&whole, data, r1);
    else if (r1 < 0) CHECK(whole.error == -r1 && whole.error_msg);

    /* byte-by-byte with the tail poisoned */
    buf = malloc(size ? size : 1);
    memcpy(buf, data, size);
    h1_parser_init(&inc, FUZZ_RESPONSE, &limits, h2);
    for (n = 0; n <= size; n++) {
        ASAN_POISON_MEMORY_REGION(buf + n, size - n);
        r2 = h1_execute(&inc, (const char *)buf, n);
        ASAN_UNPOISON_MEMORY_REGION(buf, size);
        if (r2 != 0) break;
    }
    if (r1 > 0) {
        CHECK(r2 == r1);
        CHECK(n == (size_t)r1);
        CHECK(inc.nheaders == whole.nheaders);
        CHECK(memcmp(h1, h2, sizeof(h1_header) * whole.nheaders) == 0);
        CHECK(inc.content_length == whole.content_length);
        CHECK(inc.chunked == whole.chunked && inc.keep_alive == whole.keep_alive);
        CHECK(inc.expect_continue == whole.expect_continue && inc.upgrade == whole.upgrade);
        CHECK(inc.path_off == whole.path_off && inc.path_len == whole.path_len);
        CHECK(inc.status_code == whole.status_code);
    } else if (r1 == 0) {
        CHECK(r2 == 0);
    } else {
        CHECK(r2 < 0);
    }
    free(buf);
    return 0;
}
