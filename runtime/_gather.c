/* tracec.runtime._gather: the fields of many dicts read and coded in one pass, for the fact builder.

`gather(groups, fields, bases)` reads every row (a dict) of some lists of rows once and, for each requested field,
checks its value exactly as `tracec.runtime.columns.valid` does and writes its code and known flag. Anything it is
not sure of (a wrong type, an int beyond int64, a non-finite float, a non-member, a null set element, a str
subclass, a lone surrogate, ...) makes it decline that field -- or the whole call, for a row that is not a dict --
and the Python path decides, so this can only be faster, never disagree. Strings not yet in a field's table get
the codes the table will give them (`base + k` in order of first appearance) and are returned for Python to number
(`Interned.add`), so each distinct string is added once. `sorted_sets` and `take_sets` (in _gather_sets.c) are the CSR steps of set
columns (rows sorted by id and de-duplicated; rows gathered), equal to their numpy versions bit for bit.
*/
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "_gather.h"

enum kind { K_BOOL, K_INT, K_FLOAT, K_ENUM, K_STRING, K_SET };

#define EXACT_DOUBLE (9007199254740992LL) /* 2**53: an int up to this converts to float64 exactly */

/* A growable array of int64 (a set field's element codes). */
typedef struct {
    int64_t *data;
    Py_ssize_t size, capacity;
} Buffer;

static int buffer_push(Buffer *buffer, int64_t value) {
    if (buffer->size == buffer->capacity) {
        Py_ssize_t capacity = buffer->capacity ? 2 * buffer->capacity : 1024;
        int64_t *data = PyMem_Realloc(buffer->data, (size_t)capacity * sizeof(int64_t));
        if (data == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        buffer->data = data, buffer->capacity = capacity;
    }
    buffer->data[buffer->size++] = value;
    return 0;
}

/* A string object's code, by its address. The entry holds a reference, so no other object can take the address
   while it is cached: the same address is the same, immutable string. */
#define CACHED 256
typedef struct {
    PyObject *text;
    int64_t code;
} Cached;

/* Strings of one table not seen yet, numbered from its base in order of first appearance; and the codes of the
   interned strings (names written in code, which rows built in Python share) met lately. */
typedef struct {
    PyObject *seen;  /* dict: str -> int code */
    PyObject *order; /* list of str */
    int64_t base;
    Cached cache[CACHED];
} Fresh;

typedef struct {
    PyObject *key;    /* str */
    int kind;
    PyObject *lookup; /* enum: members -> index; string, set: the table's codes (str -> int) */
    Fresh *fresh;     /* string, set: the fresh strings of its table */
    int declined;
    PyObject *codes, *known, *lengths; /* bytearrays; lengths for sets only */
    Buffer elements;                   /* sets: element codes, rows end to end */
} Field;

/* Whether an exact str is valid Unicode: no lone surrogate (only 2- and 4-byte kinds can hold one). */
static int is_unicode(PyObject *text) {
#if PY_VERSION_HEX < 0x030C0000
    if (PyUnicode_READY(text) < 0) { /* a legacy string, made by an extension through the old API */
        PyErr_Clear();
        return 0;
    }
#endif
    int kind = PyUnicode_KIND(text);
    if (kind == PyUnicode_1BYTE_KIND) {
        return 1;
    }
    Py_ssize_t n = PyUnicode_GET_LENGTH(text);
    const void *data = PyUnicode_DATA(text);
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_UCS4 c = PyUnicode_READ(kind, data, i);
        if (c >= 0xD800 && c <= 0xDFFF) {
            return 0;
        }
    }
    return 1;
}

