/*
 * weft_readiness.c - core's C extension (weft/weft_readiness): Weft::Readiness, readiness
 * notification with no fiber per IO (this file), Weft::Stream's socket read (stream_recv.c),
 * and Weft::SharedCounters, memory shared with forked children (shared_counters.c).
 *
 * A reactor wait (io-event's io_wait) needs a fiber parked per IO. To watch many IOs that are
 * usually silent (idle keep-alive connections), this keeps them in a private epoll instance
 * instead. Its descriptor (#to_io) is readable while any registration has fired, so one fiber
 * waits on it through the reactor like on any socket, then #collect lists what is ready.
 *
 * Each registration is one-shot (EPOLLONESHOT): it fires once, then stays disarmed until the
 * IO is registered again. What a registration returns from #collect is kept in a Ruby Array
 * indexed by descriptor, so no Ruby code ever sees a struct epoll_event.
 */
#include <ruby.h>
#include <ruby/io.h>
#include "stream_recv.h"
#include "shared_counters.h"

static VALUE cReadiness;

#ifdef HAVE_SYS_EPOLL_H
#include <sys/epoll.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>

/* Events read per epoll_wait; #collect repeats while a batch comes back full. */
#define BATCH 256
/* Readable, or the peer closed its end (a hang-up must wake the owner too, to close). */
#define WATCHED_EVENTS (EPOLLIN | EPOLLRDHUP | EPOLLONESHOT)

typedef struct {
    VALUE io;                /* the epoll descriptor; the IO owns (closes) it */
    VALUE values;            /* values[fd]: what #collect returns for fd; nil when none pending */
    unsigned char *in_set;   /* in_set[fd]: fd was added to the epoll set (a hint, see arm()) */
    long in_set_len;
    struct epoll_event events[BATCH];
} readiness;

static void readiness_mark(void *ptr)
{
    readiness *r = ptr;
    rb_gc_mark(r->io);
    rb_gc_mark(r->values);
}

static void readiness_free(void *ptr)
{
    readiness *r = ptr;
    free(r->in_set);
    xfree(r);
}

static size_t readiness_memsize(const void *ptr)
{
    const readiness *r = ptr;
    return sizeof(*r) + (size_t)r->in_set_len;
}

static const rb_data_type_t readiness_type = {
    .wrap_struct_name = "Weft::Readiness",
    .function = { .dmark = readiness_mark, .dfree = readiness_free, .dsize = readiness_memsize },
    .flags = RUBY_TYPED_FREE_IMMEDIATELY,
};

static VALUE readiness_alloc(VALUE klass)
{
    readiness *r;
    VALUE self = TypedData_Make_Struct(klass, readiness, &readiness_type, r);
    r->io = Qnil;
    r->values = Qnil;
    return self;
}

static readiness *get(VALUE self)
{
    readiness *r;
    TypedData_Get_Struct(self, readiness, &readiness_type, r);
    if (NIL_P(r->io)) rb_raise(rb_eIOError, "uninitialized Weft::Readiness");
    return r;
}

/* The epoll descriptor; raises IOError once #close was called. */
static int epoll_fd(readiness *r)
{
    return rb_io_descriptor(r->io);
}

static int was_in_set(const readiness *r, int fd)
{
    return fd < r->in_set_len && r->in_set[fd];
}

static void set_in_set(readiness *r, int fd, int value)
{
    if (fd >= r->in_set_len) {
        long length = r->in_set_len ? r->in_set_len : 1024;
        unsigned char *grown;
        if (!value) return;
        while (length <= fd) length *= 2;
        grown = realloc(r->in_set, (size_t)length);
        if (!grown) rb_memerror();
        memset(grown + r->in_set_len, 0, (size_t)(length - r->in_set_len));
        r->in_set = grown;
        r->in_set_len = length;
    }
    r->in_set[fd] = (unsigned char)value;
}

/*
 * Arms a one-shot watch on fd. A registration that fired stays in the epoll set, disarmed:
 * re-arming it is EPOLL_CTL_MOD, a new one EPOLL_CTL_ADD. The in_set hint picks the likely
 * one; it is wrong after the descriptor was closed (the kernel drops it from the set) and its
 * number reused, so the other operation is tried when the first says so.
 */
static int arm(readiness *r, int epfd, int fd)
{
    struct epoll_event event;
    int known = was_in_set(r, fd);
    memset(&event, 0, sizeof(event));
    event.events = WATCHED_EVENTS;
    event.data.fd = fd;
    if (epoll_ctl(epfd, known ? EPOLL_CTL_MOD : EPOLL_CTL_ADD, fd, &event) == 0) return 0;
    if (errno != (known ? ENOENT : EEXIST)) return -1;
    return epoll_ctl(epfd, known ? EPOLL_CTL_ADD : EPOLL_CTL_MOD, fd, &event);
}

/*
 * call-seq: Weft::Readiness.new
 *
 * A new, empty set (one epoll instance, close-on-exec). It belongs to the process that made
 * it: a forked child shares the kernel object, so make it in the process that uses it.
 */
static VALUE readiness_initialize(VALUE self)
{
    readiness *r;
    int fd;
    TypedData_Get_Struct(self, readiness, &readiness_type, r);
    if (!NIL_P(r->io)) rb_raise(rb_eRuntimeError, "already initialized");
    fd = epoll_create1(EPOLL_CLOEXEC);
    if (fd < 0) rb_sys_fail("epoll_create1");
    r->values = rb_ary_new();
    r->io = rb_io_fdopen(fd, O_RDONLY, NULL);
    return self;
}

