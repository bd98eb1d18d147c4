/*
 * response_head.c - the response most Rack apps send, serialized in one pass.
 *
 *   Weft::HTTP1.simple_response(status_line, headers, body, connection_line, date_line)
 *     -> String (head and body, ready to write) or nil
 *
 * Handles a Hash of String => String headers with token names and single-line
 * values, and an Array of Strings as the body (at most SIMPLE_BODY_LIMIT bytes).
 * For anything else - a header the writer must interpret (content-length,
 * connection, transfer-encoding, keep-alive, rack.*), an Array or non-String
 * value, a name or value that must be rejected - it returns nil and
 * Weft::Server::ResponseWriter's Ruby code writes the response, so the two can
 * never disagree about what is valid: this only ever does the easy case.
 *
 * Measured on a hello-world app: the Ruby writer was about a fifth of the
 * server's CPU time per request (docs/server.md, "Per-request cost").
 */
#include <ruby.h>
#include <stdio.h>
#include <string.h>
#include "response_head.h"

/* ResponseWriter::COALESCE_LIMIT: larger bodies are written apart from the head */
#define SIMPLE_BODY_LIMIT 65536

/* RFC 9110 tchar */
static unsigned char tchar[256];

typedef struct {
    VALUE out;
    int dated;      /* the app sent its own date header */
    int fallback;   /* something the Ruby writer must handle */
} head_state;

static int lower_equal(const char *p, long n, const char *lower)
{
    long i;
    if ((long)strlen(lower) != n) return 0;
    for (i = 0; i < n; i++) {
        char c = p[i];
        if (c >= 'A' && c <= 'Z') c = (char)(c + ('a' - 'A'));
        if (c != lower[i]) return 0;
    }
    return 1;
}

/* 1: the writer interprets this header itself (fall back); 0: a plain header */
static int interpreted(const char *p, long n)
{
    if (n >= 5 && lower_equal(p, 5, "rack.")) return 1;
    return lower_equal(p, n, "content-length") || lower_equal(p, n, "connection") ||
           lower_equal(p, n, "transfer-encoding") || lower_equal(p, n, "keep-alive");
}

static int plain_name(const unsigned char *p, long n)
{
    long i;
    if (n == 0) return 0;
    for (i = 0; i < n; i++)
        if (!tchar[p[i]]) return 0;
    return 1;
}

static int one_line(const char *p, long n)
{
    long i;
    for (i = 0; i < n; i++)
        if (p[i] == '\r' || p[i] == '\n' || p[i] == '\0') return 0;
    return 1;
}

static int append_header(VALUE name, VALUE value, VALUE arg)
{
    head_state *st = (head_state *)arg;
    const char *n, *v;
    long nlen, vlen;

    if (!RB_TYPE_P(name, T_STRING) || !RB_TYPE_P(value, T_STRING)) {
        st->fallback = 1;
        return ST_STOP;
    }
    n = RSTRING_PTR(name);
    nlen = RSTRING_LEN(name);
    v = RSTRING_PTR(value);
    vlen = RSTRING_LEN(value);
    if (!plain_name((const unsigned char *)n, nlen) || interpreted(n, nlen) || !one_line(v, vlen)) {
        st->fallback = 1;
        return ST_STOP;
    }
    if (lower_equal(n, nlen, "date")) st->dated = 1;
    rb_str_buf_cat(st->out, n, nlen);
    rb_str_buf_cat(st->out, ": ", 2);
    rb_str_buf_cat(st->out, v, vlen);
    rb_str_buf_cat(st->out, "\r\n", 2);
    return ST_CONTINUE;
}

int weft_simple_response_into(VALUE out, VALUE status_line, VALUE headers, VALUE body,
                              VALUE connection_line, VALUE date_line)
{
    head_state st;
    long i, parts, length = 0;
    char line[48];
    int line_len;

    if (!RB_TYPE_P(headers, T_HASH) || !RB_TYPE_P(body, T_ARRAY)) return 0;
    StringValue(status_line);
    StringValue(date_line);
    if (!NIL_P(connection_line)) StringValue(connection_line);

    parts = RARRAY_LEN(body);
    for (i = 0; i < parts; i++) {
        VALUE part = RARRAY_AREF(body, i);
        if (!RB_TYPE_P(part, T_STRING)) return 0;
        length += RSTRING_LEN(part);
        if (length > SIMPLE_BODY_LIMIT) return 0;
    }

    st.out = out;
    st.dated = 0;
    st.fallback = 0;
    rb_str_buf_cat(st.out, RSTRING_PTR(status_line), RSTRING_LEN(status_line));
    rb_hash_foreach(headers, append_header, (VALUE)&st);
    if (st.fallback) return 0;
    if (!st.dated) rb_str_buf_cat(st.out, RSTRING_PTR(date_line), RSTRING_LEN(date_line));
    line_len = snprintf(line, sizeof(line), "content-length: %ld\r\n", length);
    rb_str_buf_cat(st.out, line, line_len);
    if (!NIL_P(connection_line))
        rb_str_buf_cat(st.out, RSTRING_PTR(connection_line), RSTRING_LEN(connection_line));
    rb_str_buf_cat(st.out, "\r\n", 2);
    /* the parts were checked above; the body Array cannot change meanwhile
     * (nothing here calls back into Ruby) */
    for (i = 0; i < parts; i++) {
        VALUE part = RARRAY_AREF(body, i);
        rb_str_buf_cat(st.out, RSTRING_PTR(part), RSTRING_LEN(part));
    }
    return 1;
}

static VALUE simple_response(VALUE self, VALUE status_line, VALUE headers, VALUE body,
                             VALUE connection_line, VALUE date_line)
{
    VALUE out = rb_str_buf_new(256);
    (void)self;
    return weft_simple_response_into(out, status_line, headers, body, connection_line, date_line) ? out : Qnil;
}

void weft_init_response_head(VALUE mHTTP1)
{
    const char *extra = "!#$%&'*+-.^_`|~";
    int c;

    for (c = '0'; c <= '9'; c++) tchar[c] = 1;
    for (c = 'a'; c <= 'z'; c++) tchar[c] = 1;
    for (c = 'A'; c <= 'Z'; c++) tchar[c] = 1;
    for (; *extra; extra++) tchar[(unsigned char)*extra] = 1;
    rb_define_module_function(mHTTP1, "simple_response", simple_response, 5);
}
