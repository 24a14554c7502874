/* tracec.runtime._fixed: the fixed reward kernels compiled with the package, so that no process compiles them.

The same loops as their Numba definitions: tracec.runtime.reward_kernels here, advantage_kernels and
context_group_kernels in _fixed_groups.c. Every float operation is the same and comes in the same order, and
setup.py builds this with -O3 -ffp-contract=off (no fused multiply-add) and without -ffast-math, so every result
equals Numba's bit for bit (tests/runtime/test_fixed.py). The entry points take the arguments the Numba kernels
take, from the same drivers (tracec.runtime.rewards, advantages, context_groups, which check them), and release the
GIL while they run, as those kernels are `nogil`. Like them they trust the drivers for lengths and index ranges;
what they check is each array's dtype and layout, which Numba would have dispatched on.
*/
#include <float.h>
#include <math.h>
#include <string.h>

#include "_fixed.h"

/* Whether a buffer holds one item of the dtype per element: 'd' float64, 'q' int64, 'Q' uint64, 'B' uint8. */
static int holds(const Py_buffer *view, char dtype) {
    const char *format = view->format != NULL ? view->format : "B";
    if (*format == '@' || *format == '=' || *format == (PY_LITTLE_ENDIAN ? '<' : '>')) {
        format++;
    }
    if (format[0] == '\0' || format[1] != '\0') {
        return 0;
    }
    switch (dtype) {
    case 'd':
        return format[0] == 'd' && view->itemsize == 8;
    case 'q':
        return strchr("lqn", format[0]) != NULL && view->itemsize == 8;
    case 'Q':
        return strchr("LQN", format[0]) != NULL && view->itemsize == 8;
    default:
        return format[0] == 'B' && view->itemsize == 1;
    }
}

int take(Held *held, PyObject *object, char dtype, int flags, Array *out) {
    static const char *names[] = {"float64", "int64", "uint64", "uint8"};
    const char *name = names[dtype == 'd' ? 0 : dtype == 'q' ? 1 : dtype == 'Q' ? 2 : 3];
    int request = (flags & MATRIX ? PyBUF_RECORDS_RO : PyBUF_C_CONTIGUOUS | PyBUF_FORMAT)
                  | (flags & WRITABLE ? PyBUF_WRITABLE : 0);
    if (held->n == held->capacity) {
        PyErr_SetString(PyExc_SystemError, "_fixed: more array arguments than the call holds");
        return -1;
    }
    Py_buffer *view = &held->views[held->n];
    if (PyObject_GetBuffer(object, view, request) < 0) {
        return -1;
    }
    held->n++;
    int ndim = flags & MATRIX ? 2 : view->ndim >= 1 ? view->ndim : -1;
    if (!holds(view, dtype) || view->ndim != ndim
        || (flags & MATRIX && view->shape[1] > 1 && view->strides[1] != 1)) {
        PyErr_Format(PyExc_TypeError, "_fixed: expected a contiguous %s %s", name,
                     flags & MATRIX ? "matrix with contiguous rows" : "array");
        return -1;
    }
    out->data = view->buf;
    out->n = view->shape[0];
    out->columns = view->ndim == 2 ? view->shape[1] : 1;
    out->row_stride = flags & MATRIX ? view->strides[0] : 0;
    return 0;
}

void release(Held *held) {
    for (Py_ssize_t i = 0; i < held->n; i++) {
        PyBuffer_Release(&held->views[i]);
    }
    held->n = 0;
}

/* reward_kernels.chunk_table: `table` (n_chunks, 256) gets, for each block of 8 operators, the summed weight of
   every pattern of them firing (zeros on entry). */
static void chunk_table(const double *weights, int64_t n_weights, double *table, int64_t n_chunks) {
    for (int64_t c = 0; c < n_chunks; c++) {
        int64_t width = n_weights - 8 * c < 8 ? n_weights - 8 * c : 8;
        for (int64_t bits = 0; bits < 256; bits++) {
            for (int64_t b = 0; b < width; b++) {
                if ((bits >> b) & 1) {
                    table[c * 256 + bits] += weights[8 * c + b];
                }
            }
        }
    }
}

