/*
 * weft_http1.c - Ruby binding for the pure-C core in http1.c.
 *
 * Everything Ruby-specific lives here: object wrappers, building the Rack env,
 * raising Weft::HTTP1::ParseError. The core only reports offsets and flags.
 *
 * Hot path notes: Rack keys for common headers, the fixed env keys, common
 * methods and protocol strings, and an empty QUERY_STRING are frozen, interned
 * strings created once at load time, so a typical request allocates only its
 * value strings.
 */
#include <ruby.h>
#include <string.h>
#include "http1.h"
#include "response_head.h"
#include "fast_path.h"

static VALUE mHTTP1, eParseError;
static ID id_new;

/* fixed env keys and values */
static VALUE k_REQUEST_METHOD, k_PATH_INFO, k_QUERY_STRING, k_SERVER_PROTOCOL,
             k_HTTP_HOST, v_HTTP_1_1, v_HTTP_1_0, v_ROOT, v_EMPTY;

static VALUE frozen(const char *s)
{
    VALUE v = rb_interned_str(s, (long)strlen(s));   /* frozen, deduplicated */
    rb_gc_register_mark_object(v);
    return v;
}

/* ---- common header names ------------------------------------------------- */

typedef struct {
    const char *name;           /* lowercase field name */
    size_t len;
    const char *key;            /* Rack env key */
    VALUE rkey;
} common_header;

#define H(n, k) { n, sizeof(n) - 1, k, Qnil }
static common_header commons[] = {
    H("host", "HTTP_HOST"),
    H("user-agent", "HTTP_USER_AGENT"),
    H("accept", "HTTP_ACCEPT"),
    H("accept-encoding", "HTTP_ACCEPT_ENCODING"),
    H("accept-language", "HTTP_ACCEPT_LANGUAGE"),
    H("connection", "HTTP_CONNECTION"),
    H("cookie", "HTTP_COOKIE"),
    H("referer", "HTTP_REFERER"),
    H("cache-control", "HTTP_CACHE_CONTROL"),
    H("upgrade-insecure-requests", "HTTP_UPGRADE_INSECURE_REQUESTS"),
    H("content-type", "CONTENT_TYPE"),
    H("content-length", "CONTENT_LENGTH"),
    H("origin", "HTTP_ORIGIN"),
    H("authorization", "HTTP_AUTHORIZATION"),
    H("pragma", "HTTP_PRAGMA"),
    H("dnt", "HTTP_DNT"),
    H("te", "HTTP_TE"),
    H("via", "HTTP_VIA"),
    H("range", "HTTP_RANGE"),
    H("expect", "HTTP_EXPECT"),
    H("upgrade", "HTTP_UPGRADE"),
    H("priority", "HTTP_PRIORITY"),
    H("forwarded", "HTTP_FORWARDED"),
    H("keep-alive", "HTTP_KEEP_ALIVE"),
    H("if-none-match", "HTTP_IF_NONE_MATCH"),
    H("if-modified-since", "HTTP_IF_MODIFIED_SINCE"),
    H("accept-charset", "HTTP_ACCEPT_CHARSET"),
    H("content-encoding", "HTTP_CONTENT_ENCODING"),
    H("transfer-encoding", "HTTP_TRANSFER_ENCODING"),
    H("x-forwarded-for", "HTTP_X_FORWARDED_FOR"),
    H("x-forwarded-proto", "HTTP_X_FORWARDED_PROTO"),
    H("x-forwarded-host", "HTTP_X_FORWARDED_HOST"),
    H("x-real-ip", "HTTP_X_REAL_IP"),
    H("x-request-id", "HTTP_X_REQUEST_ID"),
    H("x-requested-with", "HTTP_X_REQUESTED_WITH"),
    H("sec-fetch-dest", "HTTP_SEC_FETCH_DEST"),
    H("sec-fetch-mode", "HTTP_SEC_FETCH_MODE"),
    H("sec-fetch-site", "HTTP_SEC_FETCH_SITE"),
    H("sec-fetch-user", "HTTP_SEC_FETCH_USER"),
    H("sec-ch-ua", "HTTP_SEC_CH_UA"),
    H("sec-ch-ua-mobile", "HTTP_SEC_CH_UA_MOBILE"),
    H("sec-ch-ua-platform", "HTTP_SEC_CH_UA_PLATFORM"),
    H("sec-websocket-key", "HTTP_SEC_WEBSOCKET_KEY"),
    H("sec-websocket-version", "HTTP_SEC_WEBSOCKET_VERSION"),
};
#undef H
#define NCOMMONS (sizeof(commons) / sizeof(commons[0]))

