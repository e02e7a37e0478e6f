/* pmc._pmc: the CPython extension behind the Python package pmc (client/python/pmc).
 *
 * A thin layer over the public API of libpmcclient, nothing else: a region object interns
 * its name once (pmc_region()) and its __enter__/__exit__ call pmc_begin()/pmc_end() with
 * the id, so a loop pays two method calls and the library's begin and end. The same
 * object decorates a function (a vectorcall wrapper that ends the region however the call
 * returns). Each Python thread is a thread of the process and registers with the daemon
 * on its first region, as in C; a fork()ed child is a new process (the library's atfork).
 *
 * The GIL is released where the library may wait: the first region of each thread (its
 * registration, a round trip to the daemon) and pmc_flush().
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <pmc/pmc.h>
#include <string.h>
#include <structmember.h>

/* Whether this thread has been registered (or tried to): its first region releases the
 * GIL around pmc_enabled(), which registers it, so other threads run meanwhile. */
static __thread int pmcpy_thread_tried;

static inline void
pmcpy_begin(pmc_region_t id)
{
	if (__builtin_expect(!pmcpy_thread_tried, 0)) {
		pmcpy_thread_tried = 1;
		Py_BEGIN_ALLOW_THREADS;
		(void)pmc_enabled();
		Py_END_ALLOW_THREADS;
	}
	pmc_begin(id);
}

struct pmcpy_region {
	PyObject_HEAD;
	pmc_region_t id;
	int refused; /* the library refused the name (0): each run asks again, and is counted */
	PyObject *name;
};

/* A run of region @r whose name the library refused: asked again, so that the library counts
 * this run as dropped (its reason: too long, too many names), as C's PMC_SCOPE is counted at
 * each run; the id, should it come now. */
static pmc_region_t
region_id_again(struct pmcpy_region *r)
{
	const char *utf8 = PyUnicode_AsUTF8(r->name); /* cached in the str: no copy */
	if (!utf8) {
		PyErr_Clear();
		return 0;
	}
	r->id = pmc_region(utf8);
	r->refused = !r->id;
	return r->id;
}

struct pmcpy_function {
	PyObject_HEAD;
	struct pmcpy_region *region;
	PyObject *func;
	PyObject *dict;
	vectorcallfunc vectorcall;
};

static PyTypeObject pmcpy_region_type;
static PyTypeObject pmcpy_function_type;
static PyObject *function_vectorcall(PyObject *self, PyObject *const *args, size_t nargsf,
                                     PyObject *kwnames);

static int
region_init(PyObject *self, PyObject *args, PyObject *kwds)
{
	static char *kwlist[] = {"name", NULL};
	struct pmcpy_region *r = (struct pmcpy_region *)self;
	PyObject *name;
	const char *utf8;
	Py_ssize_t len;

	if (!PyArg_ParseTupleAndKeywords(args, kwds, "U:region", kwlist, &name))
		return -1;
	utf8 = PyUnicode_AsUTF8AndSize(name, &len);
	if (!utf8)
		return -1;
	/* The library takes a C string: "a\0b" would be counted as "a". */
	if (strlen(utf8) != (size_t)len) {
		PyErr_SetString(PyExc_ValueError, "pmc.region: the name contains a NUL character");
		return -1;
	}
	Py_INCREF(name);
	Py_XSETREF(r->name, name);
	/* Refused names (too long, too many) give 0: begin and end then do nothing, and each
	 * run asks again (region_id_again()), so that the library counts each run as dropped,
	 * as in C. An empty name, or profiling disabled, is no refusal: nothing is counted. */
	/* A name too long is refused at each run, not here: 10 runs, 10 dropped. */
	r->id = len > PMC_REGION_NAME_MAX ? 0 : pmc_region(utf8);
	r->refused = !r->id && len > 0;
	return 0;
}

static void
region_dealloc(PyObject *self)
{
	struct pmcpy_region *r = (struct pmcpy_region *)self;

	Py_XDECREF(r->name);
	Py_TYPE(self)->tp_free(self);
}

static PyObject *
region_enter(PyObject *self, PyObject *unused)
{
	struct pmcpy_region *r = (struct pmcpy_region *)self;

	if (__builtin_expect(r->refused, 0))
		(void)region_id_again(r);
	pmcpy_begin(r->id);
	Py_INCREF(self);
	return self;
}

