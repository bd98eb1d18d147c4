/*
 * weft_pg.c - Weft::Postgres::NativeResultReader (weft/postgres/weft_pg): takes
 * every result of a pipelined connection that libpq has complete, in one call from Ruby; and
 * Weft::Postgres::NativeSender, which sends a named prepared statement without parameters.
 *
 * A pipelined statement's results are read with three `pg` calls each from Ruby (is_busy,
 * sync_get_result, result_status), a sync point's too, and each sync point's result becomes a
 * PG::Result only to be cleared. Here one call per read of the socket runs that loop in C: the
 * statements' results become PG::Results as `pg` makes them (pg_new_result, so their memory is
 * counted towards Ruby's GC as `pg` counts it), a sync point's result is freed at once. See
 * lib/weft/postgres/result_reader.rb for the contract and the Ruby reader it replaces.
 *
 * `pg`'s send_query_prepared zero-fills a 4 KB parameter buffer on the stack and fits the
 * connection's type map to the parameters even when there are none: 3.8% of the process's
 * CPU samples in bench/postgres/pool_profile.rb (Ruby 3.3 + YJIT), as much as libpq's own
 * building of the Bind and Execute. Without parameters none of that is needed, and
 * NativeSender calls PQsendQueryPrepared directly.
 *
 * The functions are taken from the `pg` extension Ruby has already loaded and the libpq it
 * links, looked up by name when Ruby binds this reader (.bind), not linked: `pg` exports
 * pg_get_pgconn and pg_new_result (declared in its pg.h, which other extensions such as
 * sequel_pg build against) without documenting them as an API, and the libpq that the
 * precompiled `pg` gems bundle is not the system's. A lookup that fails leaves the reader
 * unbound, and Weft reads with `pg`'s Ruby methods instead; so does a `pg` other than 1.x
 * (lib/weft/postgres/result_reader.rb), whose functions may have changed.
 */
#include <ruby.h>

#ifdef HAVE_DLFCN_H
#include <dlfcn.h>
#include <string.h>

typedef struct pg_conn PGconn;
typedef struct pg_result PGresult;

static int (*pq_is_busy)(PGconn *);
static PGresult *(*pq_get_result)(PGconn *);
static int (*pq_result_status)(const PGresult *); /* returns libpq's ExecStatusType, an enum */
static void (*pq_clear)(PGresult *);
static int (*pq_send_query_prepared)(PGconn *, const char *, int, const char *const *, const int *, const int *,
                                     int);
static PGconn *(*pg_get_pgconn)(VALUE);
static VALUE (*pg_new_result)(PGresult *, VALUE);

static int bound = 0;
static int sync_status;             /* PG::PGRES_PIPELINE_SYNC */
static unsigned long succeeded_set; /* bit n: status n means the statement ran to its end */

/* Looks `name` up in the loaded object `handle` (and what it links); 0 if absent. The POSIX
 * idiom for storing a function pointer that dlsym returns as void *. */
static int resolve(void *handle, const char *name, void *function_pointer)
{
    void *found = dlsym(handle, name);
    if (found == NULL) return 0;
    memcpy(function_pointer, &found, sizeof(found));
    return 1;
}

/*
 * call-seq: NativeResultReader.bind(pg_extension_path, sync_status, succeeded_statuses) -> true or false
 *
 * Finds the functions in the `pg` extension loaded from `pg_extension_path` (it must be loaded
 * already: it is not loaded here) and records the statuses; false if any is missing. Binds
 * NativeSender too.
 */
static VALUE reader_bind(VALUE self, VALUE path, VALUE sync, VALUE succeeded)
{
    void *handle;
    unsigned long set = 0;
    long i;
    (void)self;

    Check_Type(succeeded, T_ARRAY);
    for (i = 0; i < RARRAY_LEN(succeeded); i++) {
        long status = NUM2LONG(RARRAY_AREF(succeeded, i));
        if (status < 0 || status >= (long)(sizeof(set) * 8)) return Qfalse;
        set |= 1UL << status;
    }
    /* RTLD_NOLOAD: a handle to the object Ruby loaded, or NULL if it is not loaded. The handle
     * is kept: the functions are used for as long as the process runs, as is `pg`. */
    handle = dlopen(StringValueCStr(path), RTLD_LAZY | RTLD_NOLOAD);
    if (handle == NULL) return Qfalse;
    if (!(resolve(handle, "PQisBusy", &pq_is_busy) && resolve(handle, "PQgetResult", &pq_get_result) &&
          resolve(handle, "PQresultStatus", &pq_result_status) && resolve(handle, "PQclear", &pq_clear) &&
          resolve(handle, "PQsendQueryPrepared", &pq_send_query_prepared) &&
          resolve(handle, "pg_get_pgconn", &pg_get_pgconn) && resolve(handle, "pg_new_result", &pg_new_result))) {
        dlclose(handle);
        return Qfalse;
    }
    sync_status = NUM2INT(sync);
    succeeded_set = set;
    bound = 1;
    return Qtrue;
}