/*
 * Lookup by (length, first letter): bucket[len][c] would be large, so we use
 * a tiny open table keyed on both and fall back to a full compare.
 */
#define CH_SLOTS 256
static signed char ch_index[CH_SLOTS];

static unsigned ch_hash(size_t len, unsigned char first_lower)
{
    return (unsigned)((len * 31u + first_lower) & (CH_SLOTS - 1));
}

static unsigned char lc(unsigned char c)
{
    return (c >= 'A' && c <= 'Z') ? (unsigned char)(c + 32) : c;
}

static int name_eq(const unsigned char *a, size_t alen, const char *lower, size_t llen)
{
    if (alen != llen) return 0;
    for (size_t i = 0; i < alen; i++)
        if (lc(a[i]) != (unsigned char)lower[i]) return 0;
    return 1;
}

static const common_header *find_common(const unsigned char *name, size_t len)
{
    unsigned h = ch_hash(len, lc(name[0]));
    for (unsigned probe = 0; probe < CH_SLOTS; probe++) {
        int idx = ch_index[(h + probe) & (CH_SLOTS - 1)];
        if (idx < 0) return NULL;
        if (name_eq(name, len, commons[idx].name, commons[idx].len)) return &commons[idx];
    }
    return NULL;
}

static void init_commons(void)
{
    memset(ch_index, -1, sizeof(ch_index));
    for (size_t i = 0; i < NCOMMONS; i++) {
        unsigned h = ch_hash(commons[i].len, (unsigned char)commons[i].name[0]);
        while (ch_index[h] >= 0) h = (h + 1) & (CH_SLOTS - 1);
        ch_index[h] = (signed char)i;
        commons[i].rkey = frozen(commons[i].key);
    }
}

/* A keyed hash of a field name, case-insensitive (same_name). rb_memhash is SipHash with a
 * key Ruby draws at random per process, so a client cannot pick names that collide. Names are
 * tokens up to max_header_bytes long: hashed in lowercased pieces. Never 0 (0 marks a hash
 * not computed yet). */
static uint64_t name_hash(const unsigned char *name, uint32_t len)
{
    unsigned char piece[64];
    uint64_t h = len;
    for (uint32_t at = 0; at < len; at += (uint32_t)sizeof(piece)) {
        uint32_t n = len - at < sizeof(piece) ? len - at : (uint32_t)sizeof(piece);
        for (uint32_t i = 0; i < n; i++) piece[i] = lc(name[at + i]);
        h = (h * UINT64_C(0x9E3779B97F4A7C15)) ^ (uint64_t)rb_memhash(piece, (long)n);
    }
    return h | 1;
}

#define NAME_PREFIX 16

/*
 * Are headers x and y the same field (names compared case-insensitively)? fill_env compares
 * names pairwise, so a comparison must not cost a name's length: 99 distinct names of 600 bytes
 * that differ only at their end made a head take ~100 times as long to parse as one of the
 * same size with short names. Names of one length are compared on their first NAME_PREFIX
 * bytes (where real names differ: accept-encoding / accept-language), then by hash
 * (`hashes`: one per header, computed once, when first needed; once both are known, by hash
 * alone), and in full only when the hashes are equal: in effect only for a real repeat.
 */