/* tracec.runtime.row_mask: bit j set when byte j of the row is nonzero, eight bytes folded at a time. */
static uint64_t fold(uint64_t word) {
    const uint64_t low7 = UINT64_C(0x7F7F7F7F7F7F7F7F), high = UINT64_C(0x8080808080808080);
    uint64_t nonzero = ((((word & low7) + low7) | word) & high) >> 7;
    return (nonzero * UINT64_C(0x0102040810204080)) >> 56;
}

static uint64_t row_mask(const uint8_t *row, int64_t n_ops) {
    uint64_t bits = 0, word;
    if (n_ops < 8 || !PY_LITTLE_ENDIAN) {
        for (int64_t j = 0; j < n_ops; j++) {
            bits |= (uint64_t)(row[j] != 0) << j;
        }
        return bits;
    }
    int64_t full = n_ops - n_ops % 8;
    for (int64_t j = 0; j < full; j += 8) {
        memcpy(&word, row + j, 8);
        bits |= fold(word) << j;
    }
    if (full < n_ops) { /* the last 8 bytes of the row: the first 8 - (n_ops - full) of them were already read */
        memcpy(&word, row + n_ops - 8, 8);
        bits |= (fold(word) >> (8 - (n_ops - full))) << full;
    }
    return bits;
}

static void episode_returns(const double *r_trca, int64_t start, int64_t stop, double env_reward, double gamma,
                            double *returns) {
    if (stop == start) {
        return;
    }
    double acc = r_trca[stop - 1] + env_reward;
    returns[stop - 1] = acc;
    for (int64_t t = stop - 2; t >= start; t--) {
        acc = r_trca[t] + gamma * acc;
        returns[t] = acc;
    }
}

/* reward_kernels.trca_kernel: r_F and r_B of up to 64 operators (added to what r_f, r_b hold when `accumulate`),
   then r_TRCA and the returns where those arrays are not empty. */
static void trca_kernel(const Array *O, const int64_t *offsets, int64_t n_episodes, const double *fire_table,
                        const double *cover_table, int64_t n_chunks, int accumulate, double lam,
                        const double *env_reward, double gamma, double *r_f, double *r_b, double *r_trca,
                        int with_trca, double *returns, int with_returns) {
    for (int64_t e = 0; e < n_episodes; e++) {
        int64_t start = offsets[e], stop = offsets[e + 1];
        uint64_t covered = 0;
        for (int64_t t = start; t < stop; t++) {
            uint64_t bits = row_mask((const uint8_t *)O->data + t * O->row_stride, O->columns);
            uint64_t newly_bits = bits & ~covered; /* first coverage only, so r_B >= 0 exactly */
            covered |= bits;
            double fired = accumulate ? r_f[t] : 0.0;
            double newly = accumulate ? r_b[t] : 0.0; /* Phi_t - Phi_{t-1} */
            for (int64_t c = 0; c < n_chunks; c++) {
                fired += fire_table[c * 256 + ((bits >> (8 * c)) & 255)];
                newly += cover_table[c * 256 + ((newly_bits >> (8 * c)) & 255)];
            }
            r_f[t] = fired;
            r_b[t] = newly;
            if (with_trca) {
                r_trca[t] = (1.0 - lam) * fired + lam * newly;
            }
        }
        if (with_returns) {
            episode_returns(r_trca, start, stop, env_reward[e], gamma, returns);
        }
    }
}

/* reward_kernels.first_overflowing_return: the first episode whose return bound leaves the float range, or -1. */
static int64_t first_overflowing_return(const double *env_reward, int64_t n_episodes, const int64_t *offsets,
                                        const double *fire, int64_t n_fire, const double *coverage,
                                        int64_t n_coverage) {
    double fire_sum = 0.0, coverage_sum = 0.0;
    for (int64_t j = 0; j < n_fire; j++) {
        fire_sum += fabs(fire[j]);
    }
    for (int64_t j = 0; j < n_coverage; j++) {
        coverage_sum += fabs(coverage[j]);
    }
    double per_step = fire_sum + coverage_sum;
    for (int64_t e = 0; e < n_episodes; e++) {
        int64_t length = offsets[e + 1] - offsets[e];
        double bound = (fabs(env_reward[e]) + (double)length * per_step) * (1.0 + 4.0 * (double)length * 0x1p-53);
        if (!(bound <= DBL_MAX)) {
            return e;
        }
    }
    return -1;
}

