/*
 * fast_path.c - Weft::HTTP1::FastPath: a keep-alive request from the bytes
 * already read to the response on the wire, in one call.
 *
 *   fast = Weft::HTTP1::FastPath.new(statistics, host_cache, internal_paths,
 *                                    empty_input, status_lines, max_requests)
 *   fast.serve(connection, parser, stream, buffer, socket, remote_addr,
 *              env_template, requests, hijack)
 *     -> true / false   answered: whether the connection may carry another request
 *                       (the connection ends the request in statistics)
 *     -> nil            the head is not complete: nothing was consumed
 *     -> Hash           the env of a request the app was not called for (it has a
 *                       body, is for the statistics endpoints, or names a Host not
 *                       in host_cache yet): the Ruby path reads the body and calls
 *                       the app
 *     -> Array          [env, keep_alive, response, error, unsent]: the app was
 *                       called (or raised `error`, any Exception); the Ruby path
 *                       (RackAdapter#finish) writes the response, or the `unsent`
 *                       rest of one that the socket did not take at once
 *   Every answer but nil means a head was parsed: the connection counts the request.
 *
 * It does what Server::Connection#serve_one, Server::RackAdapter#call and
 * ResponseWriter.write do for the common request, with none of their Ruby
 * method calls: parse the head (raising Weft::HTTP1::ParseError as
 * RequestParser#parse does), build the env from the listener's template, have
 * the connection call the app, serialize a plain response (response_head.c,
 * the same code the Ruby writer uses) and send it with one non-blocking
 * send(2). Anything else is handed back at the point where it stops being
 * plain, so the Ruby path keeps every rule it has (bodies, Expect, HEAD,
 * 1xx/204/304, hijack, streaming bodies, rack.response_finished callbacks,
 * errors, partial writes) in one place. Measured on a hello-world app:
 * bench/results/server-profile.md.
 *
 * What it knows of the server is what it is given: the arguments above (the
 * connection's requests answered so far and its rack.hijack callable among them),
 * and the documented interfaces it calls -
 *   connection   Server::Connection#call_app(length, env), its one call back
 *                into Ruby per request: the connection drops the head from its
 *                stream, counts the request as started (the one count of
 *                requests in flight), names it for the StallDetector and calls
 *                the app; and #detached? (after it: hijacked)
 *   stream       Weft::Stream#consume, for a head handed back to the Ruby path
 *                (the buffer is the stream's to slice)
 *   statistics   Server::Statistics#server_error!, and #request_finished! when
 *                a throw leaves the app
 *   host_cache   RackAdapter's Host header => [SERVER_NAME, SERVER_PORT],
 *                read only (a Host not in it goes to the Ruby path, which adds it)
 * One call back into Ruby rather than five: each call from C into a Ruby method
 * enters the VM anew, while calls between Ruby methods stay in it (and YJIT
 * compiles them on Ruby 3.3). What that saves is small:
 * bench/results/server-connections.md.
 */
#include <ruby.h>
#include <ruby/io.h>
#include <errno.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <time.h>
#include "fast_path.h"
#include "response_head.h"

typedef struct {
    VALUE statistics;     /* #server_error!, #request_finished! */
    VALUE host_cache;     /* RackAdapter's Host header => [SERVER_NAME, SERVER_PORT] */
    VALUE internal_paths; /* Array of the statistics endpoints' paths */
    VALUE empty_input;    /* Server::EmptyInput::INSTANCE */
    VALUE status_lines;   /* ResponseWriter::STATUS_LINES */
    VALUE out;            /* the response being sent; reused, never seen by Ruby */
    VALUE date_line;      /* Server.date_line of date_second */
    time_t date_second;
    long max_requests;
    int stopping;
} fast_path;

static VALUE cServer; /* Weft::Server, for its date_line */
static ID id_call_app, id_request_finished_bang, id_server_error_bang, id_date_line, id_detached_p, id_consume;
static VALUE k_REMOTE_ADDR, k_REQUEST_METHOD, k_SERVER_PROTOCOL, k_PATH_INFO, k_HTTP_HOST,
             k_SERVER_NAME, k_SERVER_PORT, k_rack_input, k_rack_hijack, k_rack_response_finished,
             v_connection_close, v_connection_keep_alive;

