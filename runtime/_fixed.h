/* What the two sources of tracec.runtime._fixed share: the constants of the Numba definitions, arrays taken through
   the buffer protocol, and the entry points of _fixed_groups.c that the module table in _fixed.c lists. */
#ifndef TRACEC_FIXED_H
#define TRACEC_FIXED_H
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

/* As in tracec.runtime.advantage_kernels (tests/runtime/test_fixed.py compares them). */
#define ZERO_VARIANCE 1e-9
#define HUGE_MAGNITUDE 0x1p480 /* HUGE there; math.h has a HUGE of its own */
#define SHRINK 0x1p-600
#define GOLDEN UINT64_C(0x9E3779B97F4A7C15)
#define SORT_RUN 16

/* The buffers one call holds, released together when it returns. */
typedef struct {
    Py_buffer *views;
    Py_ssize_t n, capacity;
} Held;

#define HELD(name, size)                                                                                             \
    Py_buffer name##_views[size];                                                                                    \
    Held name = {name##_views, 0, size}

/* One array argument: its data, its length (rows), and for a matrix its columns and row stride in bytes. */
typedef struct {
    char *data;
    Py_ssize_t n, columns, row_stride;
} Array;

enum { WRITABLE = 1, MATRIX = 2 }; /* take's flags: written to; a 2-D uint8 array with unit column stride */

int take(Held *held, PyObject *object, char dtype, int flags, Array *out);
void release(Held *held);

PyObject *tracec_group_by_key(PyObject *module, PyObject *args);
PyObject *tracec_trca_advantage_kernel(PyObject *module, PyObject *args);
PyObject *tracec_exact_keys(PyObject *module, PyObject *args);

#endif
