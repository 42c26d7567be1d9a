/* The floor of a proxy whose per-request path is C called by uvloop.
 *
 * bench/byte_relay.py --native: the same byte relay as its Python protocol, but
 * ``data_received`` is this C method, so uvloop calls it without entering the
 * interpreter (no Python frame per read), and it calls the peer transport's
 * ``write`` (uvloop's own C) directly. Connection setup stays in Python: it
 * happens once per connection, not per request.
 *
 * Not part of SteadyServe: a measuring stick for what moving the load
 * balancer's per-request path into C protocol objects could reach.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stddef.h>

typedef struct {
    PyObject_HEAD
    PyObject *peer_write; /* the peer transport's bound write, or NULL */
    PyObject *pending;    /* a list of bytes read before the peer connected */
    PyObject *dict;       /* instance attributes of Python subclasses */
} Side;

static void Side_dealloc(Side *self) {
    PyObject_GC_UnTrack(self);
    Py_CLEAR(self->peer_write);
    Py_CLEAR(self->pending);
    Py_CLEAR(self->dict);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int Side_traverse(Side *self, visitproc visit, void *arg) {
    Py_VISIT(self->peer_write);
    Py_VISIT(self->pending);
    Py_VISIT(self->dict);
    return 0;
}

static int Side_clear(Side *self) {
    Py_CLEAR(self->peer_write);
    Py_CLEAR(self->pending);
    Py_CLEAR(self->dict);
    return 0;
}

/* data_received(data): write to the peer, or keep until it is connected. */
static PyObject *Side_data_received(Side *self, PyObject *data) {
    if (self->peer_write != NULL) {
        PyObject *result = PyObject_CallOneArg(self->peer_write, data);
        if (result == NULL) {
            return NULL;
        }
        Py_DECREF(result);
        Py_RETURN_NONE;
    }
    if (self->pending == NULL) {
        self->pending = PyList_New(0);
        if (self->pending == NULL) {
            return NULL;
        }
    }
    if (PyList_Append(self->pending, data) < 0) {
        return NULL;
    }
    Py_RETURN_NONE;
}

/* set_peer_write(write): from now on, data goes to ``write``; returns what was kept. */
static PyObject *Side_set_peer_write(Side *self, PyObject *write) {
    Py_XSETREF(self->peer_write, Py_NewRef(write));
    PyObject *kept = self->pending != NULL ? self->pending : PyList_New(0);
    self->pending = NULL;
    return kept;
}

static PyMethodDef Side_methods[] = {
    {"data_received", (PyCFunction)Side_data_received, METH_O, "Relay bytes to the peer."},
    {"set_peer_write", (PyCFunction)Side_set_peer_write, METH_O,
     "Relay to this write from now on; returns the bytes kept so far."},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject SideType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "native_floor.Side",
    .tp_basicsize = sizeof(Side),
    .tp_dictoffset = offsetof(Side, dict),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .tp_new = PyType_GenericNew,
    .tp_dealloc = (destructor)Side_dealloc,
    .tp_traverse = (traverseproc)Side_traverse,
    .tp_clear = (inquiry)Side_clear,
    .tp_methods = Side_methods,
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "native_floor", "A byte relay protocol in C (bench only).", -1, NULL,
};

PyMODINIT_FUNC PyInit_native_floor(void) {
    if (PyType_Ready(&SideType) < 0) {
        return NULL;
    }
    PyObject *m = PyModule_Create(&module);
    if (m == NULL) {
        return NULL;
    }
    if (PyModule_AddObjectRef(m, "Side", (PyObject *)&SideType) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
