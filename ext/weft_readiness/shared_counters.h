/*
 * shared_counters.h - Weft::SharedCounters (shared_counters.c), set up by Init_weft_readiness.
 */
#ifndef WEFT_SHARED_COUNTERS_H
#define WEFT_SHARED_COUNTERS_H

#include <ruby.h>

void weft_init_shared_counters(VALUE mWeft);

#endif