/*
 * call-seq: to_io -> IO
 *
 * The descriptor to wait on (IO#wait_readable, through the reactor): readable while a
 * registration has fired and was not collected yet.
 */
static VALUE readiness_to_io(VALUE self)
{
    return get(self)->io;
}

/*
 * call-seq: register(io, value = io) -> self
 *
 * Watches io until it is readable or its peer hangs up, once: #collect then returns value,
 * and io is not watched any more until registered again. Registering an io already watched
 * replaces its value. Deregister an io before closing it: otherwise its value stays referenced
 * until the descriptor number is reused (the kernel forgets a closed descriptor by itself).
 * Raises IOError for a closed io, SystemCallError when epoll refuses it (e.g. a regular file).
 */
static VALUE readiness_register(int argc, VALUE *argv, VALUE self)
{
    readiness *r = get(self);
    VALUE io, value;
    int epfd, fd;
    rb_scan_args(argc, argv, "11", &io, &value);
    io = rb_io_get_io(io);
    if (argc < 2) value = io;
    if (NIL_P(value)) rb_raise(rb_eArgError, "value must not be nil");
    epfd = epoll_fd(r);
    fd = rb_io_descriptor(io);
    if (arm(r, epfd, fd) != 0) rb_sys_fail("epoll_ctl");
    set_in_set(r, fd, 1);
    rb_ary_store(r->values, fd, value);
    return self;
}

/*
 * call-seq: deregister(io) -> true or false
 *
 * Stops watching io. Returns whether its registration was pending (registered, not yet
 * collected). A closed io is not watched any more by the kernel: false.
 */
static VALUE readiness_deregister(VALUE self, VALUE io)
{
    readiness *r = get(self);
    int epfd = epoll_fd(r), fd;
    VALUE pending;
    io = rb_io_get_io(io);
    if (RTEST(rb_funcall(io, rb_intern("closed?"), 0))) return Qfalse;
    fd = rb_io_descriptor(io);
    if (epoll_ctl(epfd, EPOLL_CTL_DEL, fd, NULL) != 0 && errno != ENOENT) rb_sys_fail("epoll_ctl");
    set_in_set(r, fd, 0);
    pending = rb_ary_entry(r->values, fd);
    if (NIL_P(pending)) return Qfalse;
    rb_ary_store(r->values, fd, Qnil);
    return Qtrue;
}

/*
 * call-seq: collect -> Array
 *
 * The values of the registrations that fired since the last call, each once; never blocks.
 * Empty when none did.
 */
static VALUE readiness_collect(VALUE self)
{
    readiness *r = get(self);
    int epfd = epoll_fd(r);
    VALUE ready = rb_ary_new();
    for (;;) {
        int count = epoll_wait(epfd, r->events, BATCH, 0), i;
        if (count < 0) {
            if (errno == EINTR) continue;
            rb_sys_fail("epoll_wait");
        }
        for (i = 0; i < count; i++) {
            int fd = r->events[i].data.fd;
            VALUE value = rb_ary_entry(r->values, fd);
            if (NIL_P(value)) continue; /* deregistered meanwhile */
            rb_ary_store(r->values, fd, Qnil);
            rb_ary_push(ready, value);
        }
        if (count < BATCH) return ready;
    }
}

/*
 * call-seq: close -> nil
 *
 * Closes the epoll descriptor and forgets every registration. Idempotent.
 */
static VALUE readiness_close(VALUE self)
{
    readiness *r = get(self);
    if (!RTEST(rb_funcall(r->io, rb_intern("closed?"), 0))) rb_io_close(r->io);
    rb_ary_clear(r->values);
    free(r->in_set);
    r->in_set = NULL;
    r->in_set_len = 0;
    return Qnil;
}

/* call-seq: closed? -> true or false */
static VALUE readiness_closed_p(VALUE self)
{
    return rb_funcall(get(self)->io, rb_intern("closed?"), 0);
}

/*
 * call-seq: Weft::Readiness.available? -> true or false
 *
 * Whether this platform has the notification Readiness is built on (epoll: Linux).
 */
static VALUE readiness_available_p(VALUE klass)
{
    (void)klass;
    return Qtrue;
}

static void define_methods(void)
{
    rb_define_alloc_func(cReadiness, readiness_alloc);
    rb_define_method(cReadiness, "initialize", readiness_initialize, 0);
    rb_define_method(cReadiness, "to_io", readiness_to_io, 0);
    rb_define_method(cReadiness, "register", readiness_register, -1);
    rb_define_method(cReadiness, "deregister", readiness_deregister, 1);
    rb_define_method(cReadiness, "collect", readiness_collect, 0);
    rb_define_method(cReadiness, "close", readiness_close, 0);
    rb_define_method(cReadiness, "closed?", readiness_closed_p, 0);
    rb_define_singleton_method(cReadiness, "available?", readiness_available_p, 0);
}

#else /* no epoll */

static VALUE readiness_available_p(VALUE klass)
{
    (void)klass;
    return Qfalse;
}

static void define_methods(void)
{
    rb_define_method(cReadiness, "initialize", rb_f_notimplement, -1);
    rb_define_singleton_method(cReadiness, "available?", readiness_available_p, 0);
}

#endif

void Init_weft_readiness(void)
{
    VALUE mWeft = rb_define_module("Weft");
    cReadiness = rb_define_class_under(mWeft, "Readiness", rb_cObject);
    define_methods();
    weft_init_stream_recv(mWeft);
    weft_init_shared_counters(mWeft);
}
