/* What the two sources of tracec.runtime._gather share: the set-column functions its module table lists. */
#ifndef TRACEC_GATHER_H
#define TRACEC_GATHER_H
#include <Python.h>

PyObject *tracec_sorted_sets(PyObject *module, PyObject *args);
PyObject *tracec_take_sets(PyObject *module, PyObject *args);

#endif