static int same_name(const unsigned char *b, const h1_header *headers, uint64_t *hashes, uint32_t x, uint32_t y)
{
    const h1_header *hx = &headers[x], *hy = &headers[y];
    const unsigned char *nx = b + hx->name_off, *ny = b + hy->name_off;
    uint32_t len = hx->name_len, prefix = len < NAME_PREFIX ? len : NAME_PREFIX;

    if (len != hy->name_len) return 0;
    if (!hashes[x] || !hashes[y]) {
        for (uint32_t i = 0; i < prefix; i++)
            if (lc(nx[i]) != lc(ny[i])) return 0;
        if (len == prefix) return 1;
        if (!hashes[x]) hashes[x] = name_hash(nx, len);
        if (!hashes[y]) hashes[y] = name_hash(ny, len);
    }
    if (hashes[x] != hashes[y]) return 0;
    for (uint32_t i = 0; i < len; i++)
        if (lc(nx[i]) != lc(ny[i])) return 0;
    return 1;
}

/* Rack key for an uncommon header: "HTTP_" + upcased name, '-' -> '_'. Interned,
 * so a header name seen on every request is looked up, not allocated. */
static VALUE rack_key(const unsigned char *name, size_t len)
{
    char stack[128];
    char *buf = stack;
    VALUE tmp = 0, key;
    if (len + 5 > sizeof(stack)) buf = ALLOCV_N(char, tmp, len + 5);
    memcpy(buf, "HTTP_", 5);
    for (size_t i = 0; i < len; i++) {
        unsigned char c = name[i];
        if (c >= 'a' && c <= 'z') c = (unsigned char)(c - 32);
        else if (c == '-') c = '_';
        buf[5 + i] = (char)c;
    }
    key = rb_interned_str(buf, (long)(len + 5));
    if (tmp) ALLOCV_END(tmp);
    return key;
}

/* ---- errors ----------------------------------------------------------------- */

NORETURN(static void raise_parse_error(int status, const char *msg));
static void raise_parse_error(int status, const char *msg)
{
    VALUE exc = rb_funcall(eParseError, id_new, 2, rb_str_new_cstr(msg ? msg : "parse error"),
                           INT2FIX(status));
    rb_exc_raise(exc);
}

/* ---- parser objects ------------------------------------------------------- */

typedef struct {
    h1_parser core;
    h1_header *headers;
    int initialized;
} rparser;

static void parser_free(void *ptr)
{
    rparser *rp = ptr;
    xfree(rp->headers);
    xfree(rp);
}

static size_t parser_memsize(const void *ptr)
{
    const rparser *rp = ptr;
    return sizeof(*rp) + (rp->headers ? (size_t)rp->core.lim.max_headers * sizeof(h1_header) : 0);
}

static const rb_data_type_t parser_type = {
    .wrap_struct_name = "Weft::HTTP1::Parser",
    .function = { .dmark = NULL, .dfree = parser_free, .dsize = parser_memsize },
    .flags = RUBY_TYPED_FREE_IMMEDIATELY,
};

static VALUE parser_alloc(VALUE klass)
{
    rparser *rp;
    VALUE obj = TypedData_Make_Struct(klass, rparser, &parser_type, rp);
    rp->headers = NULL;
    return obj;
}

static rparser *get_parser(VALUE self)
{
    rparser *rp;
    TypedData_Get_Struct(self, rparser, &parser_type, rp);
    if (!rp->initialized) rb_raise(rb_eRuntimeError, "parser not initialized");
    return rp;
}

static uint32_t limit_arg(VALUE v, const char *what)
{
    long n = NUM2LONG(v);
    if (n < 1 || n > (long)H1_MAX_LIMIT) rb_raise(rb_eArgError, "%s out of range", what);
    return (uint32_t)n;
}

