/*
 * shared_counters.c - Weft::SharedCounters (lib/weft/shared_counters.rb): a fixed table of
 * 64-bit integers in memory that a process shares with the children it forks afterwards.
 *
 * One anonymous MAP_SHARED mapping, made before the fork: every process that inherits it reads
 * and writes the same memory, with no system call, no file and no polling. Ruby has no such
 * memory of its own but IO::Buffer's, which warns at first use that it is experimental (3.1 and
 * 3.3); a pipe or a file would cost a system call per look. The server's master makes one
 * so that each worker can see its siblings' load at every accept (Weft::Server::WorkerLoads).
 *
 * Each cell is read and written whole with atomic operations, so a reader never sees half of a
 * write. Nothing orders one cell's writes with another's: the cells are for figures that are
 * hints (counts, pids), not for locks.
 *
 * An exec (a hot restart) ends the mapping in the process that execs; processes forked before
 * keep theirs. Freed with the object (munmap), in each process for its own copy of the mapping.
 */
#include <ruby.h>
#include <stdint.h>
#include <sys/mman.h>
#include "shared_counters.h"

typedef struct {
    int64_t *cells;
    long size;
} shared_counters;

static void shared_counters_free(void *ptr)
{
    shared_counters *table = ptr;
    if (table->cells) munmap(table->cells, (size_t)table->size * sizeof(int64_t));
    xfree(table);
}

static size_t shared_counters_memsize(const void *ptr)
{
    const shared_counters *table = ptr;
    return sizeof(*table) + (size_t)table->size * sizeof(int64_t);
}

static const rb_data_type_t shared_counters_type = {
    .wrap_struct_name = "Weft::SharedCounters",
    .function = { .dmark = NULL, .dfree = shared_counters_free, .dsize = shared_counters_memsize },
    .flags = RUBY_TYPED_FREE_IMMEDIATELY,
};

static VALUE shared_counters_alloc(VALUE klass)
{
    shared_counters *table;
    VALUE self = TypedData_Make_Struct(klass, shared_counters, &shared_counters_type, table);
    table->cells = NULL;
    table->size = 0;
    return self;
}

static shared_counters *get(VALUE self)
{
    shared_counters *table;
    TypedData_Get_Struct(self, shared_counters, &shared_counters_type, table);
    if (!table->cells) rb_raise(rb_eIOError, "uninitialized Weft::SharedCounters");
    return table;
}

/* The cell at index, which must be within the table (IndexError otherwise). */
static int64_t *cell(VALUE self, VALUE index)
{
    shared_counters *table = get(self);
    long i = NUM2LONG(index);
    if (i < 0 || i >= table->size) rb_raise(rb_eIndexError, "cell %ld outside 0...%ld", i, table->size);
    return &table->cells[i];
}

/*
 * call-seq: Weft::SharedCounters.new(size)
 *
 * A table of size cells, all 0, shared with every process forked from this one afterwards.
 * Raises the mmap's SystemCallError when the system refuses the memory.
 */
static VALUE shared_counters_initialize(VALUE self, VALUE size_value)
{
    shared_counters *table;
    long size = NUM2LONG(size_value);
    void *memory;
    TypedData_Get_Struct(self, shared_counters, &shared_counters_type, table);
    if (table->cells) rb_raise(rb_eRuntimeError, "Weft::SharedCounters already initialized");
    if (size <= 0 || size > (1L << 24)) rb_raise(rb_eArgError, "size must be from 1 to 16777216 cells");
    memory = mmap(NULL, (size_t)size * sizeof(int64_t), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (memory == MAP_FAILED) rb_sys_fail("mmap");
    table->cells = memory; /* zero-filled by the kernel */
    table->size = size;
    return self;
}

/*
 * dup and clone are refused (TypeError): a copy would need a mapping of its own, and a new
 * mapping is not shared with the processes that share the original's, which is the table's
 * whole point.
 */
static VALUE shared_counters_initialize_copy(VALUE self, VALUE original)
{
    (void)self;
    (void)original;
    rb_raise(rb_eTypeError, "can't copy Weft::SharedCounters (a copy would not be shared)");
    return Qnil;
}

/* call-seq: size -> Integer (cells) */
static VALUE shared_counters_size(VALUE self)
{
    return LONG2NUM(get(self)->size);
}

/* call-seq: self[index] -> Integer */
static VALUE shared_counters_aref(VALUE self, VALUE index)
{
    return LL2NUM(__atomic_load_n(cell(self, index), __ATOMIC_RELAXED));
}

/* call-seq: self[index] = Integer */
static VALUE shared_counters_aset(VALUE self, VALUE index, VALUE value)
{
    __atomic_store_n(cell(self, index), (int64_t)NUM2LL(value), __ATOMIC_RELAXED);
    return value;
}

/*
 * call-seq: add(index, delta) -> Integer
 *
 * Adds delta to the cell in one atomic step (two processes adding at once both count) and
 * returns the new value.
 */
static VALUE shared_counters_add(VALUE self, VALUE index, VALUE delta)
{
    return LL2NUM(__atomic_add_fetch(cell(self, index), (int64_t)NUM2LL(delta), __ATOMIC_RELAXED));
}

void weft_init_shared_counters(VALUE mWeft)
{
    VALUE cSharedCounters = rb_define_class_under(mWeft, "SharedCounters", rb_cObject);
    rb_define_alloc_func(cSharedCounters, shared_counters_alloc);
    rb_define_method(cSharedCounters, "initialize", shared_counters_initialize, 1);
    rb_define_method(cSharedCounters, "initialize_copy", shared_counters_initialize_copy, 1);
    rb_define_method(cSharedCounters, "size", shared_counters_size, 0);
    rb_define_method(cSharedCounters, "[]", shared_counters_aref, 1);
    rb_define_method(cSharedCounters, "[]=", shared_counters_aset, 2);
    rb_define_method(cSharedCounters, "add", shared_counters_add, 2);
}
