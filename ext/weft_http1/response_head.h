/*
 * response_head.h - Weft::HTTP1.simple_response (see response_head.c).
 */
#ifndef WEFT_RESPONSE_HEAD_H
#define WEFT_RESPONSE_HEAD_H

#include <ruby.h>

void weft_init_response_head(VALUE mHTTP1);

#endif
