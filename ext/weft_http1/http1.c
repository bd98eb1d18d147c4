/*
 * http1.c - pure-C HTTP/1.x head parser and chunked decoder (RFC 9112).
 *
 * No Ruby here: see http1.h for the design and the return conventions.
 *
 * Line terminators: CRLF, or a bare LF (RFC 9112 section 2.2 allows recipients
 * to accept it and most servers do). A bare CR is always rejected, because a
 * peer that treats CR as a line break would see different messages than we do.
 * The chunked decoder is stricter and requires CRLF everywhere, since chunk
 * framing disagreements are the classic request smuggling vector.
 *
 * Scanning: every byte of a head has to be classified anyway (strictness means
 * rejecting CTLs inside values, non-token names, ...), so instead of memchr for
 * the line end we run one tight loop per token over a 256-entry class table;
 * the loop stops exactly at the delimiter or at the first invalid byte.
 */
#include "http1.h"

#include <string.h>

/* Character classes, one bit per class. */
#define C_TCHAR  1   /* token: RFC 9110 tchar */
#define C_TARGET 2   /* request-target: visible ASCII except '#' */
#define C_VALUE  4   /* field value: HTAB, SP, VCHAR, obs-text */
#define C_HEX    8
#define C_HOST   16  /* Host value: reg-name / IP-literal / port characters */

static const unsigned char cls[256] = {
     0,  0,  0,  0,  0,  0,  0,  0,  0,  4,  0,  0,  0,  0,  0,  0, /* 0x00 */
     0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0, /* 0x10 */
     4, 23,  6,  5, 23, 23, 23, 23, 22, 22, 23, 23, 22, 23, 23,  6, /* 0x20 */
    31, 31, 31, 31, 31, 31, 31, 31, 31, 31, 22, 22,  6, 22,  6,  6, /* 0x30 */
     6, 31, 31, 31, 31, 31, 31, 23, 23, 23, 23, 23, 23, 23, 23, 23, /* 0x40 */
    23, 23, 23, 23, 23, 23, 23, 23, 23, 23, 23, 22,  6, 22,  7, 23, /* 0x50 */
     7, 31, 31, 31, 31, 31, 31, 23, 23, 23, 23, 23, 23, 23, 23, 23, /* 0x60 */
    23, 23, 23, 23, 23, 23, 23, 23, 23, 23, 23,  6,  7,  6, 23,  0, /* 0x70 */
     4,  4,  4,  4,  4,  4,  4,  4,  4,  4,  4,  4,  4,  4,  4,  4, /* 0x80 */
     4,  4,  4,  4,  4,  4,  4,  4,  4,  4,  4,  4,  4,  4,  4,  4, /* 0x90 */
     4,  4,  4,  4,  4,  4,  4,  4,  4,  4,  4,  4,  4,  4,  4,  4, /* 0xA0 */
     4,  4,  4,  4,  4,  4,  4,  4,  4,  4,  4,  4,  4,  4,  4,  4, /* 0xB0 */
     4,  4,  4,  4,  4,  4,  4,  4,  4,  4,  4,  4,  4,  4,  4,  4, /* 0xC0 */
     4,  4,  4,  4,  4,  4,  4,  4,  4,  4,  4,  4,  4,  4,  4,  4, /* 0xD0 */
     4,  4,  4,  4,  4,  4,  4,  4,  4,  4,  4,  4,  4,  4,  4,  4, /* 0xE0 */
     4,  4,  4,  4,  4,  4,  4,  4,  4,  4,  4,  4,  4,  4,  4,  4, /* 0xF0 */
};

enum {
    S_LEADING,      /* skipping empty lines before the start line */
    S_METHOD, S_TARGET, S_VERSION, S_RL_LF,
    S_RVERSION, S_RSTATUS, S_RREASON, S_SL_LF,
    S_FIELD_START, S_NAME, S_VALUE_WS, S_VALUE, S_FIELD_LF, S_END_LF,
    S_DONE, S_ERROR
};

static unsigned char lower(unsigned char c)
{
    return (c >= 'A' && c <= 'Z') ? (unsigned char)(c + 32) : c;
}

