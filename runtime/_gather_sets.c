/* tracec.runtime._gather, its second part: set columns in CSR (rows sorted by id and de-duplicated, and rows
gathered for prev / next), equal to their numpy versions in `tracec.runtime.columns` bit for bit. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "_gather.h"

/* An int64 array viewed through the buffer protocol (`y*`): its length, or -1 (and a ValueError). */
static Py_ssize_t int64s(Py_buffer *view, const char *name) {
    if (view->len % (Py_ssize_t)sizeof(int64_t)) {
        PyErr_Format(PyExc_ValueError, "%s: not an int64 array", name);
        return -1;
    }
    return view->len / (Py_ssize_t)sizeof(int64_t);
}

typedef struct {
    int64_t id, code;
} Element;

static int element_order(const void *left, const void *right) {
    const Element *a = left, *b = right;
    if (a->id != b->id) {
        return a->id < b->id ? -1 : 1;
    }
    return (a->code > b->code) - (a->code < b->code);
}

/* A row's elements sorted by (id, code) in place: insertion sort for the short rows sets mostly have. */
static void sort_row(Element *row, Py_ssize_t n) {
    if (n > 16) {
        qsort(row, (size_t)n, sizeof(Element), element_order);
        return;
    }
    for (Py_ssize_t j = 1; j < n; j++) {
        Element moving = row[j];
        Py_ssize_t k = j;
        while (k > 0 && element_order(&row[k - 1], &moving) > 0) {
            row[k] = row[k - 1];
            k--;
        }
        row[k] = moving;
    }
}

/* Writes the rows' sorted, de-duplicated ids into values and their ends into offsets; -1 on a bad code. */
static int sort_rows(const int64_t *codes, Py_ssize_t n_codes, const int64_t *lengths, Py_ssize_t n_rows,
                     const int64_t *ids, Py_ssize_t n_ids, Element *scratch, int64_t *values, int64_t *offsets) {
    Py_ssize_t at = 0, out = 0;
    offsets[0] = 0;
    for (Py_ssize_t r = 0; r < n_rows; r++) {
        if (lengths[r] < 0 || lengths[r] > n_codes - at) {
            PyErr_SetString(PyExc_ValueError, "sorted_sets: row lengths exceed the codes");
            return -1;
        }
        Py_ssize_t n = (Py_ssize_t)lengths[r];
        for (Py_ssize_t j = 0; j < n; j++) {
            int64_t code = codes[at + j];
            if (code < 0 || code >= n_ids) {
                PyErr_SetString(PyExc_IndexError, "sorted_sets: an element code out of range");
                return -1;
            }
            scratch[j].id = ids[code], scratch[j].code = code;
        }
        sort_row(scratch, n);
        for (Py_ssize_t j = 0; j < n; j++) {
            if (j == 0 || scratch[j].code != scratch[j - 1].code) {
                values[out++] = scratch[j].id;
            }
        }
        at += n;
        offsets[r + 1] = out;
    }
    return 0;
}

