/*
 * http1.h - pure-C core of Weft's HTTP/1.1 parser.
 *
 * This file and http1.c contain no Ruby calls so that the exact same code
 * can be linked into libFuzzer harnesses (fuzz/) and a plain C self-test.
 * The Ruby binding lives in weft_http1.c.
 *
 * Design:
 *  - The head parser is resumable. The caller keeps all received bytes in one
 *    buffer that starts at the first byte of the message and only grows (new
 *    bytes are appended). Each h1_execute() call continues where the previous
 *    one stopped, so feeding a head one byte at a time costs O(n) in total,
 *    and invalid bytes are rejected as soon as they arrive.
 *  - Results are byte offsets into that buffer, never pointers, because the
 *    caller's buffer may be reallocated between calls.
 *  - Return convention of the entry points: > 0 bytes consumed (the head is
 *    complete), 0 need more input, < 0 the negated HTTP status to answer with.
 */
#ifndef WEFT_HTTP1_H
#define WEFT_HTTP1_H

#include <stddef.h>
#include <stdint.h>

/* One header field line: name and (whitespace-trimmed) value as offsets. */
typedef struct {
    uint32_t name_off, name_len;
    uint32_t value_off, value_len;
} h1_header;

typedef struct {
    uint32_t max_line;          /* request line (requests only), excluding CRLF */
    uint32_t max_header_bytes;  /* field lines + final blank line (responses: + status line) */
    uint32_t max_headers;       /* number of field lines; also the capacity of `headers` */
} h1_limits;

/* Hard ceiling so every offset fits in uint32_t. */
#define H1_MAX_LIMIT (16u * 1024u * 1024u)

typedef struct {
    /* configuration */
    h1_limits lim;
    int is_response;
    h1_header *headers;         /* caller-owned array of lim.max_headers entries */

    /* resumable scanner state */
    int state;
    size_t scan;                /* next byte to examine */
    size_t line_start;          /* first byte of the start line */
    size_t head_start;          /* first byte counted against max_header_bytes */
    size_t mark;                /* start of the token being scanned */
    size_t mark2;               /* end of a field value (position of CR/LF) */
    uint32_t nheaders;          /* completed field lines */

    /* start line */
    size_t method_off, method_len;
    size_t target_off, target_len;
    size_t reason_off, reason_len;
    int status_code;            /* responses */
    int http_minor;             /* 0 or 1 */

    /* request-target decomposition (requests) */
    size_t path_off, path_len;  /* path_len == 0 with absolute-form means "/" */
    size_t query_off, query_len;
    size_t authority_off, authority_len; /* absolute-form only */
    int absolute_form;

    /* framing/connection semantics, valid once the head is complete */
    int64_t content_length;     /* -1: no Content-Length */
    size_t cl_off, cl_len;      /* digits of the (first) Content-Length value */
    int chunked;
    int keep_alive;
    int expect_continue;
    int upgrade;
    int has_transfer_encoding;

    size_t head_len;            /* bytes of the complete head */
    int error;                  /* HTTP status once failed, else 0 */
    const char *error_msg;      /* static string describing the failure */
} h1_parser;

void h1_parser_init(h1_parser *p, int is_response, const h1_limits *lim, h1_header *headers);
void h1_parser_reset(h1_parser *p);
long h1_execute(h1_parser *p, const char *buf, size_t len);

/* Status used for every malformed response (client side). */
#define H1_RESPONSE_ERROR 502

/* ---- chunked transfer coding ------------------------------------------ */

typedef struct {
    int state;
    uint64_t size;              /* size of the chunk being read */
    uint64_t remaining;         /* data bytes left in the current chunk */
    uint64_t max_chunk;         /* 0: unlimited */
    uint64_t max_body;          /* data bytes of the whole body; UINT64_MAX: unlimited */
    uint64_t total;             /* data bytes announced by the size lines so far */
    size_t line_bytes;          /* bytes in the current size line (bounds extensions) */
    size_t trailer_bytes;       /* bytes of trailer section so far */
    size_t max_trailer;
    int error;
    const char *error_msg;
} h1_chunked;

#define H1_CHUNK_MAX_LINE 4096  /* size line incl. extensions */

enum { H1C_MORE = 0, H1C_DATA = 1, H1C_DONE = 2 };

/*
 * max_chunk bounds each chunk (0: unlimited), max_body the sum of all chunks
 * (UINT64_MAX: unlimited). Both are checked when a size line ends, before any
 * of that chunk's data is read: a chunk over max_chunk fails with 413 "chunk
 * too large", one that would take the body past max_body with 413 "chunked
 * body too large".
 */
void h1_chunked_init(h1_chunked *c, uint64_t max_chunk, uint64_t max_body, size_t max_trailer);
void h1_chunked_reset(h1_chunked *c);
int h1_chunked_done(const h1_chunked *c);
/*
 * Process bytes from in[0, len). Sets *consumed to the bytes used (always all
 * bytes examined: the state keeps partial sizes). Returns H1C_DATA with body
 * bytes at in[*data_off, *data_off + *data_len) (stop and call again with the
 * rest), H1C_MORE when everything was consumed without finishing, H1C_DONE
 * after the last CRLF of the trailer section, or a negated HTTP status.
 */
int h1_chunked_step(h1_chunked *c, const char *in, size_t len, size_t *consumed,
                    size_t *data_off, size_t *data_len);

#endif