static PyObject *
region_exit(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
	pmc_end(((struct pmcpy_region *)self)->id);
	/* False: an exception raised in the region goes on. */
	Py_RETURN_FALSE;
}

static PyObject *
region_repr(PyObject *self)
{
	struct pmcpy_region *r = (struct pmcpy_region *)self;

	return PyUnicode_FromFormat("pmc.region(%R)", r->name ? r->name : Py_None);
}

/* region(name)(func): func wrapped so that each call is the region. */
static PyObject *
region_call(PyObject *self, PyObject *args, PyObject *kwds)
{
	struct pmcpy_function *f;
	PyObject *func, *functools, *res;

	if (kwds && PyDict_GET_SIZE(kwds)) {
		PyErr_SetString(PyExc_TypeError, "pmc.region(...) decorates one callable");
		return NULL;
	}
	if (!PyArg_ParseTuple(args, "O:region", &func))
		return NULL;
	if (!PyCallable_Check(func)) {
		PyErr_Format(PyExc_TypeError, "pmc.region(...) decorates a callable, not %.100s",
		             Py_TYPE(func)->tp_name);
		return NULL;
	}
	f = PyObject_GC_New(struct pmcpy_function, &pmcpy_function_type);
	if (!f)
		return NULL;
	Py_INCREF(self);
	f->region = (struct pmcpy_region *)self;
	Py_INCREF(func);
	f->func = func;
	f->dict = NULL;
	f->vectorcall = function_vectorcall;
	PyObject_GC_Track(f);
	/* __name__, __doc__, __wrapped__ ... as functools.wraps gives them. */
	functools = PyImport_ImportModule("functools");
	if (!functools) {
		Py_DECREF(f);
		return NULL;
	}
	res = PyObject_CallMethod(functools, "update_wrapper", "OO", (PyObject *)f, func);
	Py_DECREF(functools);
	if (!res) {
		Py_DECREF(f);
		return NULL;
	}
	Py_DECREF(res);
	return (PyObject *)f;
}

static PyObject *
function_vectorcall(PyObject *self, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
	struct pmcpy_function *f = (struct pmcpy_function *)self;
	pmc_region_t id = __builtin_expect(f->region->refused, 0) ? region_id_again(f->region)
	                                                          : f->region->id;
	PyObject *res;

	pmcpy_begin(id);
	res = PyObject_Vectorcall(f->func, args, nargsf, kwnames);
	pmc_end(id);
	return res;
}

static int
function_traverse(PyObject *self, visitproc visit, void *arg)
{
	struct pmcpy_function *f = (struct pmcpy_function *)self;

	Py_VISIT(f->region);
	Py_VISIT(f->func);
	Py_VISIT(f->dict);
	return 0;
}

static int
function_clear(PyObject *self)
{
	struct pmcpy_function *f = (struct pmcpy_function *)self;

	Py_CLEAR(f->region);
	Py_CLEAR(f->func);
	Py_CLEAR(f->dict);
	return 0;
}

static void
function_dealloc(PyObject *self)
{
	PyObject_GC_UnTrack(self);
	function_clear(self);
	PyObject_GC_Del(self);
}

/* As a function's: a decorated method binds to its instance. */
static PyObject *
function_get(PyObject *self, PyObject *obj, PyObject *type)
{
	if (obj == NULL || obj == Py_None) {
		Py_INCREF(self);
		return self;
	}
	return PyMethod_New(self, obj);
}

static PyObject *
function_repr(PyObject *self)
{
	struct pmcpy_function *f = (struct pmcpy_function *)self;

	return PyUnicode_FromFormat("<pmc.region(%R) of %R>", f->region->name, f->func);
}

static PyObject *
pmcpy_flush(PyObject *mod, PyObject *unused)
{
	int r;

	Py_BEGIN_ALLOW_THREADS;
	r = pmc_flush();
	Py_END_ALLOW_THREADS;
	return PyLong_FromLong(r);
}

static PyObject *
pmcpy_enabled(PyObject *mod, PyObject *unused)
{
	int r;

	pmcpy_thread_tried = 1;
	Py_BEGIN_ALLOW_THREADS;
	r = pmc_enabled();
	Py_END_ALLOW_THREADS;
	return PyBool_FromLong(r);
}

static PyObject *
pmcpy_uses_rdpmc(PyObject *mod, PyObject *unused)
{
	return PyLong_FromLong(pmc_thread_uses_rdpmc());
}