/* Case-insensitive compare of s[0,n) with a lowercase literal of length n. */
static int ieq(const unsigned char *s, size_t n, const char *lit, size_t litlen)
{
    if (n != litlen) return 0;
    for (size_t i = 0; i < n; i++)
        if (lower(s[i]) != (unsigned char)lit[i]) return 0;
    return 1;
}
#define IEQ(s, n, lit) ieq((s), (n), lit, sizeof(lit) - 1)

static long fail(h1_parser *p, int status, const char *msg)
{
    p->state = S_ERROR;
    p->error = status;
    p->error_msg = msg;
    return -(long)status;
}

/* Responses are always reported with one status; requests keep theirs. */
static long bad(h1_parser *p, int status, const char *msg)
{
    return fail(p, p->is_response ? H1_RESPONSE_ERROR : status, msg);
}

void h1_parser_init(h1_parser *p, int is_response, const h1_limits *lim, h1_header *headers)
{
    memset(p, 0, sizeof(*p));
    p->lim = *lim;
    if (p->lim.max_line > H1_MAX_LIMIT) p->lim.max_line = H1_MAX_LIMIT;
    if (p->lim.max_header_bytes > H1_MAX_LIMIT) p->lim.max_header_bytes = H1_MAX_LIMIT;
    p->is_response = is_response;
    p->headers = headers;
    h1_parser_reset(p);
}

void h1_parser_reset(h1_parser *p)
{
    h1_limits lim = p->lim;
    h1_header *headers = p->headers;
    int is_response = p->is_response;
    memset(p, 0, sizeof(*p));
    p->lim = lim;
    p->headers = headers;
    p->is_response = is_response;
    p->state = S_LEADING;
    p->content_length = -1;
}

/* ---- list-valued fields ------------------------------------------------- */

/*
 * Iterate over the elements of a comma-separated list value (RFC 9110 5.6.1).
 * Each call yields the next element with surrounding whitespace trimmed; empty
 * elements are yielded as length 0 (callers decide whether that is allowed).
 * Returns 0 when the list is exhausted.
 */
static int next_elem(const unsigned char *v, size_t len, size_t *pos,
                     const unsigned char **el, size_t *ellen)
{
    size_t i = *pos, s, e;
    if (i > len) return 0;
    s = i;
    while (i < len && v[i] != ',') i++;
    e = i;
    *pos = i + 1;               /* skips the comma; > len after the last element */
    while (s < e && (v[s] == ' ' || v[s] == '\t')) s++;
    while (e > s && (v[e - 1] == ' ' || v[e - 1] == '\t')) e--;
    *el = v + s;
    *ellen = e - s;
    return 1;
}

/* Content-Length: 1*DIGIT, possibly repeated as an identical list ("5, 5"). */
static int parse_content_length(h1_parser *p, const unsigned char *buf, const h1_header *h)
{
    const unsigned char *v = buf + h->value_off, *el;
    size_t len = h->value_len, pos = 0, ellen;

    while (next_elem(v, len, &pos, &el, &ellen)) {
        int64_t n = 0;
        if (ellen == 0) return 0;
        for (size_t i = 0; i < ellen; i++) {
            unsigned d = (unsigned)el[i] - '0';
            if (d > 9) return 0;
            if (n > (INT64_MAX - (int64_t)d) / 10) return 0;   /* 63-bit overflow */
            n = n * 10 + (int64_t)d;
        }
        if (p->content_length < 0) {
            /* CONTENT_LENGTH in env without leading zeros: Ruby's Integer() reads "010" as 8 */
            while (ellen > 1 && el[0] == '0') { el++; ellen--; }
            p->content_length = n;
            p->cl_off = (size_t)(el - buf);
            p->cl_len = ellen;
        } else if (p->content_length != n) {
            return 0;           /* conflicting lengths: ambiguous framing */
        }
    }
    return 1;
}

/*
 * Transfer-Encoding: a list of codings, possibly with parameters. We only need
 * to know whether "chunked" is present, present once, and last.
 * Returns 0 on a malformed list.
 */