static void setup(VALUE self, int is_response, VALUE max_line, VALUE max_bytes, VALUE max_headers)
{
    rparser *rp;
    h1_limits lim;
    TypedData_Get_Struct(self, rparser, &parser_type, rp);
    lim.max_line = NIL_P(max_line) ? 0 : limit_arg(max_line, "max_request_line");
    lim.max_header_bytes = limit_arg(max_bytes, "max_header_bytes");
    lim.max_headers = limit_arg(max_headers, "max_headers");
    /* joining repeated fields is quadratic in the field count; keep it bounded */
    if (lim.max_headers > 1000) rb_raise(rb_eArgError, "max_headers out of range (1..1000)");
    xfree(rp->headers);
    rp->headers = NULL; /* allocated when a message starts, see run() */
    h1_parser_init(&rp->core, is_response, &lim, NULL);
    rp->initialized = 1;
}

/*
 * The field-line array (max_headers entries, 1.6 KB by default) is only needed
 * while a head is being parsed: it is allocated when a message starts and freed
 * once the head is complete (its fields copied out) or has failed. A server
 * keeps a parser per connection, and most connections sit idle between
 * requests, so 10,000 idle connections do not hold 16 MB of empty arrays.
 */
static void release_headers(rparser *rp)
{
    xfree(rp->headers);
    rp->headers = NULL;
    rp->core.headers = NULL;
}

/* private, called by the Ruby-level initialize that handles keywords */
static VALUE req_setup(VALUE self, VALUE max_line, VALUE max_bytes, VALUE max_headers)
{
    setup(self, 0, max_line, max_bytes, max_headers);
    return self;
}

static VALUE res_setup(VALUE self, VALUE max_bytes, VALUE max_headers)
{
    setup(self, 1, Qnil, max_bytes, max_headers);
    return self;
}

static VALUE parser_reset(VALUE self)
{
    h1_parser_reset(&get_parser(self)->core);
    return self;
}

/* Feed the core; returns the head length or 0; raises on error. Starts a new
 * message if the previous call completed or failed. */
static long run(rparser *rp, VALUE buffer)
{
    long r;
    if (rp->core.head_len || rp->core.error) h1_parser_reset(&rp->core);
    if (!rp->headers) {
        rp->headers = ALLOC_N(h1_header, rp->core.lim.max_headers);
        rp->core.headers = rp->headers;
    }
    r = h1_execute(&rp->core, RSTRING_PTR(buffer), (size_t)RSTRING_LEN(buffer));
    if (r < 0) {
        release_headers(rp);
        raise_parse_error(rp->core.error, rp->core.error_msg);
    }
    return r;
}

static VALUE method_string(const unsigned char *m, size_t len)
{
    static VALUE GET, POST, HEAD, PUT, DELETE, OPTIONS, PATCH;
    if (!GET) {
        GET = frozen("GET"); POST = frozen("POST"); HEAD = frozen("HEAD"); PUT = frozen("PUT");
        DELETE = frozen("DELETE"); OPTIONS = frozen("OPTIONS"); PATCH = frozen("PATCH");
    }
    switch (len) {
    case 3:
        if (memcmp(m, "GET", 3) == 0) return GET;
        if (memcmp(m, "PUT", 3) == 0) return PUT;
        break;
    case 4:
        if (memcmp(m, "POST", 4) == 0) return POST;
        if (memcmp(m, "HEAD", 4) == 0) return HEAD;
        break;
    case 5:
        if (memcmp(m, "PATCH", 5) == 0) return PATCH;
        break;
    case 6:
        if (memcmp(m, "DELETE", 6) == 0) return DELETE;
        break;
    case 7:
        if (memcmp(m, "OPTIONS", 7) == 0) return OPTIONS;
        break;
    }
    return rb_str_new((const char *)m, (long)len);
}

/*
 * Adds the parsed head's entries (request line, headers as Rack keys) to env.
 * The head must be complete (run() returned its length); frees the field-line
 * array afterwards.
 */