static PyMethodDef region_methods[] = {
        {"__enter__", region_enter, METH_NOARGS, "Begin the region on the calling thread."},
        {"__exit__", (PyCFunction)(void (*)(void))region_exit, METH_FASTCALL,
         "End the region (also when an exception leaves it, which goes on)."},
        {NULL, NULL, 0, NULL},
};

static PyMemberDef region_members[] = {
        {"name", T_OBJECT, offsetof(struct pmcpy_region, name), READONLY, "The region's name."},
        {"id", T_UINT, offsetof(struct pmcpy_region, id), READONLY,
         "The interned id (0: the name was refused, or profiling is disabled)."},
        {NULL, 0, 0, 0, NULL},
};

static PyMemberDef function_members[] = {
        {"__wrapped_region__", T_OBJECT, offsetof(struct pmcpy_function, region), READONLY,
         "The pmc.region each call is."},
        {NULL, 0, 0, 0, NULL},
};

static PyGetSetDef function_getset[] = {
        {"__dict__", PyObject_GenericGetDict, PyObject_GenericSetDict, NULL, NULL},
        {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject pmcpy_region_type = {
        PyVarObject_HEAD_INIT(NULL, 0).tp_name = "pmc.region",
        .tp_basicsize = sizeof(struct pmcpy_region),
        .tp_flags = Py_TPFLAGS_DEFAULT,
        .tp_doc = "region(name): a named region of code, counted per thread.\n\n"
                  "    with pmc.region(\"step\"): ...      # the block is the region\n"
                  "    @pmc.region(\"step\")                # each call is the region\n\n"
                  "The name is interned once, when the object is made: keep the object\n"
                  "(a module-level constant) rather than make one per pass.",
        .tp_new = PyType_GenericNew,
        .tp_init = region_init,
        .tp_dealloc = region_dealloc,
        .tp_repr = region_repr,
        .tp_call = region_call,
        .tp_methods = region_methods,
        .tp_members = region_members,
};

static PyTypeObject pmcpy_function_type = {
        PyVarObject_HEAD_INIT(NULL, 0).tp_name = "pmc._function",
        .tp_basicsize = sizeof(struct pmcpy_function),
        .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
        .tp_doc = "A function decorated with pmc.region(name): each call is the region.",
        .tp_dealloc = function_dealloc,
        .tp_traverse = function_traverse,
        .tp_clear = function_clear,
        .tp_call = PyVectorcall_Call,
        .tp_vectorcall_offset = offsetof(struct pmcpy_function, vectorcall),
        .tp_dictoffset = offsetof(struct pmcpy_function, dict),
        .tp_descr_get = function_get,
        .tp_repr = function_repr,
        .tp_members = function_members,
        .tp_getset = function_getset,
};

static PyMethodDef module_methods[] = {
        {"flush", pmcpy_flush, METH_NOARGS,
         "flush() -> int: send the calling thread's buffered samples now.\n\n"
         "0, or a negative errno as pmc_flush(3) says (-ENOTCONN: no daemon; the\n"
         "samples are kept). Never raises."},
        {"enabled", pmcpy_enabled, METH_NOARGS,
         "enabled() -> bool: whether the calling thread's regions are counted\n"
         "(registers the thread if it has not tried yet)."},
        {"thread_uses_rdpmc", pmcpy_uses_rdpmc, METH_NOARGS,
         "thread_uses_rdpmc() -> int: 1 rdpmc, 0 read(), -1 not profiled."},
        {NULL, NULL, 0, NULL},
};

static struct PyModuleDef pmcpy_module = {
        PyModuleDef_HEAD_INIT,
        .m_name = "pmc._pmc",
        .m_doc = "The extension behind the pmc package (libpmcclient).",
        .m_size = -1,
        .m_methods = module_methods,
};

PyMODINIT_FUNC
PyInit__pmc(void)
{
	PyObject *m;

	pmcpy_function_type.tp_new = NULL;
	if (PyType_Ready(&pmcpy_region_type) < 0 || PyType_Ready(&pmcpy_function_type) < 0)
		return NULL;
	m = PyModule_Create(&pmcpy_module);
	if (!m)
		return NULL;
	Py_INCREF(&pmcpy_region_type);
	if (PyModule_AddObject(m, "region", (PyObject *)&pmcpy_region_type) < 0) {
		Py_DECREF(&pmcpy_region_type);
		Py_DECREF(m);
		return NULL;
	}
	return m;
}