static void fp_mark(void *ptr)
{
    fast_path *fp = ptr;
    rb_gc_mark(fp->statistics);
    rb_gc_mark(fp->host_cache);
    rb_gc_mark(fp->internal_paths);
    rb_gc_mark(fp->empty_input);
    rb_gc_mark(fp->status_lines);
    rb_gc_mark(fp->out);
    rb_gc_mark(fp->date_line);
}

static const rb_data_type_t fast_path_type = {
    .wrap_struct_name = "Weft::HTTP1::FastPath",
    .function = { .dmark = fp_mark, .dfree = RUBY_TYPED_DEFAULT_FREE, .dsize = NULL },
    .flags = RUBY_TYPED_FREE_IMMEDIATELY,
};

static VALUE fp_alloc(VALUE klass)
{
    fast_path *fp;
    VALUE obj = TypedData_Make_Struct(klass, fast_path, &fast_path_type, fp);
    fp->statistics = fp->host_cache = fp->internal_paths = Qnil;
    fp->empty_input = fp->status_lines = fp->out = fp->date_line = Qnil;
    return obj;
}

static fast_path *get_fp(VALUE self)
{
    fast_path *fp;
    TypedData_Get_Struct(self, fast_path, &fast_path_type, fp);
    if (NIL_P(fp->out)) rb_raise(rb_eRuntimeError, "fast path not initialized");
    return fp;
}

/* FastPath.new(statistics, host_cache, internal_paths, empty_input,
 *              status_lines, max_requests) */
static VALUE fp_initialize(VALUE self, VALUE statistics, VALUE host_cache, VALUE internal_paths,
                           VALUE empty_input, VALUE status_lines, VALUE max_requests)
{
    fast_path *fp;
    TypedData_Get_Struct(self, fast_path, &fast_path_type, fp);
    Check_Type(host_cache, T_HASH);
    Check_Type(internal_paths, T_ARRAY);
    Check_Type(status_lines, T_HASH);
    fp->statistics = statistics;
    fp->host_cache = host_cache;
    fp->internal_paths = rb_ary_dup(internal_paths);
    fp->empty_input = empty_input;
    fp->status_lines = status_lines;
    fp->max_requests = NUM2LONG(max_requests);
    fp->stopping = 0;
    fp->date_second = 0;
    fp->out = rb_str_buf_new(1024);
    return self;
}

/* FastPath#server_stopping! - responses say `connection: close` from now on
 * (the server's graceful stop began, ConnectionHost#begin_stop) */
static VALUE fp_server_stopping(VALUE self)
{
    get_fp(self)->stopping = 1;
    return self;
}

static int str_equal(VALUE str, const char *s, long n)
{
    return RB_TYPE_P(str, T_STRING) && RSTRING_LEN(str) == n && memcmp(RSTRING_PTR(str), s, (size_t)n) == 0;
}

static int internal_path(fast_path *fp, VALUE path)
{
    long i;
    for (i = 0; i < RARRAY_LEN(fp->internal_paths); i++)
        if (rb_str_equal(RARRAY_AREF(fp->internal_paths, i), path) == Qtrue) return 1;
    return 0;
}

/* RackAdapter#fill_server_name for a Host it has cached, or none (the template's
 * listener address stays). Returns 0 for a Host not cached yet: the Ruby path
 * splits and caches it, once per distinct value. */
static int fill_server_name(fast_path *fp, VALUE env)
{
    VALUE host = rb_hash_lookup(env, k_HTTP_HOST), pair;
    if (!RB_TYPE_P(host, T_STRING) || RSTRING_LEN(host) == 0) return 1;
    pair = rb_hash_lookup(fp->host_cache, host);
    if (!RB_TYPE_P(pair, T_ARRAY) || RARRAY_LEN(pair) != 2) return 0;
    rb_hash_aset(env, k_SERVER_NAME, RARRAY_AREF(pair, 0));
    rb_hash_aset(env, k_SERVER_PORT, RARRAY_AREF(pair, 1));
    return 1;
}

/* Server.date_line, asked once a second */
static VALUE date_line(fast_path *fp)
{
    time_t now = time(NULL);
    if (now != fp->date_second || NIL_P(fp->date_line)) {
        /* looked up here: the parser is loaded by the HTTP client too, without the server */
        if (!cServer) {
            cServer = rb_path2class("Weft::Server");
            rb_gc_register_mark_object(cServer);
        }
        fp->date_line = rb_funcall(cServer, id_date_line, 0);
        fp->date_second = now;
    }
    return fp->date_line;
}