static void fill_env(rparser *rp, VALUE buffer, VALUE env)
{
    h1_parser *p = &rp->core;
    const unsigned char *b;
    VALUE stack_pairs[2 * 40], *pairs = stack_pairs, tmp = 0;
    uint64_t stack_hashes[40], *hashes = stack_hashes; /* same_name's, 0 until computed */
    VALUE hashes_tmp = 0;
    long npairs = 0;

    /* Collect key/value pairs and insert them with one rb_hash_bulk_insert:
     * the table is grown once instead of once per threshold crossing. All keys
     * are frozen, so the hash can keep them without copying. The pairs array is
     * on the C stack (or a GC-marked ALLOCV buffer), so the values stay alive. */
    if ((size_t)p->nheaders + 5 > sizeof(stack_pairs) / sizeof(VALUE) / 2)
        pairs = ALLOCV_N(VALUE, tmp, 2 * ((size_t)p->nheaders + 5));
    if (p->nheaders > sizeof(stack_hashes) / sizeof(stack_hashes[0]))
        hashes = ALLOCV_N(uint64_t, hashes_tmp, p->nheaders);
    memset(hashes, 0, sizeof(hashes[0]) * p->nheaders);
#define PUT(k, v) (pairs[npairs++] = (k), pairs[npairs++] = (v))

    b = (const unsigned char *)RSTRING_PTR(buffer);
    PUT(k_REQUEST_METHOD, method_string(b + p->method_off, p->method_len));
    PUT(k_PATH_INFO, p->path_len ? rb_str_new((const char *)b + p->path_off, (long)p->path_len)
                                 : rb_str_dup(v_ROOT));
    /* No query (nearly every request): one frozen empty string for all, as Puma's and
     * Falcon's envs have it (Rack asks for a String, not an unfrozen one); one object fewer
     * per request for the GC. */
    PUT(k_QUERY_STRING, p->query_len ? rb_str_new((const char *)b + p->query_off, (long)p->query_len) : v_EMPTY);
    PUT(k_SERVER_PROTOCOL, p->http_minor ? v_HTTP_1_1 : v_HTTP_1_0);

    for (uint32_t i = 0; i < p->nheaders; i++) {
        const h1_header *h = &p->headers[i];
        const unsigned char *name = b + h->name_off;
        const common_header *ch;
        VALUE key, val;
        uint32_t j;
        int dup = 0, later = 0;

        /* An '_' would make "X_Foo" and "X-Foo" the same Rack key, which lets a
         * client spoof headers that a proxy believes it set; drop such names. */
        if (memchr(name, '_', h->name_len)) continue;

        /* Repeated fields: the first occurrence builds the joined value. The
         * quadratic scan is mostly length compares (same_name bounds the rest) and
         * max_headers bounds it. */
        for (j = 0; j < i; j++)
            if (same_name(b, p->headers, hashes, j, i)) { dup = 1; break; }
        if (dup) continue;
        for (j = i + 1; j < p->nheaders; j++)
            if (same_name(b, p->headers, hashes, j, i)) { later = 1; break; }

        ch = find_common(name, h->name_len);
        if (ch && ch->len == 14 && memcmp(ch->name, "content-length", 14) == 0) {
            /* the validated (possibly deduplicated "5, 5") value */
            PUT(ch->rkey, rb_str_new((const char *)b + p->cl_off, (long)p->cl_len));
            continue;
        }
        key = ch ? ch->rkey : rack_key(name, h->name_len);
        val = rb_str_new((const char *)b + h->value_off, (long)h->value_len);
        if (later) {
            int cookie = ch && ch->len == 6 && memcmp(ch->name, "cookie", 6) == 0;
            for (j = i + 1; j < p->nheaders; j++) {
                const h1_header *o = &p->headers[j];
                if (!same_name(b, p->headers, hashes, j, i)) continue;
                rb_str_cat(val, cookie ? "; " : ", ", 2);
                rb_str_cat(val, (const char *)b + o->value_off, (long)o->value_len);
            }
        }
        PUT(key, val);
    }

    /* RFC 9112 3.2.2: with absolute-form the target's authority is the host
     * (inserted last, so it replaces a Host header's value). */
    if (p->absolute_form)
        PUT(k_HTTP_HOST, rb_str_new((const char *)b + p->authority_off, (long)p->authority_len));
#undef PUT

    rb_hash_bulk_insert(npairs, pairs, env);
    if (tmp) ALLOCV_END(tmp);
    if (hashes_tmp) ALLOCV_END(hashes_tmp);
    release_headers(rp);
    RB_GC_GUARD(buffer);
}