static PyObject *py_chunk_table(PyObject *Py_UNUSED(module), PyObject *args) {
    PyObject *weights_o, *table_o;
    if (!PyArg_ParseTuple(args, "OO:chunk_table", &weights_o, &table_o)) {
        return NULL;
    }
    HELD(held, 2);
    Array weights, table;
    PyObject *result = NULL;
    if (take(&held, weights_o, 'd', 0, &weights) == 0 && take(&held, table_o, 'd', WRITABLE, &table) == 0) {
        Py_BEGIN_ALLOW_THREADS
        chunk_table((const double *)weights.data, weights.n, (double *)table.data, table.n);
        Py_END_ALLOW_THREADS
        result = Py_NewRef(Py_None);
    }
    release(&held);
    return result;
}

static PyObject *py_trca_kernel(PyObject *Py_UNUSED(module), PyObject *args) {
    PyObject *O_o, *offsets_o, *fire_o, *cover_o, *env_o, *r_f_o, *r_b_o, *r_trca_o, *returns_o;
    int accumulate;
    double lam, gamma;
    if (!PyArg_ParseTuple(args, "OOOOpdOdOOOO:trca_kernel", &O_o, &offsets_o, &fire_o, &cover_o, &accumulate, &lam,
                          &env_o, &gamma, &r_f_o, &r_b_o, &r_trca_o, &returns_o)) {
        return NULL;
    }
    HELD(held, 9);
    Array O, offsets, fire, cover, env, r_f, r_b, r_trca, returns;
    PyObject *result = NULL;
    if (take(&held, O_o, 'B', MATRIX, &O) == 0 && take(&held, offsets_o, 'q', 0, &offsets) == 0
        && take(&held, fire_o, 'd', 0, &fire) == 0 && take(&held, cover_o, 'd', 0, &cover) == 0
        && take(&held, env_o, 'd', 0, &env) == 0 && take(&held, r_f_o, 'd', WRITABLE, &r_f) == 0
        && take(&held, r_b_o, 'd', WRITABLE, &r_b) == 0 && take(&held, r_trca_o, 'd', WRITABLE, &r_trca) == 0
        && take(&held, returns_o, 'd', WRITABLE, &returns) == 0) {
        Py_BEGIN_ALLOW_THREADS
        trca_kernel(&O, (const int64_t *)offsets.data, offsets.n - 1, (const double *)fire.data,
                    (const double *)cover.data, fire.n, accumulate, lam, (const double *)env.data, gamma,
                    (double *)r_f.data, (double *)r_b.data, (double *)r_trca.data, r_trca.n > 0,
                    (double *)returns.data, returns.n > 0);
        Py_END_ALLOW_THREADS
        result = Py_NewRef(Py_None);
    }
    release(&held);
    return result;
}

static PyObject *py_returns_kernel(PyObject *Py_UNUSED(module), PyObject *args) {
    PyObject *r_trca_o, *env_o, *offsets_o, *returns_o;
    double gamma;
    if (!PyArg_ParseTuple(args, "OOOdO:returns_kernel", &r_trca_o, &env_o, &offsets_o, &gamma, &returns_o)) {
        return NULL;
    }
    HELD(held, 4);
    Array r_trca, env, offsets, returns;
    PyObject *result = NULL;
    if (take(&held, r_trca_o, 'd', 0, &r_trca) == 0 && take(&held, env_o, 'd', 0, &env) == 0
        && take(&held, offsets_o, 'q', 0, &offsets) == 0 && take(&held, returns_o, 'd', WRITABLE, &returns) == 0) {
        const int64_t *ends = (const int64_t *)offsets.data;
        Py_BEGIN_ALLOW_THREADS
        for (int64_t e = 0; e < offsets.n - 1; e++) {
            episode_returns((const double *)r_trca.data, ends[e], ends[e + 1], ((const double *)env.data)[e], gamma,
                            (double *)returns.data);
        }
        Py_END_ALLOW_THREADS
        result = Py_NewRef(Py_None);
    }
    release(&held);
    return result;
}