static int parse_transfer_encoding(const unsigned char *buf, const h1_header *h,
                                   int *chunked_count, int *last_chunked, int *others)
{
    const unsigned char *v = buf + h->value_off, *el;
    size_t len = h->value_len, pos = 0, ellen;

    while (next_elem(v, len, &pos, &el, &ellen)) {
        size_t n = 0;
        if (ellen == 0) continue;           /* empty list elements are allowed */
        while (n < ellen && (cls[el[n]] & C_TCHAR)) n++;
        if (n == 0) return 0;
        if (n < ellen && el[n] != ';' && el[n] != ' ' && el[n] != '\t') return 0;
        if (IEQ(el, n, "chunked")) {
            if (n != ellen) return 0;       /* chunked takes no parameters */
            (*chunked_count)++;
            *last_chunked = 1;
        } else {
            (*others)++;
            *last_chunked = 0;
        }
    }
    return 1;
}

/* Connection: token list; we care about close, keep-alive and upgrade. */
static void parse_connection(const unsigned char *buf, const h1_header *h,
                             int *close, int *keep_alive, int *upgrade)
{
    const unsigned char *v = buf + h->value_off, *el;
    size_t len = h->value_len, pos = 0, ellen;

    while (next_elem(v, len, &pos, &el, &ellen)) {
        if (IEQ(el, ellen, "close")) *close = 1;
        else if (IEQ(el, ellen, "keep-alive")) *keep_alive = 1;
        else if (IEQ(el, ellen, "upgrade")) *upgrade = 1;
    }
}

/* ---- request-target ----------------------------------------------------- */

static void split_query(h1_parser *p, size_t off, size_t len, const unsigned char *buf)
{
    const unsigned char *q = memchr(buf + off, '?', len);
    if (q) {
        p->path_off = off;
        p->path_len = (size_t)(q - (buf + off));
        p->query_off = p->path_off + p->path_len + 1;
        p->query_len = len - p->path_len - 1;
    } else {
        p->path_off = off;
        p->path_len = len;
        p->query_off = off + len;
        p->query_len = 0;
    }
}

static long analyze_target(h1_parser *p, const unsigned char *buf)
{
    const unsigned char *t = buf + p->target_off;
    size_t len = p->target_len, skip;

    if (t[0] == '/') {                          /* origin-form */
        split_query(p, p->target_off, len, buf);
        return 0;
    }
    if (len == 1 && t[0] == '*') {              /* asterisk-form */
        if (!(p->method_len == 7 && memcmp(buf + p->method_off, "OPTIONS", 7) == 0))
            return fail(p, 400, "asterisk-form target is only valid for OPTIONS");
        split_query(p, p->target_off, len, buf);
        return 0;
    }
    if (p->method_len == 7 && memcmp(buf + p->method_off, "CONNECT", 7) == 0)
        return fail(p, 501, "CONNECT (authority-form) is not supported");

    /* absolute-form: http(s)://authority[/path][?query] */
    if (len >= 7 && IEQ(t, 7, "http://")) skip = 7;
    else if (len >= 8 && IEQ(t, 8, "https://")) skip = 8;
    else return fail(p, 400, "invalid request-target form");

    size_t a = skip, e = skip;
    while (e < len && t[e] != '/' && t[e] != '?') e++;
    if (e == a) return fail(p, 400, "absolute-form target without authority");
    for (size_t i = a; i < e; i++) {
        /* userinfo is deprecated and a phishing vector (RFC 9110 4.2.4) */
        if (!(cls[t[i]] & C_HOST)) return fail(p, 400, "invalid authority in request-target");
    }
    p->absolute_form = 1;
    p->authority_off = p->target_off + a;
    p->authority_len = e - a;
    split_query(p, p->target_off + e, len - e, buf);   /* path may be empty: means "/" */
    return 0;
}

/* ---- head semantics ----------------------------------------------------- */