/*
 * RequestParser#parse(buffer, env) -> Integer head length, or nil if incomplete.
 */
static VALUE req_parse(VALUE self, VALUE buffer, VALUE env)
{
    rparser *rp = get_parser(self);
    long r;

    StringValue(buffer);
    Check_Type(env, T_HASH);
    r = run(rp, buffer);
    if (r == 0) return Qnil;
    fill_env(rp, buffer, env);
    return LONG2NUM(r);
}

/* ---- for the fast path (fast_path.c) ---------------------------------------- */

long weft_request_parse(VALUE parser, VALUE buffer, VALUE env_template, VALUE *env)
{
    rparser *rp = get_parser(parser);
    long r = run(rp, buffer);
    if (r == 0) return 0;
    *env = rb_hash_dup(env_template);
    fill_env(rp, buffer, *env);
    return r;
}

const h1_parser *weft_request_core(VALUE parser)
{
    return &get_parser(parser)->core;
}

static h1_parser *done_core(VALUE self)
{
    rparser *rp = get_parser(self);
    if (!rp->core.head_len) rb_raise(rb_eRuntimeError, "no complete head parsed");
    return &rp->core;
}

static VALUE p_content_length(VALUE self)
{
    h1_parser *p = done_core(self);
    return p->content_length < 0 ? Qnil : LL2NUM(p->content_length);
}
static VALUE p_chunked(VALUE self) { return done_core(self)->chunked ? Qtrue : Qfalse; }
static VALUE p_keep_alive(VALUE self) { return done_core(self)->keep_alive ? Qtrue : Qfalse; }
static VALUE p_expect_continue(VALUE self) { return done_core(self)->expect_continue ? Qtrue : Qfalse; }
static VALUE p_upgrade(VALUE self) { return done_core(self)->upgrade ? Qtrue : Qfalse; }
static VALUE p_http_minor(VALUE self) { return INT2FIX(done_core(self)->http_minor); }
static VALUE p_finished(VALUE self) { return get_parser(self)->core.head_len ? Qtrue : Qfalse; }

/* ---- response parser -------------------------------------------------------- */

/* The response parser keeps its results in ivars so they stay valid after the
 * caller drops the buffer. */
static ID id_status, id_reason, id_headers;

static VALUE res_parse(VALUE self, VALUE buffer)
{
    rparser *rp = get_parser(self);
    h1_parser *p = &rp->core;
    const char *b;
    VALUE headers;
    long r;

    StringValue(buffer);
    r = run(rp, buffer);
    if (r == 0) return Qnil;

    b = RSTRING_PTR(buffer);
    headers = rb_ary_new_capa((long)p->nheaders);
    for (uint32_t i = 0; i < p->nheaders; i++) {
        const h1_header *h = &p->headers[i];
        rb_ary_push(headers, rb_assoc_new(rb_str_new(b + h->name_off, (long)h->name_len),
                                          rb_str_new(b + h->value_off, (long)h->value_len)));
    }
    rb_ivar_set(self, id_headers, headers);
    rb_ivar_set(self, id_status, INT2FIX(p->status_code));
    rb_ivar_set(self, id_reason, rb_str_new(b + p->reason_off, (long)p->reason_len));
    release_headers(rp);
    RB_GC_GUARD(buffer);
    return LONG2NUM(r);
}