/* The code of a string: its table's, else a fresh one. 1 and *code set, 0 to decline, -1 on error. */
static int looked_up_code(Field *field, PyObject *text, int64_t *code) {
    if (!PyUnicode_CheckExact(text)) {
        return 0;
    }
    PyObject *found = PyDict_GetItemWithError(field->lookup, text);
    if (found == NULL && !PyErr_Occurred()) {
        found = PyDict_GetItemWithError(field->fresh->seen, text);
        if (found == NULL && !PyErr_Occurred()) {
            if (!is_unicode(text)) {
                return 0;
            }
            Py_ssize_t k = PyList_GET_SIZE(field->fresh->order);
            PyObject *number = PyLong_FromLongLong(field->fresh->base + k);
            if (number == NULL) {
                return -1;
            }
            int failed = PyDict_SetItem(field->fresh->seen, text, number) || PyList_Append(field->fresh->order, text);
            Py_DECREF(number);
            if (failed) {
                return -1;
            }
            *code = field->fresh->base + k;
            return 1;
        }
    }
    if (found == NULL) {
        return -1;
    }
    if (!PyLong_CheckExact(found)) {
        return 0;
    }
    *code = PyLong_AsLongLong(found);
    if (*code == -1 && PyErr_Occurred()) {
        PyErr_Clear();
        return 0;
    }
    return *code >= 0; /* a None key in the table (code -1) is never a string's */
}

/* The same, an interned string by the cache first: such a string is one object across rows, its entry is hit,
   while the distinct objects a JSON parser makes would only churn the cache, so they are never put in. */
static int string_code(Field *field, PyObject *text, int64_t *code) {
    Cached *cached = &field->fresh->cache[((uintptr_t)text >> 4) & (CACHED - 1)];
    if (cached->text == text) {
        *code = cached->code;
        return 1;
    }
    int taken = looked_up_code(field, text, code);
    if (taken == 1 && PyUnicode_CHECK_INTERNED(text)) {
        Py_INCREF(text);
        Py_XSETREF(cached->text, text);
        cached->code = *code;
    }
    return taken;
}

/* One value (not None) of a scalar field at row i: 1 written, 0 to decline, -1 on error. */
static int put_scalar(Field *field, Py_ssize_t i, PyObject *value) {
    char *codes = PyByteArray_AS_STRING(field->codes);
    switch (field->kind) {
    case K_BOOL:
        if (value != Py_True && value != Py_False) {
            return 0;
        }
        codes[i] = value == Py_True;
        return 1;
    case K_INT: {
        if (!PyLong_CheckExact(value)) {
            return 0;
        }
        int overflow;
        long long number = PyLong_AsLongLongAndOverflow(value, &overflow);
        if (overflow || (number == -1 && PyErr_Occurred())) {
            PyErr_Clear();
            return 0;
        }
        ((int64_t *)codes)[i] = number;
        return 1;
    }
    case K_FLOAT: {
        double number;
        if (PyFloat_CheckExact(value)) {
            number = PyFloat_AS_DOUBLE(value);
            if (!isfinite(number)) {
                return 0;
            }
        } else if (PyLong_CheckExact(value)) {
            int overflow;
            long long whole = PyLong_AsLongLongAndOverflow(value, &overflow);
            if (overflow || whole > EXACT_DOUBLE || whole < -EXACT_DOUBLE) {
                PyErr_Clear();
                return 0; /* rounding is numpy's to decide */
            }
            number = (double)whole;
        } else {
            return 0;
        }
        ((double *)codes)[i] = number;
        return 1;
    }
    case K_ENUM: {
        if (!PyUnicode_CheckExact(value)) {
            return 0;
        }
        PyObject *index = PyDict_GetItemWithError(field->lookup, value);
        if (index == NULL) {
            return PyErr_Occurred() ? -1 : 0;
        }
        ((int64_t *)codes)[i] = PyLong_AsLongLong(index);
        return 1;
    }
    default: { /* K_STRING */
        int64_t code;
        int taken = string_code(field, value, &code);
        if (taken == 1) {
            ((int64_t *)codes)[i] = code;
        }
        return taken;
    }
    }
}