/* Called once the blank line is seen. Returns 0 or a negated status. */
static long finish_head(h1_parser *p, const unsigned char *buf)
{
    int host_count = 0, conn_close = 0, conn_keep_alive = 0, conn_upgrade = 0;
    int upgrade_header = 0, te_chunked = 0, te_last_chunked = 0, te_others = 0;
    long r;

    if (!p->is_response && (r = analyze_target(p, buf)) < 0) return r;

    for (uint32_t i = 0; i < p->nheaders; i++) {
        const h1_header *h = &p->headers[i];
        const unsigned char *n = buf + h->name_off;

        switch (h->name_len) {
        case 4:
            if (IEQ(n, 4, "host")) {
                host_count++;
                for (uint32_t k = 0; k < h->value_len; k++)
                    if (!(cls[buf[h->value_off + k]] & C_HOST))
                        return bad(p, 400, "invalid Host value");
            }
            break;
        case 6:
            if (IEQ(n, 6, "expect") && IEQ(buf + h->value_off, h->value_len, "100-continue"))
                p->expect_continue = 1;
            break;
        case 7:
            if (IEQ(n, 7, "upgrade")) upgrade_header = 1;
            break;
        case 10:
            if (IEQ(n, 10, "connection"))
                parse_connection(buf, h, &conn_close, &conn_keep_alive, &conn_upgrade);
            break;
        case 14:
            if (IEQ(n, 14, "content-length") && !parse_content_length(p, buf, h))
                return bad(p, 400, "invalid or conflicting Content-Length");
            break;
        case 17:
            if (IEQ(n, 17, "transfer-encoding")) {
                p->has_transfer_encoding = 1;
                if (!parse_transfer_encoding(buf, h, &te_chunked, &te_last_chunked, &te_others))
                    return bad(p, 400, "malformed Transfer-Encoding");
            }
            break;
        default:
            break;
        }
    }

    if (p->http_minor == 1) p->keep_alive = !conn_close;
    else p->keep_alive = conn_keep_alive && !conn_close;
    /* A server must ignore 100-continue from HTTP/1.0 clients (RFC 9110 10.1.1). */
    if (p->http_minor == 0) p->expect_continue = 0;
    p->upgrade = conn_upgrade && upgrade_header;

    if (p->has_transfer_encoding) {
        if (p->content_length >= 0)
            return bad(p, 400, "both Transfer-Encoding and Content-Length");
        if (p->http_minor == 0)
            return bad(p, 400, "Transfer-Encoding in an HTTP/1.0 message");
        if (te_chunked > 1)
            return bad(p, 400, "chunked applied more than once");
        if (!p->is_response) {
            if (!te_last_chunked)
                return fail(p, 400, "final transfer coding of a request is not chunked");
            if (te_others)
                return fail(p, 501, "unsupported transfer coding");
            p->chunked = 1;
        } else if (te_last_chunked) {
            p->chunked = 1;
        } else {
            /* body runs until the connection closes (RFC 9112 6.3 item 4) */
            if (te_chunked) return bad(p, 400, "chunked is not the final coding");
            p->keep_alive = 0;
        }
    }

    if (!p->is_response) {
        if (host_count > 1) return fail(p, 400, "more than one Host header");
        if (host_count == 0 && p->http_minor == 1)
            return fail(p, 400, "HTTP/1.1 request without Host");
    }
    return 0;
}

/* ---- the scanner --------------------------------------------------------- */

/* Checks the 8-byte "HTTP/d.d" prefix as bytes arrive; returns 0 if still plausible. */
static int version_byte_ok(size_t k, unsigned char c)
{
    if (k < 5) return c == (unsigned char)"HTTP/"[k];
    if (k == 6) return c == '.';
    return c >= '0' && c <= '9';
}