static VALUE res_status(VALUE self) { done_core(self); return rb_ivar_get(self, id_status); }
static VALUE res_reason(VALUE self) { done_core(self); return rb_ivar_get(self, id_reason); }
static VALUE res_headers(VALUE self) { done_core(self); return rb_ivar_get(self, id_headers); }

/* ---- chunked decoder -------------------------------------------------------- */

typedef struct {
    h1_chunked core;
    int initialized;
} rchunked;

static const rb_data_type_t chunked_type = {
    .wrap_struct_name = "Weft::HTTP1::ChunkedDecoder",
    .function = { .dmark = NULL, .dfree = RUBY_TYPED_DEFAULT_FREE, .dsize = NULL },
    .flags = RUBY_TYPED_FREE_IMMEDIATELY,
};

static VALUE chunked_alloc(VALUE klass)
{
    rchunked *c;
    return TypedData_Make_Struct(klass, rchunked, &chunked_type, c);
}

static rchunked *get_chunked(VALUE self)
{
    rchunked *c;
    TypedData_Get_Struct(self, rchunked, &chunked_type, c);
    if (!c->initialized) rb_raise(rb_eRuntimeError, "decoder not initialized");
    return c;
}

static VALUE chunked_setup(VALUE self, VALUE max_chunk, VALUE max_body, VALUE max_trailer)
{
    rchunked *c;
    long long mc = NIL_P(max_chunk) ? 0 : NUM2LL(max_chunk);
    long long mb = NIL_P(max_body) ? 0 : NUM2LL(max_body);
    long mt = NUM2LONG(max_trailer);
    TypedData_Get_Struct(self, rchunked, &chunked_type, c);
    if (mc < 0 || (!NIL_P(max_chunk) && mc == 0)) rb_raise(rb_eArgError, "max_chunk_size must be positive");
    if (mb < 0) rb_raise(rb_eArgError, "max_body_size must not be negative");
    if (mt < 2) rb_raise(rb_eArgError, "max_trailer_bytes too small");
    h1_chunked_init(&c->core, (uint64_t)mc, NIL_P(max_body) ? UINT64_MAX : (uint64_t)mb, (size_t)mt);
    c->initialized = 1;
    return self;
}

/*
 * ChunkedDecoder#decode(input, output) -> true when the body is complete.
 * Consumed bytes are removed from the front of input; on completion, input
 * keeps whatever followed the body (e.g. a pipelined request).
 */
static VALUE chunked_decode(VALUE self, VALUE input, VALUE output)
{
    rchunked *c = get_chunked(self);
    size_t pos = 0, len, consumed, off = 0, dlen = 0;
    int r;

    StringValue(input);
    StringValue(output);
    if (input == output) rb_raise(rb_eArgError, "input and output must differ");
    rb_str_modify(input);
    rb_str_modify(output);
    len = (size_t)RSTRING_LEN(input);

    for (;;) {
        r = h1_chunked_step(&c->core, RSTRING_PTR(input) + pos, len - pos, &consumed, &off, &dlen);
        if (r < 0) {
            if (pos) rb_str_drop_bytes(input, (long)pos);
            raise_parse_error(c->core.error, c->core.error_msg);
        }
        if (r == H1C_DATA) rb_str_cat(output, RSTRING_PTR(input) + pos + off, (long)dlen);
        pos += consumed;
        if (r != H1C_DATA) break;
    }
    if (pos) rb_str_drop_bytes(input, (long)pos);
    return r == H1C_DONE ? Qtrue : Qfalse;
}

static VALUE chunked_done(VALUE self) { return h1_chunked_done(&get_chunked(self)->core) ? Qtrue : Qfalse; }
static VALUE chunked_reset(VALUE self) { h1_chunked_reset(&get_chunked(self)->core); return self; }