PyObject *tracec_sorted_sets(PyObject *Py_UNUSED(module), PyObject *args) {
    Py_buffer codes, lengths, ids;
    if (!PyArg_ParseTuple(args, "y*y*y*", &codes, &lengths, &ids)) {
        return NULL;
    }
    PyObject *values = NULL, *offsets = NULL, *result = NULL;
    Element *scratch = NULL;
    Py_ssize_t n_codes = int64s(&codes, "codes"), n_rows = int64s(&lengths, "lengths"), n_ids = int64s(&ids, "ids");
    if (n_codes < 0 || n_rows < 0 || n_ids < 0) {
        goto done;
    }
    Py_ssize_t longest = 1;
    for (Py_ssize_t r = 0; r < n_rows; r++) {
        int64_t n = ((const int64_t *)lengths.buf)[r];
        longest = n > longest && n <= n_codes ? (Py_ssize_t)n : longest;
    }
    scratch = PyMem_Malloc((size_t)longest * sizeof(Element));
    values = PyByteArray_FromStringAndSize(NULL, 8 * n_codes);
    offsets = PyByteArray_FromStringAndSize(NULL, 8 * (n_rows + 1));
    if (scratch == NULL || values == NULL || offsets == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    int64_t *out = (int64_t *)PyByteArray_AS_STRING(values), *ends = (int64_t *)PyByteArray_AS_STRING(offsets);
    if (sort_rows(codes.buf, n_codes, lengths.buf, n_rows, ids.buf, n_ids, scratch, out, ends) == 0
        && PyByteArray_Resize(values, 8 * (Py_ssize_t)ends[n_rows]) == 0) {
        result = Py_BuildValue("(OO)", values, offsets);
    }
done:
    PyMem_Free(scratch);
    Py_XDECREF(values);
    Py_XDECREF(offsets);
    PyBuffer_Release(&codes);
    PyBuffer_Release(&lengths);
    PyBuffer_Release(&ids);
    return result;
}

/* Copies the chosen rows of a CSR column end to end; -1 on a row out of range. */
static int copy_rows(const int64_t *values, const int64_t *offsets, Py_ssize_t n_rows, const int64_t *rows,
                     Py_ssize_t n_taken, int64_t *out, int64_t *ends, Py_ssize_t capacity) {
    Py_ssize_t at = 0;
    ends[0] = 0;
    for (Py_ssize_t t = 0; t < n_taken; t++) {
        int64_t row = rows[t];
        if (row < 0 || row >= n_rows) {
            PyErr_SetString(PyExc_IndexError, "take_sets: a row out of range");
            return -1;
        }
        Py_ssize_t start = (Py_ssize_t)offsets[row], n = (Py_ssize_t)(offsets[row + 1] - offsets[row]);
        if (n < 0 || n > capacity - at) {
            PyErr_SetString(PyExc_ValueError, "take_sets: offsets are not ascending");
            return -1;
        }
        memcpy(out + at, values + start, (size_t)n * sizeof(int64_t));
        at += n;
        ends[t + 1] = at;
    }
    return 0;
}

PyObject *tracec_take_sets(PyObject *Py_UNUSED(module), PyObject *args) {
    Py_buffer values, offsets, rows;
    if (!PyArg_ParseTuple(args, "y*y*y*", &values, &offsets, &rows)) {
        return NULL;
    }
    PyObject *taken = NULL, *ends = NULL, *result = NULL;
    Py_ssize_t n_values = int64s(&values, "values"), n_offsets = int64s(&offsets, "offsets");
    Py_ssize_t n_taken = int64s(&rows, "rows");
    if (n_values < 0 || n_offsets < 1 || n_taken < 0) {
        if (!PyErr_Occurred()) {
            PyErr_SetString(PyExc_ValueError, "take_sets: no offsets");
        }
        goto done;
    }
    const int64_t *starts = offsets.buf, *chosen = rows.buf;
    Py_ssize_t size = 0;
    for (Py_ssize_t t = 0; t < n_taken; t++) {
        if (chosen[t] >= 0 && chosen[t] < n_offsets - 1) {
            size += (Py_ssize_t)(starts[chosen[t] + 1] - starts[chosen[t]]);
        }
    }
    size = size < 0 ? 0 : size;
    taken = PyByteArray_FromStringAndSize(NULL, 8 * size);
    ends = PyByteArray_FromStringAndSize(NULL, 8 * (n_taken + 1));
    if (taken != NULL && ends != NULL
        && copy_rows(values.buf, starts, n_offsets - 1, chosen, n_taken, (int64_t *)PyByteArray_AS_STRING(taken),
                     (int64_t *)PyByteArray_AS_STRING(ends), size) == 0) {
        result = Py_BuildValue("(OO)", taken, ends);
    }
done:
    Py_XDECREF(taken);
    Py_XDECREF(ends);
    PyBuffer_Release(&values);
    PyBuffer_Release(&offsets);
    PyBuffer_Release(&rows);
    return result;
}