long h1_execute(h1_parser *p, const char *cbuf, size_t len)
{
    const unsigned char *b = (const unsigned char *)cbuf;
    size_t i = p->scan;

    if (p->state == S_ERROR) return -(long)p->error;
    if (p->state == S_DONE) return (long)p->head_len;
    if (len < i) return fail(p, 400, "buffer shrank between calls");

    for (;;) {
        switch (p->state) {
        case S_LEADING:
            /* RFC 9112 2.2: ignore at least one empty line before the start line. */
            while (i < len) {
                if (b[i] == '\n') { i++; continue; }
                if (b[i] == '\r') {
                    if (i + 1 >= len) break;
                    if (b[i + 1] != '\n') return bad(p, 400, "bare CR");
                    i += 2;
                    continue;
                }
                break;
            }
            /* count empty lines against the start-line limit so they cannot pile up */
            if (i > (p->is_response ? p->lim.max_header_bytes : p->lim.max_line))
                return bad(p, 400, "too many empty lines before the start line");
            if (i >= len || b[i] == '\r') goto need_more;
            p->line_start = p->mark = i;
            p->head_start = i;
            p->state = p->is_response ? S_RVERSION : S_METHOD;
            break;

        case S_METHOD:
            while (i < len && (cls[b[i]] & C_TCHAR)) i++;
            if (i >= len) goto need_more;
            if (b[i] != ' ' || i == p->mark) return fail(p, 400, "invalid method");
            p->method_off = p->mark;
            p->method_len = i - p->mark;
            p->mark = ++i;
            p->state = S_TARGET;
            break;

        case S_TARGET:
            while (i < len && (cls[b[i]] & C_TARGET)) i++;
            if (i >= len) goto need_more;
            if (b[i] != ' ' || i == p->mark) {
                if (i - p->line_start > p->lim.max_line) return fail(p, 414, "request line too long");
                return fail(p, 400, "invalid request-target");
            }
            p->target_off = p->mark;
            p->target_len = i - p->mark;
            p->mark = ++i;
            p->state = S_VERSION;
            break;

        case S_VERSION:
        case S_RVERSION:
            while (i < len && i - p->mark < 8) {
                if (!version_byte_ok(i - p->mark, b[i])) return bad(p, 400, "invalid HTTP version");
                i++;
            }
            if (i >= len) goto need_more;
            if (b[p->mark + 5] != '1' || b[p->mark + 7] > '1')
                return bad(p, 505, "HTTP version not supported");
            p->http_minor = b[p->mark + 7] - '0';
            if (p->state == S_RVERSION) {
                if (b[i] != ' ') return bad(p, 400, "invalid status line");
                p->mark = ++i;
                p->state = S_RSTATUS;
                break;
            }
            if (i - p->line_start > p->lim.max_line) return fail(p, 414, "request line too long");
            if (b[i] == '\r') { i++; p->state = S_RL_LF; break; }
            if (b[i] != '\n') return fail(p, 400, "invalid request line ending");
            i++;
            p->head_start = i;
            p->state = S_FIELD_START;
            break;

        case S_RL_LF:
        case S_SL_LF:
            if (i >= len) goto need_more;
            if (b[i] != '\n') return bad(p, 400, "bare CR in start line");
            i++;
            if (!p->is_response) p->head_start = i;
            p->state = S_FIELD_START;
            break;

        case S_RSTATUS:
            while (i < len && i - p->mark < 3) {
                if (b[i] < '0' || b[i] > '9') return bad(p, 400, "invalid status code");
                i++;
            }
            if (i >= len) goto need_more;
            p->status_code = (b[p->mark] - '0') * 100 + (b[p->mark + 1] - '0') * 10 + (b[p->mark + 2] - '0');
            if (p->status_code < 100 || p->status_code > 599) return bad(p, 400, "invalid status code");
            /* reason-phrase may be empty; tolerate a missing SP before CRLF */
            if (b[i] == ' ') i++;
            else if (b[i] != '\r' && b[i] != '\n') return bad(p, 400, "invalid status line");
            p->mark = i;
            p->state = S_RREASON;
            break;

        case S_RREASON:
            while (i < len && (cls[b[i]] & C_VALUE)) i++;
            if (i >= len) goto need_more;
            p->reason_off = p->mark;
            p->reason_len = i - p->mark;
            if (b[i] == '\r') { i++; p->state = S_SL_LF; break; }
            if (b[i] != '\n') return bad(p, 400, "invalid character in reason phrase");
            i++;
            p->state = S_FIELD_START;
            break;

        case S_FIELD_START:
            if (i >= len) goto need_more;
            if (b[i] == '\r') { i++; p->state = S_END_LF; break; }
            if (b[i] == '\n') { i++; goto head_done; }
            /* obs-fold, or whitespace between start line and first field (RFC 9112 2.2, 5.2) */
            if (b[i] == ' ' || b[i] == '\t') return bad(p, 400, "obsolete line folding");
            if (p->nheaders >= p->lim.max_headers) return bad(p, 431, "too many header fields");
            p->mark = i;
            p->state = S_NAME;
            break;

        case S_NAME:
            while (i < len && (cls[b[i]] & C_TCHAR)) i++;
            if (i >= len) goto need_more;
            if (b[i] != ':' || i == p->mark) return bad(p, 400, "invalid header field name");
            p->headers[p->nheaders].name_off = (uint32_t)p->mark;
            p->headers[p->nheaders].name_len = (uint32_t)(i - p->mark);
            i++;
            p->state = S_VALUE_WS;
            break;

        case S_VALUE_WS:
            while (i < len && (b[i] == ' ' || b[i] == '\t')) i++;
            if (i >= len) goto need_more;
            p->mark = i;
            p->state = S_VALUE;
            break;

        case S_VALUE:
            while (i < len && (cls[b[i]] & C_VALUE)) i++;
            if (i >= len) goto need_more;
            p->mark2 = i;
            if (b[i] == '\r') { i++; p->state = S_FIELD_LF; break; }
            if (b[i] != '\n') return bad(p, 400, "invalid character in header field value");
            i++;
            goto field_done;

        case S_FIELD_LF:
            if (i >= len) goto need_more;
            if (b[i] != '\n') return bad(p, 400, "bare CR in header field");
            i++;
        field_done: {
            size_t end = p->mark2;
            h1_header *h = &p->headers[p->nheaders];
            while (end > p->mark && (b[end - 1] == ' ' || b[end - 1] == '\t')) end--;
            h->value_off = (uint32_t)p->mark;
            h->value_len = (uint32_t)(end - p->mark);
            p->nheaders++;
            if (i - p->head_start > p->lim.max_header_bytes)
                return bad(p, 431, "header section too large");
            p->state = S_FIELD_START;
            break;
        }

        case S_END_LF:
            if (i >= len) goto need_more;
            if (b[i] != '\n') return bad(p, 400, "bare CR after header section");
            i++;
            goto head_done;

        default:
            return fail(p, 500, "internal parser state error");
        }
    }

need_more:
    /* Enforce limits on what has arrived so far: a slow or endless line must
     * fail now rather than be buffered until the peer gives up. */
    p->scan = i;
    switch (p->state) {
    case S_METHOD: case S_TARGET: case S_VERSION:
        if (i - p->line_start > p->lim.max_line) return fail(p, 414, "request line too long");
        break;
    case S_LEADING: case S_RL_LF:
        break;
    default:
        if (i - p->head_start > p->lim.max_header_bytes) return bad(p, 431, "header section too large");
        break;
    }
    return 0;

head_done:
    if (i - p->head_start > p->lim.max_header_bytes) return bad(p, 431, "header section too large");
    {
        long r = finish_head(p, b);
        if (r < 0) return r;
    }
    p->scan = i;
    p->head_len = i;
    p->state = S_DONE;
    return (long)i;
}