static VALUE descriptor(VALUE io)
{
    return INT2NUM(rb_io_descriptor(io));
}

/* The socket's file descriptor, or -1 once it is closed (rb_io_descriptor
 * raises then; the struct's fd field is deprecated since Ruby 3.3). */
static int socket_fd(VALUE socket)
{
    int state = 0;
    VALUE fd;
    if (!RB_TYPE_P(socket, T_FILE)) return -1;
    fd = rb_protect(descriptor, socket, &state);
    if (state) {
        rb_set_errinfo(Qnil);
        return -1;
    }
    return NUM2INT(fd);
}

/* Sends what the socket takes at once. Returns the bytes sent; 0 also when it
 * would block or failed: the Ruby writer then sends the rest, waiting for the
 * socket, and reports a failure as the client gone (Weft::Stream#write). Ruby's
 * own write buffer of the socket is always empty: Weft::Stream only writes with
 * write_nonblock. */
static long send_now(VALUE socket, const char *ptr, long len)
{
    int fd = socket_fd(socket);
    ssize_t n;
    if (fd < 0) return 0;
    do {
        n = send(fd, ptr, (size_t)len, MSG_DONTWAIT | MSG_NOSIGNAL);
    } while (n < 0 && errno == EINTR);
    return n < 0 ? 0 : (long)n;
}

struct app_call {
    VALUE connection, length, env;
};

static VALUE call_app(VALUE arg)
{
    struct app_call *c = (struct app_call *)arg;
    return rb_funcall(c->connection, id_call_app, 2, c->length, c->env);
}

static VALUE handed_over(VALUE env, int keep_alive, VALUE response, VALUE error, VALUE unsent)
{
    return rb_ary_new_from_args(5, env, keep_alive ? Qtrue : Qfalse, response, error, unsent);
}

/* FastPath#serve(connection, parser, stream, buffer, socket, remote_addr,
 *                env_template, requests, hijack): see the top of this file.
 * `stream`: the connection's Weft::Stream, `buffer` its #buffer; `requests`: those
 * the connection answered before this one; `hijack`: its rack.hijack callable. */
