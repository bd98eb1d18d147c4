/*
 * stream_recv.h - Weft::Stream's C part (stream_recv.c), set up by Init_weft_readiness.
 */
#ifndef WEFT_STREAM_RECV_H
#define WEFT_STREAM_RECV_H

#include <ruby.h>

void weft_init_stream_recv(VALUE mWeft);

#endif
