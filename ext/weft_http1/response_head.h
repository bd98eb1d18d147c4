/*
 * response_head.h - Weft::HTTP1.simple_response (see response_head.c).
 */
#ifndef WEFT_RESPONSE_HEAD_H
#define WEFT_RESPONSE_HEAD_H

#include <ruby.h>

void weft_init_response_head(VALUE mHTTP1);

/* Appends the response (head and body) to `out` and returns 1, or returns 0
 * for anything the Ruby writer must handle (`out` then holds a partial head). */
int weft_simple_response_into(VALUE out, VALUE status_line, VALUE headers, VALUE body,
                              VALUE connection_line, VALUE date_line);

#endif