static VALUE fp_serve(VALUE self, VALUE conn, VALUE parser, VALUE stream, VALUE buffer, VALUE socket,
                      VALUE remote_addr, VALUE env_template, VALUE requests, VALUE hijack)
{
    fast_path *fp = get_fp(self);
    const h1_parser *p;
    struct app_call call;
    VALUE env = Qnil, finished, response, status, headers, body, status_line, connection_line;
    long length, status_code, sent;
    int keep_alive, state = 0;

    StringValue(buffer);
    Check_Type(env_template, T_HASH);
    length = weft_request_parse(parser, buffer, env_template, &env);
    if (length == 0) return Qnil;
    p = weft_request_core(parser);
    rb_hash_aset(env, k_REMOTE_ADDR, remote_addr);
    if (p->chunked || p->content_length > 0 ||
        (RARRAY_LEN(fp->internal_paths) && internal_path(fp, rb_hash_lookup(env, k_PATH_INFO))) ||
        !fill_server_name(fp, env)) {
        rb_funcall(stream, id_consume, 1, LONG2NUM(length)); /* the env holds copies */
        return env;
    }
    keep_alive = p->keep_alive && NUM2LONG(requests) + 1 < fp->max_requests;

    rb_hash_aset(env, k_rack_input, fp->empty_input);
    rb_hash_aset(env, k_rack_hijack, hijack);
    finished = rb_ary_new();
    rb_hash_aset(env, k_rack_response_finished, finished);

    /* Once the connection has started the request (Connection#call_app), every way out ends
     * it in statistics: the connection when answered here, RackAdapter#finish when handed
     * over, here when a throw leaves the app. */
    call.connection = conn;
    call.length = LONG2NUM(length);
    call.env = env;
    response = rb_protect(call_app, (VALUE)&call, &state);
    if (state) {
        VALUE error = rb_errinfo();
        /* a throw or break leaves no exception: it goes on up at once */
        if (!RB_TYPE_P(error, T_OBJECT) || !rb_obj_is_kind_of(error, rb_eException)) {
            rb_funcall(fp->statistics, id_request_finished_bang, 0);
            rb_jump_tag(state);
        }
        rb_set_errinfo(Qnil);
        /* RackAdapter#finish answers an error with a 500, and raises what is not one
         * (Weft::Cancelled, Interrupt...) after the response_finished callbacks */
        return handed_over(env, keep_alive, Qnil, error, Qnil);
    }

    /* ResponseWriter.write's own conditions for the C serializer */
    if (!RB_TYPE_P(response, T_ARRAY) || RARRAY_LEN(response) != 3 || RARRAY_LEN(finished) != 0 ||
        RTEST(rb_funcall(conn, id_detached_p, 0)))
        return handed_over(env, keep_alive, response, Qnil, Qnil);
    status = RARRAY_AREF(response, 0);
    headers = RARRAY_AREF(response, 1);
    body = RARRAY_AREF(response, 2);
    if (!FIXNUM_P(status)) return handed_over(env, keep_alive, response, Qnil, Qnil);
    status_code = FIX2LONG(status);
    if (status_code < 200 || status_code > 999 || status_code == 204 || status_code == 304 ||
        str_equal(rb_hash_lookup(env, k_REQUEST_METHOD), "HEAD", 4))
        return handed_over(env, keep_alive, response, Qnil, Qnil);

    if (fp->stopping) keep_alive = 0;
    if (!keep_alive) connection_line = v_connection_close;
    else if (str_equal(rb_hash_lookup(env, k_SERVER_PROTOCOL), "HTTP/1.0", 8)) connection_line = v_connection_keep_alive;
    else connection_line = Qnil;
    status_line = rb_hash_aref(fp->status_lines, status);
    rb_str_set_len(fp->out, 0);
    if (!weft_simple_response_into(fp->out, status_line, headers, body, connection_line, date_line(fp)))
        return handed_over(env, keep_alive, response, Qnil, Qnil);

    sent = send_now(socket, RSTRING_PTR(fp->out), RSTRING_LEN(fp->out));
    if (sent < RSTRING_LEN(fp->out))
        return handed_over(env, keep_alive, response, Qnil,
                           rb_str_new(RSTRING_PTR(fp->out) + sent, RSTRING_LEN(fp->out) - sent));
    if (status_code >= 500) rb_funcall(fp->statistics, id_server_error_bang, 0);
    RB_GC_GUARD(env);
    RB_GC_GUARD(response);
    return keep_alive ? Qtrue : Qfalse;
}

static VALUE frozen(const char *s)
{
    VALUE v = rb_interned_str(s, (long)strlen(s));
    rb_gc_register_mark_object(v);
    return v;
}

void weft_init_fast_path(VALUE mHTTP1)
{
    VALUE cFast = rb_define_class_under(mHTTP1, "FastPath", rb_cObject);

    id_call_app = rb_intern("call_app");
    id_request_finished_bang = rb_intern("request_finished!");
    id_server_error_bang = rb_intern("server_error!");
    id_date_line = rb_intern("date_line");
    id_detached_p = rb_intern("detached?");
    id_consume = rb_intern("consume");
    k_REMOTE_ADDR = frozen("REMOTE_ADDR");
    k_REQUEST_METHOD = frozen("REQUEST_METHOD");
    k_SERVER_PROTOCOL = frozen("SERVER_PROTOCOL");
    k_PATH_INFO = frozen("PATH_INFO");
    k_HTTP_HOST = frozen("HTTP_HOST");
    k_SERVER_NAME = frozen("SERVER_NAME");
    k_SERVER_PORT = frozen("SERVER_PORT");
    k_rack_input = frozen("rack.input");
    k_rack_hijack = frozen("rack.hijack");
    k_rack_response_finished = frozen("rack.response_finished");
    v_connection_close = frozen("connection: close\r\n");
    v_connection_keep_alive = frozen("connection: keep-alive\r\n");

    rb_define_alloc_func(cFast, fp_alloc);
    rb_define_method(cFast, "initialize", fp_initialize, 6);
    rb_define_method(cFast, "serve", fp_serve, 9);
    rb_define_method(cFast, "server_stopping!", fp_server_stopping, 0);
}