/* ---- chunked ------------------------------------------------------------ */

enum {
    C_SIZE0, C_SIZE, C_SIZE_WS, C_EXT, C_SIZE_LF,
    C_DATA, C_DATA_CR, C_DATA_LF,
    C_TRAILER_START, C_TRAILER_NAME, C_TRAILER, C_TRAILER_LF, C_END_LF,
    C_DONE, C_ERROR
};

void h1_chunked_init(h1_chunked *c, uint64_t max_chunk, uint64_t max_body, size_t max_trailer)
{
    memset(c, 0, sizeof(*c));
    c->state = C_SIZE0;
    c->max_chunk = max_chunk;
    c->max_body = max_body;
    c->max_trailer = max_trailer;
}

void h1_chunked_reset(h1_chunked *c)
{
    h1_chunked_init(c, c->max_chunk, c->max_body, c->max_trailer);
}

int h1_chunked_done(const h1_chunked *c)
{
    return c->state == C_DONE;
}

static int cfail(h1_chunked *c, int status, const char *msg)
{
    c->state = C_ERROR;
    c->error = status;
    c->error_msg = msg;
    return -status;
}

static unsigned hexval(unsigned char ch)
{
    if (ch <= '9') return ch - '0';
    return (unsigned)(lower(ch) - 'a' + 10);
}