/* A set value (not None) at row i: a list of strings. */
static int put_set(Field *field, Py_ssize_t i, PyObject *value) {
    if (!PyList_CheckExact(value)) {
        return 0;
    }
    Py_ssize_t n = PyList_GET_SIZE(value);
    for (Py_ssize_t j = 0; j < n; j++) {
        int64_t code;
        PyObject *element = PyList_GET_ITEM(value, j);
        Py_INCREF(element);
        int taken = string_code(field, element, &code);
        Py_DECREF(element);
        if (taken != 1) {
            return taken;
        }
        if (buffer_push(&field->elements, code) < 0) {
            return -1;
        }
    }
    if (PyList_GET_SIZE(value) != n) {
        return 0; /* changed under us by a key's __eq__ */
    }
    ((int64_t *)PyByteArray_AS_STRING(field->lengths))[i] = n;
    return 1;
}

/* The value of one field at row i (NULL: missing). 0 and the field declines, -1 on error. */
static int put(Field *field, Py_ssize_t i, PyObject *value) {
    if (value == NULL || value == Py_None) {
        PyByteArray_AS_STRING(field->known)[i] = 0;
        if (field->kind == K_SET) {
            ((int64_t *)PyByteArray_AS_STRING(field->lengths))[i] = 0;
        } else if (field->kind == K_STRING) {
            ((int64_t *)PyByteArray_AS_STRING(field->codes))[i] = -1;
        } else if (field->kind == K_BOOL) {
            PyByteArray_AS_STRING(field->codes)[i] = 0;
        } else {
            memset(PyByteArray_AS_STRING(field->codes) + 8 * i, 0, 8);
        }
        return 1;
    }
    PyByteArray_AS_STRING(field->known)[i] = 1;
    return field->kind == K_SET ? put_set(field, i, value) : put_scalar(field, i, value);
}

static PyObject *new_bytes(Py_ssize_t size) {
    return PyByteArray_FromStringAndSize(NULL, size);
}

static void clear_fields(Field *fields, Py_ssize_t n) {
    for (Py_ssize_t f = 0; f < n; f++) {
        Py_CLEAR(fields[f].codes);
        Py_CLEAR(fields[f].known);
        Py_CLEAR(fields[f].lengths);
        PyMem_Free(fields[f].elements.data);
    }
}

/* Parses `fields` (a list of (key, kind, lookup, slot)) and allocates the outputs; -1 on error. */
static int parse_fields(PyObject *spec, Field *fields, Py_ssize_t n_rows, Fresh *fresh, Py_ssize_t n_slots) {
    for (Py_ssize_t f = 0; f < PyList_GET_SIZE(spec); f++) {
        Field *field = &fields[f];
        Py_ssize_t slot;
        if (!PyArg_ParseTuple(PyList_GET_ITEM(spec, f), "UiOn", &field->key, &field->kind, &field->lookup, &slot)) {
            return -1;
        }
        int tabled = field->kind == K_ENUM || field->kind == K_STRING || field->kind == K_SET;
        if (field->kind < K_BOOL || field->kind > K_SET || (tabled && !PyDict_CheckExact(field->lookup))
            || ((field->kind == K_STRING || field->kind == K_SET) && (slot < 0 || slot >= n_slots))) {
            PyErr_SetString(PyExc_ValueError, "gather: a malformed field");
            return -1;
        }
        field->fresh = (field->kind == K_STRING || field->kind == K_SET) ? &fresh[slot] : NULL;
        Py_ssize_t width = field->kind == K_BOOL ? 1 : 8;
        field->known = new_bytes(n_rows);
        field->codes = field->kind == K_SET ? new_bytes(0) : new_bytes(width * n_rows);
        field->lengths = field->kind == K_SET ? new_bytes(8 * n_rows) : NULL;
        if (field->known == NULL || field->codes == NULL || (field->kind == K_SET && field->lengths == NULL)) {
            return -1;
        }
    }
    return 0;
}

