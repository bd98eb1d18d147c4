/*
 * fast_path.h - Weft::HTTP1::FastPath (fast_path.c) and what it uses of the
 * request parser's binding (weft_http1.c).
 */
#ifndef WEFT_FAST_PATH_H
#define WEFT_FAST_PATH_H

#include <ruby.h>
#include "http1.h"

void weft_init_fast_path(VALUE mHTTP1);

/* Runs a RequestParser over buffer. Returns 0 while the head is incomplete;
 * else its length, with *env a copy of env_template holding the parsed request
 * line and headers. Raises Weft::HTTP1::ParseError like RequestParser#parse. */
long weft_request_parse(VALUE parser, VALUE buffer, VALUE env_template, VALUE *env);

/* The parser's state after a complete head (content length, keep-alive...). */
const h1_parser *weft_request_core(VALUE parser);

#endif