static PyObject *py_first_overflowing_return(PyObject *Py_UNUSED(module), PyObject *args) {
    PyObject *env_o, *offsets_o, *fire_o, *coverage_o;
    if (!PyArg_ParseTuple(args, "OOOO:first_overflowing_return", &env_o, &offsets_o, &fire_o, &coverage_o)) {
        return NULL;
    }
    HELD(held, 4);
    Array env, offsets, fire, coverage;
    PyObject *result = NULL;
    if (take(&held, env_o, 'd', 0, &env) == 0 && take(&held, offsets_o, 'q', 0, &offsets) == 0
        && take(&held, fire_o, 'd', 0, &fire) == 0 && take(&held, coverage_o, 'd', 0, &coverage) == 0) {
        result = PyLong_FromLongLong(first_overflowing_return((const double *)env.data, env.n,
                                                              (const int64_t *)offsets.data, (const double *)fire.data,
                                                              fire.n, (const double *)coverage.data, coverage.n));
    }
    release(&held);
    return result;
}

static PyMethodDef methods[] = {
    {"chunk_table", py_chunk_table, METH_VARARGS, "reward_kernels.chunk_table(weights, table)"},
    {"trca_kernel", py_trca_kernel, METH_VARARGS,
     "reward_kernels.trca_kernel(O, offsets, fire_table, cover_table, accumulate, lam, env_reward, gamma, r_f, r_b,"
     " r_trca, returns)"},
    {"returns_kernel", py_returns_kernel, METH_VARARGS,
     "reward_kernels.returns_kernel(r_trca, env_reward, offsets, gamma, returns)"},
    {"first_overflowing_return", py_first_overflowing_return, METH_VARARGS,
     "reward_kernels.first_overflowing_return(env_reward, offsets, fire_weight, coverage_weight) -> int"},
    {"group_by_key", tracec_group_by_key, METH_VARARGS, "advantage_kernels.group_by_key(keys, order, starts) -> int"},
    {"trca_advantage_kernel", tracec_trca_advantage_kernel, METH_VARARGS,
     "advantage_kernels.trca_advantage_kernel(returns, offsets, env_reward, episodes, group_starts, context,"
     " by_context, scale_steps, eps, a_e, a_s, a)"},
    {"exact_keys", tracec_exact_keys, METH_VARARGS,
     "context_group_kernels.exact_keys(keys, offsets, episodes, group_starts, resolve, out, words, word_known,"
     " n_words, set_values, set_offsets, set_known, n_sets, collided)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_fixed", "The fixed reward, advantage and step-group kernels, compiled with the package.",
    -1, methods, NULL, NULL, NULL, NULL,
};

/* A constant of the module (value a new reference, or NULL after an error). */
static int add(PyObject *m, const char *name, PyObject *value) {
    int status = value == NULL ? -1 : PyModule_AddObjectRef(m, name, value);
    Py_XDECREF(value);
    return status;
}

PyMODINIT_FUNC PyInit__fixed(void) {
    PyObject *m = PyModule_Create(&module);
    if (m == NULL || add(m, "ZERO_VARIANCE", PyFloat_FromDouble(ZERO_VARIANCE)) < 0
        || add(m, "HUGE", PyFloat_FromDouble(HUGE_MAGNITUDE)) < 0 || add(m, "SHRINK", PyFloat_FromDouble(SHRINK)) < 0
        || add(m, "GOLDEN", PyLong_FromUnsignedLongLong(GOLDEN)) < 0
        || add(m, "SORT_RUN", PyLong_FromLong(SORT_RUN)) < 0) {
        Py_XDECREF(m);
        return NULL;
    }
    return m;
}