/* Asks for a row's dict, a few rows ahead, to be brought into cache: its header, then (once that has come) its
   table. Only a hint: a prefetch never faults. */
static inline void prefetch_row(PyObject *row, int table) {
#if defined(__GNUC__)
    __builtin_prefetch(row);
    if (table && PyDict_CheckExact(row)) {
        const char *keys = (const char *)((PyDictObject *)row)->ma_keys;
        __builtin_prefetch(keys);
        __builtin_prefetch(keys + 64);
        __builtin_prefetch(keys + 128);
    }
#else
    (void)row, (void)table;
#endif
}

/* The fields of one row i (a dict): 1 done, -1 on error. */
static int read_row(PyObject *row, Py_ssize_t i, Field *fields, Py_ssize_t n_fields) {
    for (Py_ssize_t f = 0; f < n_fields; f++) {
        Field *field = &fields[f];
        if (field->declined) {
            continue;
        }
        PyObject *value = PyDict_GetItemWithError(row, field->key);
        if (value == NULL && PyErr_Occurred()) {
            return -1;
        }
        Py_XINCREF(value); /* a key's __eq__ could drop it from the dict */
        int taken = put(field, i, value);
        Py_XDECREF(value);
        if (taken < 0) {
            return -1;
        }
        field->declined = !taken;
    }
    return 1;
}

/* Reads every row of every group once, every field of it; 1 done, 0 when a row is not a dict or the groups are
   not what they were counted as (the call declines), -1 on error. */
static int read_rows(PyObject *groups, Py_ssize_t n_rows, Field *fields, Py_ssize_t n_fields) {
    Py_ssize_t i = 0;
    for (Py_ssize_t g = 0; g < PyList_GET_SIZE(groups); g++) {
        PyObject *group = PyList_GET_ITEM(groups, g);
        if (!PyList_CheckExact(group)) {
            return 0;
        }
        Py_INCREF(group);
        int read = 1;
        for (Py_ssize_t j = 0; read == 1 && j < PyList_GET_SIZE(group); j++, i++) {
            PyObject *row = PyList_GET_ITEM(group, j);
            if (!PyDict_CheckExact(row) || i >= n_rows) {
                read = 0;
                break;
            }
            if (j + 8 < PyList_GET_SIZE(group)) {
                prefetch_row(PyList_GET_ITEM(group, j + 8), 0);
            }
            if (j + 4 < PyList_GET_SIZE(group)) {
                prefetch_row(PyList_GET_ITEM(group, j + 4), 1);
            }
            Py_INCREF(row);
            read = read_row(row, i, fields, n_fields);
            Py_DECREF(row);
        }
        Py_DECREF(group);
        if (read != 1) {
            return read;
        }
    }
    return i == n_rows;
}

/* The rows of all groups, or -1 when a group is not a list. */
static Py_ssize_t count_rows(PyObject *groups) {
    Py_ssize_t n = 0;
    for (Py_ssize_t g = 0; g < PyList_GET_SIZE(groups); g++) {
        PyObject *group = PyList_GET_ITEM(groups, g);
        if (!PyList_CheckExact(group)) {
            return -1;
        }
        n += PyList_GET_SIZE(group);
    }
    return n;
}

/* (codes, known, lengths or None) of a field read to the end, or None where it declined. */
static PyObject *field_result(Field *field) {
    if (field->declined) {
        Py_RETURN_NONE;
    }
    if (field->kind == K_SET) {
        Py_ssize_t bytes = field->elements.size * (Py_ssize_t)sizeof(int64_t);
        Py_SETREF(field->codes, PyByteArray_FromStringAndSize((const char *)field->elements.data, bytes));
        if (field->codes == NULL) {
            return NULL;
        }
    }
    return Py_BuildValue("(OOO)", field->codes, field->known, field->lengths ? field->lengths : Py_None);
}