/*
 * call-seq: NativeResultReader.take(connection, results, syncs) -> Integer
 *
 * Appends to `results` what libpq has complete on the pipelined PG::Connection, without
 * waiting, in order: a PG::Result for each result of a statement, nil where a statement's
 * results end, true for a sync point. Stops when libpq would wait for more input, once `syncs`
 * sync points came, or where nothing more is expected (two ends in a row: libpq's queue is
 * empty). Returns how many of the PG::Results appended are not of a statement that ran to its
 * end (an error, a statement skipped after one: the caller looks at those).
 */
static VALUE reader_take(VALUE self, VALUE connection, VALUE results, VALUE syncs_value)
{
    long syncs = NUM2LONG(syncs_value);
    long unsucceeded = 0;
    int after_end = 0;
    PGconn *conn;
    (void)self;

    if (!bound) rb_raise(rb_eRuntimeError, "Weft::Postgres::NativeResultReader is not bound");
    Check_Type(results, T_ARRAY);
    conn = pg_get_pgconn(connection); /* raises PG::ConnectionBad when the connection is closed */
    while (syncs > 0 && !pq_is_busy(conn)) {
        PGresult *result = pq_get_result(conn);
        int status;

        if (result == NULL) {
            if (after_end) break;
            after_end = 1;
            rb_ary_push(results, Qnil);
            continue;
        }
        after_end = 0;
        status = pq_result_status(result);
        if (status == sync_status) {
            pq_clear(result);
            rb_ary_push(results, Qtrue);
            syncs--;
            continue;
        }
        if (status < 0 || status >= (int)(sizeof(succeeded_set) * 8) || !(succeeded_set & (1UL << status))) {
            unsucceeded++;
        }
        /* Wrapped at once: from here its PG::Result owns it, and the GC frees it with that. */
        rb_ary_push(results, pg_new_result(result, connection));
    }
    return LONG2NUM(unsucceeded);
}

static VALUE reader_available_p(VALUE self)
{
    (void)self;
    return Qtrue;
}

/*
 * call-seq: NativeSender.send_prepared(connection, name) -> true or false
 *
 * Queues the Bind and Execute of the prepared statement `name` (an ASCII name: it is sent as
 * it is, not converted to the connection's encoding), without parameters and with results in
 * text, on the PG::Connection, as its send_query_prepared(name, []) does when the connection
 * buffers its sends (a pipelined one: nothing is flushed here). False when libpq refuses it
 * (the connection is bad, or busy outside pipeline mode): the caller then asks `pg`, which
 * raises the error libpq gives.
 */
static VALUE sender_send_prepared(VALUE self, VALUE connection, VALUE name)
{
    PGconn *conn;
    (void)self;

    if (!bound) rb_raise(rb_eRuntimeError, "Weft::Postgres::NativeSender is not bound");
    conn = pg_get_pgconn(connection); /* raises PG::ConnectionBad when the connection is closed */
    return pq_send_query_prepared(conn, StringValueCStr(name), 0, NULL, NULL, NULL, 0) ? Qtrue : Qfalse;
}
#else
static VALUE reader_bind(VALUE self, VALUE path, VALUE sync, VALUE succeeded)
{
    (void)self; (void)path; (void)sync; (void)succeeded;
    return Qfalse;
}

static VALUE reader_take(VALUE self, VALUE connection, VALUE results, VALUE syncs)
{
    (void)self; (void)connection; (void)results; (void)syncs;
    rb_raise(rb_eNotImpError, "Weft::Postgres::NativeResultReader needs dlopen");
    return Qnil;
}

static VALUE reader_available_p(VALUE self)
{
    (void)self;
    return Qfalse;
}

static VALUE sender_send_prepared(VALUE self, VALUE connection, VALUE name)
{
    (void)self; (void)connection; (void)name;
    rb_raise(rb_eNotImpError, "Weft::Postgres::NativeSender needs dlopen");
    return Qnil;
}
#endif

void Init_weft_pg(void)
{
    VALUE mWeft = rb_define_module("Weft");
    VALUE mPostgres = rb_define_module_under(mWeft, "Postgres");
    VALUE mReader = rb_define_module_under(mPostgres, "NativeResultReader");

    rb_define_singleton_method(mReader, "available?", reader_available_p, 0);
    rb_define_singleton_method(mReader, "bind", reader_bind, 3);
    rb_define_singleton_method(mReader, "take", reader_take, 3);
    rb_define_singleton_method(rb_define_module_under(mPostgres, "NativeSender"), "send_prepared",
                               sender_send_prepared, 2);
}
