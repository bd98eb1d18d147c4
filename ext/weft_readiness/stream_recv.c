/*
 * stream_recv.c - the socket read under Weft::Stream#fill_now and #fill (lib/weft/stream.rb)
 * for a plain socket: one recv(2), without Ruby's IO layer.
 *
 * The same system call as BasicSocket#read_nonblock (a recvfrom), without the Ruby around it:
 * the keyword argument, the IO's checks, the result's type test and appending the scratch to
 * the buffer (String#<<) are one C call here. On a keep-alive request that is one small read,
 * for the server and the HTTP client alike. This is the read for every stream over a plain
 * (not TLS) socket; TLS reads stay with OpenSSL (the bytes on the socket are records, not
 * data).
 *
 * It is core's (this extension is core's C extension, Weft::Readiness is the other part): the
 * stream is core's, and the HTTP/1 extension builds on core, not the other way round.
 */
#include <ruby.h>
#include <ruby/io.h>
#include <errno.h>
#include <sys/socket.h>
#include <sys/types.h>
#include "stream_recv.h"

/*
 * call-seq: recv_append(socket, buffer, scratch, size) -> Integer or nil   (private)
 *
 * One non-blocking recv(2) of at most size bytes from socket, appended to buffer. Returns the
 * bytes appended (> 0), 0 when nothing is there yet (EAGAIN), nil at end of stream. Any other
 * failure raises the errno's SystemCallError, and a closed socket IOError: Weft::Stream turns
 * those into its one "peer gone" error (Weft::Stream::PEER_GONE lists them, in one place), with
 * the errno as the cause.
 *
 * The bytes land in scratch first (its capacity is grown to size; its content and length are
 * left as they were): buffer then grows by what arrived, not by size, so the buffer of an idle
 * connection keeps no spare capacity, and scratch can be shared by every stream of a thread.
 */
static VALUE stream_recv_append(VALUE self, VALUE socket, VALUE buffer, VALUE scratch, VALUE size_value)
{
    long size = NUM2LONG(size_value), length;
    ssize_t n;
    int fd, e;

    (void)self;
    if (size <= 0) rb_raise(rb_eArgError, "size must be positive");
    StringValue(buffer);
    StringValue(scratch);
    fd = rb_io_descriptor(socket); /* IOError once closed */
    /* capacity >= size; rb_str_modify_expand reallocates even when it has that already */
    length = RSTRING_LEN(scratch);
    if ((long)rb_str_capacity(scratch) < size) rb_str_modify_expand(scratch, length < size ? size - length : 0);
    else rb_str_modify(scratch);
    do {
        n = recv(fd, RSTRING_PTR(scratch), (size_t)size, MSG_DONTWAIT);
    } while (n < 0 && errno == EINTR);
    if (n > 0) {
        /* Grow buffer first: growing may run the GC, which may move an embedded scratch (a
         * small size), so its pointer is taken after. */
        rb_str_modify_expand(buffer, (long)n);
        rb_str_cat(buffer, RSTRING_PTR(scratch), (long)n);
        RB_GC_GUARD(scratch);
        return LONG2FIX((long)n);
    }
    if (n == 0) return Qnil;
    e = errno;
    if (e == EAGAIN || e == EWOULDBLOCK) return INT2FIX(0);
    rb_syserr_fail(e, "recv");
    return Qnil; /* not reached */
}

void weft_init_stream_recv(VALUE mWeft)
{
    /* lib/weft/stream.rb reopens it */
    VALUE cStream = rb_define_class_under(mWeft, "Stream", rb_cObject);
    rb_define_private_method(cStream, "recv_append", stream_recv_append, 4);
}