static PyObject *results(Field *fields, Py_ssize_t n_fields, Fresh *fresh, Py_ssize_t n_slots) {
    PyObject *coded = PyList_New(n_fields), *strings = PyList_New(n_slots);
    if (coded == NULL || strings == NULL) {
        goto failed;
    }
    for (Py_ssize_t f = 0; f < n_fields; f++) {
        PyObject *result = field_result(&fields[f]);
        if (result == NULL) {
            goto failed;
        }
        PyList_SET_ITEM(coded, f, result);
    }
    for (Py_ssize_t s = 0; s < n_slots; s++) {
        PyList_SET_ITEM(strings, s, Py_NewRef(fresh[s].order));
    }
    return Py_BuildValue("(NN)", coded, strings);
failed:
    Py_XDECREF(coded);
    Py_XDECREF(strings);
    return NULL;
}

static PyObject *gather(PyObject *Py_UNUSED(module), PyObject *args) {
    PyObject *groups, *spec, *bases;
    if (!PyArg_ParseTuple(args, "O!O!O!", &PyList_Type, &groups, &PyList_Type, &spec, &PyList_Type, &bases)) {
        return NULL;
    }
    Py_ssize_t n_rows = count_rows(groups), n_fields = PyList_GET_SIZE(spec), n_slots = PyList_GET_SIZE(bases);
    if (n_rows < 0) {
        Py_RETURN_NONE;
    }
    Field *fields = PyMem_Calloc((size_t)n_fields + 1, sizeof(Field));
    Fresh *fresh = PyMem_Calloc((size_t)n_slots + 1, sizeof(Fresh));
    PyObject *result = NULL;
    if (fields == NULL || fresh == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t s = 0; s < n_slots; s++) {
        fresh[s].base = PyLong_AsLongLong(PyList_GET_ITEM(bases, s));
        fresh[s].seen = PyDict_New();
        fresh[s].order = PyList_New(0);
        if ((fresh[s].base == -1 && PyErr_Occurred()) || fresh[s].seen == NULL || fresh[s].order == NULL) {
            goto done;
        }
    }
    Py_INCREF(groups);
    int read = parse_fields(spec, fields, n_rows, fresh, n_slots) < 0 ? -1
                                                                       : read_rows(groups, n_rows, fields, n_fields);
    Py_DECREF(groups);
    if (read == 0) {
        result = Py_NewRef(Py_None);
    } else if (read == 1) {
        result = results(fields, n_fields, fresh, n_slots);
    }
done:
    if (fields != NULL) {
        clear_fields(fields, n_fields);
    }
    for (Py_ssize_t s = 0; fresh != NULL && s < n_slots; s++) {
        Py_XDECREF(fresh[s].seen);
        for (int c = 0; c < CACHED; c++) {
            Py_XDECREF(fresh[s].cache[c].text);
        }
        Py_XDECREF(fresh[s].order);
    }
    PyMem_Free(fields);
    PyMem_Free(fresh);
    return result;
}

static PyMethodDef methods[] = {
    {"gather", gather, METH_VARARGS,
     "gather(groups, fields, bases) -> ([(codes, known, lengths | None) | None per field], [fresh strings per slot])"
     " | None: the fields of every row (a dict) of the groups (lists of rows) coded in one pass, rows end to end;"
     " None per field it declines, None if a group is not a list or a row not a dict."
     " fields: [(key, kind, lookup, slot)]; bases: the next code of each slot's table."},
    {"sorted_sets", tracec_sorted_sets, METH_VARARGS,
     "sorted_sets(codes, lengths, ids) -> (values, offsets): each row's element codes (rows end to end with"
     " lengths elements) as ids (ids[code]), sorted by (id, code) and without repeated codes; int64 buffers."},
    {"take_sets", tracec_take_sets, METH_VARARGS,
     "take_sets(values, offsets, rows) -> (values, offsets): the given rows of a CSR column, end to end."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_gather", "Fields of many dicts read and coded in one pass (the fact builder's).", -1,
    methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__gather(void) {
    return PyModule_Create(&module);
}