void Init_weft_http1(void)
{
    VALUE mWeft = rb_define_module("Weft");
    VALUE cReq, cRes, cChunked;

    mHTTP1 = rb_define_module_under(mWeft, "HTTP1");
    /* ParseError is defined in lib/weft/http1/parser.rb before this file loads;
     * define a fallback so the extension also works when required directly. */
    if (rb_const_defined_at(mHTTP1, rb_intern("ParseError")))
        eParseError = rb_const_get_at(mHTTP1, rb_intern("ParseError"));
    else
        eParseError = rb_define_class_under(mHTTP1, "ParseError", rb_eStandardError);
    rb_gc_register_mark_object(eParseError);
    id_new = rb_intern("new");
    id_status = rb_intern("@status");
    id_reason = rb_intern("@reason");
    id_headers = rb_intern("@headers");

    k_REQUEST_METHOD = frozen("REQUEST_METHOD");
    k_PATH_INFO = frozen("PATH_INFO");
    k_QUERY_STRING = frozen("QUERY_STRING");
    k_SERVER_PROTOCOL = frozen("SERVER_PROTOCOL");
    k_HTTP_HOST = frozen("HTTP_HOST");
    v_HTTP_1_1 = frozen("HTTP/1.1");
    v_HTTP_1_0 = frozen("HTTP/1.0");
    v_ROOT = frozen("/");
    v_EMPTY = frozen("");
    init_commons();
    weft_init_response_head(mHTTP1);

    cReq = rb_define_class_under(mHTTP1, "RequestParser", rb_cObject);
    rb_define_alloc_func(cReq, parser_alloc);
    rb_define_private_method(cReq, "_setup", req_setup, 3);
    rb_define_method(cReq, "parse", req_parse, 2);
    rb_define_method(cReq, "reset", parser_reset, 0);
    rb_define_method(cReq, "finished?", p_finished, 0);
    rb_define_method(cReq, "content_length", p_content_length, 0);
    rb_define_method(cReq, "chunked?", p_chunked, 0);
    rb_define_method(cReq, "keep_alive?", p_keep_alive, 0);
    rb_define_method(cReq, "expect_continue?", p_expect_continue, 0);
    rb_define_method(cReq, "upgrade?", p_upgrade, 0);
    rb_define_method(cReq, "http_minor", p_http_minor, 0);

    cRes = rb_define_class_under(mHTTP1, "ResponseParser", rb_cObject);
    rb_define_alloc_func(cRes, parser_alloc);
    rb_define_private_method(cRes, "_setup", res_setup, 2);
    rb_define_method(cRes, "parse", res_parse, 1);
    rb_define_method(cRes, "reset", parser_reset, 0);
    rb_define_method(cRes, "finished?", p_finished, 0);
    rb_define_method(cRes, "status", res_status, 0);
    rb_define_method(cRes, "reason", res_reason, 0);
    rb_define_method(cRes, "headers", res_headers, 0);
    rb_define_method(cRes, "content_length", p_content_length, 0);
    rb_define_method(cRes, "chunked?", p_chunked, 0);
    rb_define_method(cRes, "keep_alive?", p_keep_alive, 0);
    rb_define_method(cRes, "upgrade?", p_upgrade, 0);
    rb_define_method(cRes, "http_minor", p_http_minor, 0);

    cChunked = rb_define_class_under(mHTTP1, "ChunkedDecoder", rb_cObject);
    rb_define_alloc_func(cChunked, chunked_alloc);
    rb_define_private_method(cChunked, "_setup", chunked_setup, 3);
    rb_define_method(cChunked, "decode", chunked_decode, 2);
    rb_define_method(cChunked, "done?", chunked_done, 0);
    rb_define_method(cChunked, "reset", chunked_reset, 0);

    weft_init_fast_path(mHTTP1);
}
