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
 *
 * asyncio: the library's regions nest per thread, and tasks of one event loop share their
 * thread. A region left open across an await, while another task begins one, would end out
 * of order (the library drops the inner one: "nesting"), and would count the other task's
 * work as its own. So the binding keeps, per thread, the regions it opened (an "open"
 * object each: its parent, its thread) and, in a context variable, the one the running
 * context opened last: each task runs in a context of its own, which starts as a copy of
 * its creator's. A region may begin only where the innermost region open on the thread is
 * the innermost one this context knows of (its own, or one its creator had open: a child
 * task, asyncio.run() or to_thread() inside a region nest in it); otherwise the enter
 * raises RuntimeError, naming both regions, and nothing is begun. A region whose end finds
 * another context's region still open inside it ends that one as dropped (the library's
 * "nesting") and raises RuntimeError too.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <pmc/pmc.h>
#include <stdlib.h>
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

/* One run of a region the binding began: the innermost open one of its thread
 * (pmcpy_top), and the value of pmcpy_opened in the context that began it. */
struct pmcpy_open {
	PyObject_HEAD;
	struct pmcpy_open *parent; /* what was innermost on the thread when it began (owned) */
	PyObject *name;            /* the region's name, for the errors (owned) */
	const void *thread;        /* &pmcpy_top of its thread: who began it */
	pmc_region_t id;
	int open; /* 0 once ended (or dropped, ended out of order) */
};

static PyTypeObject pmcpy_open_type;
/* PMC_DISABLE set, as the library reads it (secure_getenv, "0" and "" off): regions are
 * no-ops, never refused. */
static int pmcpy_disabled;
/* The innermost region this thread's binding has open (owned; NULL: none). */
static __thread struct pmcpy_open *pmcpy_top;
/* Per context: the open object of the region it began last (or its creator had open). */
static PyObject *pmcpy_opened;

/* The innermost region still open on this thread that the running context knows of
 * (borrowed; NULL: none), or -1 (an error set). Ended ones and another thread's (a context
 * copied to a thread: to_thread()) are skipped: what the context began or inherited and
 * is still open here. */
static int
context_innermost(struct pmcpy_open **out)
{
	PyObject *v;
	struct pmcpy_open *o;

	if (PyContextVar_Get(pmcpy_opened, Py_None, &v) < 0)
		return -1;
	o = v == Py_None ? NULL : (struct pmcpy_open *)v;
	while (o && (!o->open || o->thread != &pmcpy_top))
		o = o->parent;
	Py_DECREF(v);
	*out = o;
	return 0;
}

/* Sets the running context's innermost open region to @o (NULL: none). 0 or -1. */
static int
context_set(struct pmcpy_open *o)
{
	PyObject *tok = PyContextVar_Set(pmcpy_opened, o ? (PyObject *)o : Py_None);

	if (!tok)
		return -1;
	Py_DECREF(tok);
	return 0;
}

static PyObject *
region_name_of(struct pmcpy_open *o)
{
	return o->name ? o->name : Py_None;
}

/* Begins a region on this thread if the running context may (see the top of this file):
 * 0, or -1 with RuntimeError (another context's region is open on the thread) or
 * MemoryError set, and nothing begun. */
static int
binding_begin(struct pmcpy_region *r, pmc_region_t id)
{
	struct pmcpy_open *mine, *o;

	if (context_innermost(&mine) < 0)
		return -1;
	if (mine != pmcpy_top) {
		PyErr_Format(PyExc_RuntimeError,
		             "pmc.region(%R) begun while region %R of another asyncio task (or "
		             "context) is open on this thread, across an await: regions are "
		             "counted per thread and must end before an await at which other "
		             "tasks begin regions (end it before the await, or run the work in a "
		             "thread)",
		             r->name ? r->name : Py_None, region_name_of(pmcpy_top));
		return -1;
	}
	o = PyObject_New(struct pmcpy_open, &pmcpy_open_type);
	if (!o)
		return -1;
	o->parent = pmcpy_top; /* the thread's reference moves to the new one */
	Py_XINCREF(r->name);
	o->name = r->name;
	o->thread = &pmcpy_top;
	o->id = id;
	o->open = 1;
	if (context_set(o) < 0) {
		o->parent = NULL;
		Py_DECREF(o);
		return -1;
	}
	pmcpy_top = o;
	pmcpy_begin(id);
	return 0;
}

/* Ends this context's innermost region of @id: 0, or -1 with RuntimeError when another
 * context's regions were open inside it (ended as dropped: the library's "nesting"). A
 * region this context has not open (an end without a begin; one dropped so) ends nothing. */