int h1_chunked_step(h1_chunked *c, const char *cin, size_t len, size_t *consumed,
                    size_t *data_off, size_t *data_len)
{
    const unsigned char *in = (const unsigned char *)cin;
    size_t i = 0;
    int ret = H1C_MORE;

    if (c->state == C_ERROR) { *consumed = 0; return -c->error; }
    if (c->state == C_DONE) { *consumed = 0; return H1C_DONE; }

    while (i < len) {
        unsigned char ch = in[i];
        switch (c->state) {
        case C_SIZE0:
            if (!(cls[ch] & C_HEX)) return cfail(c, 400, "invalid chunk size");
            c->size = 0;
            c->line_bytes = 0;
            c->state = C_SIZE;
            continue;               /* re-read this digit in C_SIZE */

        case C_SIZE:
            if (cls[ch] & C_HEX) {
                if (c->size > (UINT64_C(0x7fffffffffffffff) >> 4))
                    return cfail(c, 400, "chunk size overflow");
                c->size = (c->size << 4) | hexval(ch);
            } else if (ch == ';') {
                c->state = C_EXT;
            } else if (ch == ' ' || ch == '\t') {
                c->state = C_SIZE_WS;
            } else if (ch == '\r') {
                c->state = C_SIZE_LF;
            } else {
                return cfail(c, 400, "invalid chunk size");
            }
            break;

        case C_SIZE_WS:             /* BWS is only allowed before a chunk-ext */
            if (ch == ';') c->state = C_EXT;
            else if (ch != ' ' && ch != '\t') return cfail(c, 400, "invalid chunk size line");
            break;

        case C_EXT:                 /* extensions are skipped, only their bytes are checked */
            if (ch == '\r') c->state = C_SIZE_LF;
            else if (!(cls[ch] & C_VALUE)) return cfail(c, 400, "invalid chunk extension");
            break;

        case C_SIZE_LF:
            if (ch != '\n') return cfail(c, 400, "chunk size line not terminated by CRLF");
            if (c->size == 0) {
                c->state = C_TRAILER_START;
                c->trailer_bytes = 0;
            } else {
                if (c->max_chunk && c->size > c->max_chunk) return cfail(c, 413, "chunk too large");
                /* total <= max_body always holds, so the subtraction cannot wrap */
                if (c->size > c->max_body - c->total) return cfail(c, 413, "chunked body too large");
                c->total += c->size;
                c->remaining = c->size;
                c->state = C_DATA;
            }
            break;

        case C_DATA: {
            size_t avail = len - i;
            if ((uint64_t)avail > c->remaining) avail = (size_t)c->remaining;
            *data_off = i;
            *data_len = avail;
            i += avail;
            c->remaining -= avail;
            if (c->remaining == 0) c->state = C_DATA_CR;
            *consumed = i;
            return H1C_DATA;
        }

        case C_DATA_CR:
            if (ch != '\r') return cfail(c, 400, "missing CRLF after chunk data");
            c->state = C_DATA_LF;
            break;

        case C_DATA_LF:
            if (ch != '\n') return cfail(c, 400, "missing CRLF after chunk data");
            c->state = C_SIZE0;
            break;

        /* A trailer line is a field line, as in the head: a token, a colon right after it (no
         * whitespace before it: RFC 9112 section 5.1), a value. Skipped without the colon, a line
         * such as "GET /x HTTP/1.1" hid a request from this server that a front end ending the
         * body at the last chunk would have forwarded. */
        case C_TRAILER_START:
            if (ch == '\r') c->state = C_END_LF;
            else if (cls[ch] & C_TCHAR) c->state = C_TRAILER_NAME;
            else return cfail(c, 400, "invalid trailer field");
            break;

        case C_TRAILER_NAME:
            if (ch == ':') c->state = C_TRAILER;
            else if (!(cls[ch] & C_TCHAR)) return cfail(c, 400, "invalid trailer field name");
            break;

        case C_TRAILER:
            if (ch == '\r') c->state = C_TRAILER_LF;
            else if (!(cls[ch] & C_VALUE)) return cfail(c, 400, "invalid trailer field");
            break;

        case C_TRAILER_LF:
            if (ch != '\n') return cfail(c, 400, "trailer line not terminated by CRLF");
            c->state = C_TRAILER_START;
            break;

        case C_END_LF:
            if (ch != '\n') return cfail(c, 400, "chunked body not terminated by CRLF");
            c->state = C_DONE;
            *consumed = i + 1;
            return H1C_DONE;

        default:
            return cfail(c, 500, "internal chunked state error");
        }

        /* bound the bytes of non-data lines (size line + extensions, trailers) */
        if (c->state >= C_TRAILER_START) {
            if (++c->trailer_bytes > c->max_trailer) return cfail(c, 400, "trailer section too large");
        } else if (c->state <= C_SIZE_LF) {
            if (++c->line_bytes > H1_CHUNK_MAX_LINE) return cfail(c, 400, "chunk size line too long");
        }
        i++;
    }
    *consumed = i;
    return ret;
}