static int
binding_end(pmc_region_t id)
{
	struct pmcpy_open *mine, *o;
	PyObject *v, *inner = NULL;
	int r;

	if (PyContextVar_Get(pmcpy_opened, Py_None, &v) < 0)
		return -1;
	mine = v == Py_None ? NULL : (struct pmcpy_open *)v;
	if (!mine || mine->thread != &pmcpy_top || mine->id != id) {
		Py_DECREF(v);
		return 0;
	}
	if (!mine->open) { /* dropped when a region around it ended: already counted */
		r = context_set(mine->parent);
		Py_DECREF(v);
		return r;
	}
	pmc_end(id); /* drops what is open inside it, in the library too */
	if (pmcpy_top != mine) {
		inner = pmcpy_top->name;
		Py_XINCREF(inner);
	}
	while (pmcpy_top != mine->parent) {
		o = pmcpy_top;
		o->open = 0;
		pmcpy_top = o->parent;
		Py_XINCREF(pmcpy_top);
		Py_DECREF(o); /* the thread's reference */
	}
	r = context_set(mine->parent);
	Py_DECREF(v);
	if (inner) {
		if (r == 0)
			PyErr_Format(
			        PyExc_RuntimeError,
			        "pmc.region(%R) ended while region %R of another asyncio task "
			        "(or context), begun inside it, is still open on this thread: "
			        "that one is dropped (counted as \"nesting\"); regions are counted "
			        "per thread and must end before an await at which other tasks "
			        "begin regions",
			        region_name_of(mine), inner);
		Py_DECREF(inner);
		return -1;
	}
	return r;
}

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
	if ((r->id || r->refused) && !pmcpy_disabled) {
		if (binding_begin(r, r->id) < 0)
			return NULL;
	} else {
		pmcpy_begin(r->id); /* an empty name, or profiling off: nothing to count */
	}
	Py_INCREF(self);
	return self;
}

static PyObject *
region_exit(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
	struct pmcpy_region *r = (struct pmcpy_region *)self;

	if ((!r->id && !r->refused) || pmcpy_disabled)
		pmc_end(r->id); /* nothing to count */
	else if (binding_end(r->id) < 0)
		return NULL;
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
	PyObject *res, *et, *ev, *tb;

	if ((!id && !f->region->refused) || pmcpy_disabled) { /* nothing to count */
		pmcpy_begin(id);
		res = PyObject_Vectorcall(f->func, args, nargsf, kwnames);
		pmc_end(id);
		return res;
	}
	if (binding_begin(f->region, id) < 0)
		return NULL;
	res = PyObject_Vectorcall(f->func, args, nargsf, kwnames);
	if (res) {
		if (binding_end(id) < 0)
			Py_CLEAR(res);
		return res;
	}
	/* The function's exception goes on (an end out of order is counted as "nesting"). */
	PyErr_Fetch(&et, &ev, &tb);
	if (binding_end(id) < 0)
		PyErr_Clear();
	PyErr_Restore(et, ev, tb);
	return NULL;
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

static void
open_dealloc(PyObject *self)
{
	struct pmcpy_open *o = (struct pmcpy_open *)self;

	Py_XDECREF(o->parent);
	Py_XDECREF(o->name);
	PyObject_Free(self);
}

static PyTypeObject pmcpy_open_type = {
        PyVarObject_HEAD_INIT(NULL, 0).tp_name = "pmc._open",
        .tp_basicsize = sizeof(struct pmcpy_open),
        .tp_flags = Py_TPFLAGS_DEFAULT,
        .tp_doc = "A region begun by the binding (the value of its context variable).",
        .tp_dealloc = open_dealloc,
};

static PyMethodDef region_methods[] = {
        {"__enter__", region_enter, METH_NOARGS,
         "Begin the region on the calling thread (RuntimeError, nothing begun: another\n"
         "asyncio task's region is open on the thread)."},
        {"__exit__", (PyCFunction)(void (*)(void))region_exit, METH_FASTCALL,
         "End the region (also when an exception leaves it, which goes on; RuntimeError:\n"
         "a region of another task, begun inside it, was still open and is dropped)."},
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
                  "(a module-level constant) rather than make one per pass. A name with a\n"
                  "NUL raises ValueError; a name the library refuses (over 127 bytes, too\n"
                  "many) counts each run as dropped.\n\n"
                  "Regions nest per thread, which asyncio's tasks share: entering one while\n"
                  "another task's region is open across an await raises RuntimeError and\n"
                  "begins nothing; so does ending one while a region of a task it created\n"
                  "is still open (that one is dropped, \"nesting\").",
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
	if (PyType_Ready(&pmcpy_region_type) < 0 || PyType_Ready(&pmcpy_function_type) < 0 ||
	    PyType_Ready(&pmcpy_open_type) < 0)
		return NULL;
	const char *dis = secure_getenv("PMC_DISABLE");
	pmcpy_disabled = dis && *dis && strcmp(dis, "0");
	if (!pmcpy_opened) {
		pmcpy_opened = PyContextVar_New("pmc.opened", NULL);
		if (!pmcpy_opened)
			return NULL;
	}
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
