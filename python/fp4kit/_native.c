/* fp4kit._native: the compiled hot path of mm_fp4, mm_w4a16 and fp4_quantize on PyTorch tensors.
 *
 * The Python package validates a call once per (operands' shapes, strides, dtypes, devices,
 * options) key and keeps a plan: the library's argument structs with everything but the data
 * pointers (_plan.py). What remains per call is building the key, finding the plan, allocating the
 * outputs, reading the data pointers and PyTorch's current stream, and the library call. Written in
 * Python that costs 8-10 us over the C call on a fast host, of which PyTorch's own attribute reads
 * and allocation are about 3.5 (bench/results/h200/2026-12-02-host-cost-new-empty/); the rest is
 * interpreter frames and ctypes. Here the same steps run in C: the key is a flat tuple of the
 * tensors' attributes, the plan a C object holding the structs' addresses, and the entry point is
 * called directly (the GIL released around it, as ctypes does).
 *
 * The module holds no rules of its own. A key it has not seen, an operand that is not a tensor (a
 * NumPy array, a scalar given as an array), or a current device other than the plan's goes to the
 * Python function registered for the op (`setup`), which validates the call, builds the plan and
 * hands it back with `remember` (or None: such calls always take the Python path). Both paths fill
 * the same structs and call the same entry point, so their results are the same bits.
 *
 * Plans are per thread (kept in the thread state's dictionary), like the Python plans they wrap.
 * The structs are read through fp4kit.h, the library's public header; `struct_sizes` lets the
 * package refuse a module built against another layout. */

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdint.h>

#include "fp4kit.h"

/* The plan kinds, and how a plan passes its scalar: the values of _plan.py's SCALAR_* constants. */
enum { KIND_MM = 0, KIND_W4A16 = 1, KIND_QUANTIZE = 2, KINDS = 3 };
enum { SCALAR_NUMBER = 0, SCALAR_HOST = 1, SCALAR_DEVICE = 2, SCALAR_DEVICE_CAST = 3, SCALAR_UNUSED = 4 };

typedef fp4_status (*mm_fn)(fp4_context *, const fp4_qmatrix *, const fp4_qmatrix *, float, fp4_matrix *,
                            const fp4_options *);
typedef fp4_status (*w4a16_fn)(fp4_context *, const fp4_matrix *, const fp4_qmatrix *, float, fp4_matrix *,
                               const fp4_options *);
typedef fp4_status (*quantize_fn)(fp4_context *, const fp4_matrix *, float, fp4_qmatrix *, const fp4_options *);

/* Where each op's arguments sit in a call (the order of the public function's parameters): the
 * tensors first, then the scalar, then the options; `out` is an option slot keyed as a tensor. */
typedef struct {
  int tensors;   /* leading tensor operands */
  int out_at;    /* index of `out`, -1 if the op has none */
  int nargs;     /* arguments in all */
} op_shape;

static const op_shape OPS[KINDS] = {
    /* mm_fp4(a, b, a_descale, b_descale, alpha, out_dtype, out, block_size, use_8x4_sf_layout,
     *        backend, use_nvfp4, enable_pdl) */
    {4, 6, 12},
    /* mm_w4a16(a, b, b_descale, alpha, out_dtype, out, block_size, use_nvfp4, b_descale_layout,
     *          backend, enable_pdl) */
    {3, 5, 11},
    /* fp4_quantize(input, global_scale, sf_vec_size, sf_use_ue8m0, is_sf_swizzled_layout,
     *              is_sf_8x4_layout, enable_pdl, backend, order) */
    {1, -1, 9},
};

/* ---- module state (set once by setup) ----------------------------------------------------------- */

static PyObject *tensor_type;     /* torch.Tensor */
static PyObject *empty_like;      /* torch.empty_like */
static PyObject *current_device;  /* () -> the current CUDA device ordinal */
static PyObject *raw_stream;      /* (device) -> PyTorch's current cudaStream_t as an int */
static PyObject *last_local;      /* _plan.last: a threading.local whose .info is fp4kit.last_run() */
static PyObject *check_status;    /* _lib.check(status, name): raises the library's error */
static PyObject *slow[KINDS];     /* the Python function of each op: (key or None, *args) */

static PyObject *s_shape, *s_stride, *s_dtype, *s_device, *s_get_device, *s_data_ptr, *s_float, *s_item, *s_acquire,
    *s_release, *s_info, *s_plans, *scalar_number;

/* ---- plans --------------------------------------------------------------------------------------- */

typedef struct {
  PyObject_HEAD
  int kind;
  int scalar_mode;
  int device;           /* CUDA ordinal, -1 for host operands */
  void *fn;             /* the library's entry point */
  fp4_context *ctx;
  void *first;          /* fp4_qmatrix (mm_fp4's a) or fp4_matrix (mm_w4a16's a, the values to quantize) */
  fp4_qmatrix *qmat;    /* the weight (GEMMs) or the codes and scales written (quantize) */
  fp4_matrix *out;      /* GEMMs' output */
  fp4_options *opts;
  float *scalar;        /* the by-value alpha / global scale */
  PyObject *lock;       /* the context's threading.Lock, or None */
  PyObject *info;       /* the plan's RunInfo, what fp4kit.last_run() returns after the call */
  PyObject *tpl;        /* what the output is allocated from (torch.empty_like(tpl)): the GEMMs' output,
                           None where the caller passes it; the codes of a quantization */
  PyObject *sf_tpl;     /* quantize: the scales' template */
  PyObject *name;       /* the entry point's name, for errors */
  PyObject *owner;      /* the Python plan, which owns the structs */
} Plan;

static void plan_dealloc(Plan *p) {
  Py_XDECREF(p->lock);
  Py_XDECREF(p->info);
  Py_XDECREF(p->tpl);
  Py_XDECREF(p->sf_tpl);
  Py_XDECREF(p->name);
  Py_XDECREF(p->owner);
  Py_TYPE(p)->tp_free((PyObject *)p);
}

/* An address given as an int (None: NULL). After a failure (*bad set, an exception raised) it does
 * nothing, so a run of conversions needs one check at its end. */
static void *address(PyObject *v, int *bad) {
  if (*bad || v == Py_None) return NULL;
  void *p = PyLong_AsVoidPtr(v);
  if (p == NULL && PyErr_Occurred()) *bad = 1;
  return p;
}

static PyObject *plan_new(PyTypeObject *type, PyObject *args, PyObject *kwargs) {
  static char *names[] = {"kind", "fn",     "ctx",  "first",    "qmat", "out",  "opts",  "scalar", "scalar_mode",
                          "device", "lock", "info", "template", "sf_template", "name", "owner", NULL};
  int kind, scalar_mode, device;
  PyObject *fn, *ctx, *first, *qmat, *out, *opts, *scalar, *lock, *info, *tpl, *sf_tpl, *name, *owner;
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "iOOOOOOOiiOOOOUO", names, &kind, &fn, &ctx, &first, &qmat, &out,
                                   &opts, &scalar, &scalar_mode, &device, &lock, &info, &tpl, &sf_tpl, &name, &owner))
    return NULL;
  if (kind < 0 || kind >= KINDS || scalar_mode < 0 || scalar_mode > SCALAR_UNUSED) {
    PyErr_Format(PyExc_ValueError, "fp4kit._native.Plan: kind %d / scalar mode %d has no compiled path", kind,
                 scalar_mode);
    return NULL;
  }
  Plan *p = (Plan *)type->tp_alloc(type, 0);
  if (!p) return NULL;
  p->kind = kind;
  p->scalar_mode = scalar_mode;
  p->device = device;
  int bad = 0;
  p->fn = address(fn, &bad);
  p->ctx = address(ctx, &bad);
  p->first = address(first, &bad);
  p->qmat = address(qmat, &bad);
  p->out = address(out, &bad);
  p->opts = address(opts, &bad);
  p->scalar = address(scalar, &bad);
  PyObject *refs[] = {lock, info, tpl, sf_tpl, name, owner};
  PyObject **slots[] = {&p->lock, &p->info, &p->tpl, &p->sf_tpl, &p->name, &p->owner};
  for (size_t i = 0; i < sizeof refs / sizeof refs[0]; i++) {
    Py_INCREF(refs[i]);
    *slots[i] = refs[i];
  }
  if (bad || !p->fn || !p->first || !p->qmat || !p->opts || !p->scalar ||
      (kind != KIND_QUANTIZE && !p->out) || (kind == KIND_QUANTIZE && (tpl == Py_None || sf_tpl == Py_None))) {
    if (!PyErr_Occurred())
      PyErr_SetString(PyExc_ValueError, "fp4kit._native.Plan: a struct address or a quantization template is missing");
    Py_DECREF(p);
    return NULL;
  }
  return (PyObject *)p;
}

static PyTypeObject PlanType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "fp4kit._native.Plan",
    .tp_basicsize = sizeof(Plan),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A validated call of the Python package, as the compiled path runs it (built by the package).",
    .tp_new = plan_new,
    .tp_dealloc = (destructor)plan_dealloc,
};

/* ---- the hot path -------------------------------------------------------------------------------- */

/* obj.name(): the slot before obj is there for PY_VECTORCALL_ARGUMENTS_OFFSET (the callee may use it). */
static PyObject *call0(PyObject *obj, PyObject *name) {
  PyObject *args[2] = {NULL, obj};
  return PyObject_VectorcallMethod(name, args + 1, 1 | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL);
}

/* x.data_ptr() as a pointer. After a failure (*err set, an exception raised) it does nothing, so a
 * run of calls needs one check at its end. */
static void *data_ptr(PyObject *x, int *err) {
  if (*err) return NULL;
  PyObject *v = call0(x, s_data_ptr);
  if (!v) {
    *err = 1;
    return NULL;
  }
  void *p = PyLong_AsVoidPtr(v);
  Py_DECREF(v);
  if (p == NULL && PyErr_Occurred()) *err = 1;
  return p;
}

/* torch.empty_like(tpl): a new contiguous tensor of the template's shape, dtype and device. */
static PyObject *allocate(PyObject *tpl) {
  return PyObject_CallOneArg(empty_like, tpl);
}

/* Appends a tensor's shape, strides, dtype and device to key at *at: for the first operand its
 * torch.device (type and index: a CPU and a meta tensor differ), for the others the ordinal, which
 * the plan's validation compared with the first's. 0 when t is not a tensor (the call then takes
 * the Python path), -1 on error. */
static int key_tensor(PyObject *key, Py_ssize_t *at, PyObject *t, int first) {
  if (!PyObject_TypeCheck(t, (PyTypeObject *)tensor_type)) return 0;
  PyObject *v[4] = {PyObject_GetAttr(t, s_shape), call0(t, s_stride), PyObject_GetAttr(t, s_dtype),
                    first ? PyObject_GetAttr(t, s_device) : call0(t, s_get_device)};
  for (int i = 0; i < 4; i++) {
    if (!v[i]) {
      for (int j = 0; j < 4; j++) Py_XDECREF(v[j]);
      return -1;
    }
  }
  for (int i = 0; i < 4; i++) PyTuple_SET_ITEM(key, (*at)++, v[i]);
  return 1;
}

static void key_none(PyObject *key, Py_ssize_t *at, int n) {
  for (int i = 0; i < n; i++) {
    Py_INCREF(Py_None);
    PyTuple_SET_ITEM(key, (*at)++, Py_None);
  }
}

/* The key of a call: (kind, the tensors' attributes, the scalar's kind, the options, `out`'s
 * attributes). NULL with no exception set when an operand is not one the compiled path takes. */
static PyObject *call_key(int kind, PyObject *const *args) {
  const op_shape *op = &OPS[kind];
  Py_ssize_t size = 1 + 4 * op->tensors + 3 + (op->nargs - op->tensors - 1) + (op->out_at >= 0 ? 3 : 0);
  PyObject *key = PyTuple_New(size);
  if (!key) return NULL;
  Py_ssize_t at = 0;
  PyTuple_SET_ITEM(key, at++, PyLong_FromLong(kind));
  for (int i = 0; i < op->tensors; i++) {
    int r = key_tensor(key, &at, args[i], i == 0);
    if (r <= 0) goto out;
  }
  PyObject *s = args[op->tensors];  /* the scalar: a number, None, or a one-element tensor */
  if (s == Py_None || PyFloat_CheckExact(s) || PyLong_CheckExact(s)) {
    Py_INCREF(scalar_number);
    PyTuple_SET_ITEM(key, at++, scalar_number);
    key_none(key, &at, 2);
  } else if (PyObject_TypeCheck(s, (PyTypeObject *)tensor_type)) {
    PyObject *v[3] = {PyObject_GetAttr(s, s_shape), PyObject_GetAttr(s, s_dtype), call0(s, s_get_device)};
    if (!v[0] || !v[1] || !v[2]) {
      for (int j = 0; j < 3; j++) Py_XDECREF(v[j]);
      goto out;
    }
    for (int j = 0; j < 3; j++) PyTuple_SET_ITEM(key, at++, v[j]);
  } else {
    goto out;
  }
  for (int i = op->tensors + 1; i < op->nargs; i++) {
    if (i == op->out_at && args[i] != Py_None) {
      int r = key_tensor(key, &at, args[i], 0);
      if (r <= 0) goto out;
    } else {
      Py_INCREF(args[i]);
      PyTuple_SET_ITEM(key, at++, args[i]);
      if (i == op->out_at) key_none(key, &at, 3);
    }
  }
  return key;
out:
  /* slots not yet set are NULL, which tuple deallocation skips */
  Py_DECREF(key);
  return NULL;
}

static PyObject *thread_plans(void) {
  PyObject *tdict = PyThreadState_GetDict();
  if (!tdict) {
    PyErr_SetString(PyExc_RuntimeError, "fp4kit._native: no thread state dictionary");
    return NULL;
  }
  PyObject *d = PyDict_GetItemWithError(tdict, s_plans);
  if (d || PyErr_Occurred()) return d;
  d = PyDict_New();
  if (!d || PyDict_SetItem(tdict, s_plans, d) < 0) {
    Py_XDECREF(d);
    return NULL;
  }
  Py_DECREF(d);
  return d;  /* borrowed, owned by the thread's dictionary */
}

static PyObject *go_slow(int kind, PyObject *key, PyObject *const *args) {
  PyObject *full[16];
  full[0] = NULL;
  full[1] = key ? key : Py_None;
  for (int i = 0; i < OPS[kind].nargs; i++) full[2 + i] = args[i];
  return PyObject_Vectorcall(slow[kind], full + 1, (size_t)(1 + OPS[kind].nargs) | PY_VECTORCALL_ARGUMENTS_OFFSET,
                             NULL);
}

static int set_scalar(Plan *p, PyObject *s, PyObject **keep) {
  const float **dev = p->kind == KIND_QUANTIZE ? &p->opts->global_scale_device : &p->opts->alpha_device;
  int err = 0;
  switch (p->scalar_mode) {
  case SCALAR_NUMBER:
    if (s == Py_None) {
      *p->scalar = 1.0f;
    } else {
      double v = PyFloat_AsDouble(s);
      if (v == -1.0 && PyErr_Occurred()) return -1;
      *p->scalar = (float)v;
    }
    return 0;
  case SCALAR_HOST: { /* a one-element CPU tensor (its size and dtype were checked with the plan) */
    PyObject *v = call0(s, s_item);
    if (!v) return -1;
    double d = PyFloat_AsDouble(v);
    Py_DECREF(v);
    if (d == -1.0 && PyErr_Occurred()) return -1;
    *p->scalar = (float)d;
    return 0;
  }
  case SCALAR_DEVICE:
    *dev = data_ptr(s, &err);
    return err ? -1 : 0;
  case SCALAR_DEVICE_CAST: /* a float32 copy made on the device, kept until the call is queued */
    *keep = call0(s, s_float);
    if (!*keep) return -1;
    *dev = data_ptr(*keep, &err);
    return err ? -1 : 0;
  default:
    return 0;
  }
}

static PyObject *run_plan(Plan *p, int kind, PyObject *const *args) {
  const op_shape *op = &OPS[kind];
  if (p->device >= 0) { /* the Python path makes the plan's device current when it is not */
    PyObject *d = PyObject_CallNoArgs(current_device);
    if (!d) return NULL;
    long dev = PyLong_AsLong(d);
    Py_DECREF(d);
    if (dev == -1 && PyErr_Occurred()) return NULL;
    if (dev != p->device) return go_slow(kind, NULL, args);
  }
  PyObject *keep = NULL, *result = NULL, *out = NULL, *sf = NULL;
  int err = 0;
  if (set_scalar(p, args[op->tensors], &keep) < 0) goto done;
  if (kind == KIND_QUANTIZE) {
    fp4_matrix *x = p->first;
    out = allocate(p->tpl);
    if (!out) goto done;
    sf = allocate(p->sf_tpl);
    if (!sf) goto done;
    x->data = data_ptr(args[0], &err);
    p->qmat->data = data_ptr(out, &err);
    p->qmat->scales = data_ptr(sf, &err);
  } else {
    if (p->tpl != Py_None) {
      out = allocate(p->tpl);
      if (!out) goto done;
    } else {
      out = args[op->out_at];
      Py_INCREF(out);
    }
    if (kind == KIND_MM) {
      fp4_qmatrix *a = p->first;
      a->data = data_ptr(args[0], &err);
      a->scales = data_ptr(args[2], &err);
      p->qmat->scales = data_ptr(args[3], &err);
    } else {
      fp4_matrix *a = p->first;
      a->data = data_ptr(args[0], &err);
      p->qmat->scales = data_ptr(args[2], &err);
    }
    p->qmat->data = data_ptr(args[1], &err);
    p->out->data = data_ptr(out, &err);
  }
  if (err) goto done;

  int locked = p->lock != Py_None;
  if (locked) {
    PyObject *r = call0(p->lock, s_acquire);
    if (!r) goto done;
    Py_DECREF(r);
  }
  fp4_status status = FP4_OK;
  if (p->device >= 0) {
    PyObject *dev = PyLong_FromLong(p->device);
    PyObject *s = dev ? PyObject_CallOneArg(raw_stream, dev) : NULL;
    Py_XDECREF(dev);
    void *stream = s ? PyLong_AsVoidPtr(s) : NULL;
    Py_XDECREF(s);
    if (PyErr_Occurred()) err = 1;
    p->opts->stream = stream;
  }
  if (!err) {
    float scalar = *p->scalar;
    Py_BEGIN_ALLOW_THREADS
    switch (kind) {
    case KIND_MM:
      status = ((mm_fn)p->fn)(p->ctx, p->first, p->qmat, scalar, p->out, p->opts);
      break;
    case KIND_W4A16:
      status = ((w4a16_fn)p->fn)(p->ctx, p->first, p->qmat, scalar, p->out, p->opts);
      break;
    default:
      status = ((quantize_fn)p->fn)(p->ctx, p->first, scalar, p->qmat, p->opts);
      break;
    }
    Py_END_ALLOW_THREADS
  }
  if (locked) { /* released even when the call failed; an error already set is kept */
    PyObject *et, *ev, *tb;
    PyErr_Fetch(&et, &ev, &tb);
    PyObject *r = call0(p->lock, s_release);
    if (!r) {
      Py_XDECREF(et);
      Py_XDECREF(ev);
      Py_XDECREF(tb);
      goto done;
    }
    Py_DECREF(r);
    PyErr_Restore(et, ev, tb);
  }
  if (err) goto done;
  if (status != FP4_OK) {
    PyObject *st = PyLong_FromLong(status);
    PyObject *r = st ? PyObject_CallFunctionObjArgs(check_status, st, p->name, NULL) : NULL;
    Py_XDECREF(st);
    Py_XDECREF(r);
    if (!PyErr_Occurred()) PyErr_Format(PyExc_RuntimeError, "%U failed with status %d", p->name, (int)status);
    goto done;
  }
  if (PyObject_SetAttr(last_local, s_info, p->info) < 0) goto done;
  if (kind == KIND_QUANTIZE) {
    result = PyTuple_Pack(2, out, sf);
  } else {
    result = out;
    out = NULL;
  }
done:
  Py_XDECREF(keep);
  Py_XDECREF(out);
  Py_XDECREF(sf);
  return result;
}

static PyObject *dispatch(int kind, PyObject *const *args, Py_ssize_t nargs) {
  if (nargs != OPS[kind].nargs) {
    PyErr_Format(PyExc_TypeError, "fp4kit._native: %d arguments expected, got %zd", OPS[kind].nargs, nargs);
    return NULL;
  }
  if (!slow[kind]) {
    PyErr_SetString(PyExc_RuntimeError, "fp4kit._native: setup() was not called");
    return NULL;
  }
  PyObject *key = call_key(kind, args);
  if (!key) {
    if (PyErr_Occurred()) {
      /* an attribute that raised: the Python path says what is wrong with the operand */
      PyErr_Clear();
    }
    return go_slow(kind, NULL, args);
  }
  PyObject *plans = thread_plans();
  PyObject *plan = plans ? PyDict_GetItemWithError(plans, key) : NULL;
  if (!plan) {
    PyObject *r = PyErr_Occurred() ? NULL : go_slow(kind, key, args);  /* unhashable option: a TypeError */
    Py_DECREF(key);
    return r;
  }
  Py_DECREF(key);
  if (plan == Py_None) return go_slow(kind, NULL, args);
  Py_INCREF(plan);
  PyObject *r = run_plan((Plan *)plan, kind, args);
  Py_DECREF(plan);
  return r;
}

static PyObject *native_mm_fp4(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
  (void)self;
  return dispatch(KIND_MM, args, nargs);
}

static PyObject *native_mm_w4a16(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
  (void)self;
  return dispatch(KIND_W4A16, args, nargs);
}

static PyObject *native_fp4_quantize(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
  (void)self;
  return dispatch(KIND_QUANTIZE, args, nargs);
}

/* ---- setup and plan registration -------------------------------------------------------------------- */

#define PLANS_MAX 4096 /* as _plan.py's _MAX_PLANS: a thread that keeps making new shapes starts over */

static PyObject *remember(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
  (void)self;
  if (nargs != 2 || !PyTuple_Check(args[0]) || (args[1] != Py_None && !PyObject_TypeCheck(args[1], &PlanType))) {
    PyErr_SetString(PyExc_TypeError, "remember(key, plan or None)");
    return NULL;
  }
  PyObject *plans = thread_plans();
  if (!plans) return NULL;
  if (PyDict_GET_SIZE(plans) >= PLANS_MAX) PyDict_Clear(plans);
  if (PyDict_SetItem(plans, args[0], args[1]) < 0) return NULL;
  Py_RETURN_NONE;
}

static PyObject *forget(PyObject *self, PyObject *unused) {
  (void)self;
  (void)unused;
  PyObject *plans = thread_plans();
  if (!plans) return NULL;
  PyDict_Clear(plans);
  Py_RETURN_NONE;
}

static PyObject *plan_count(PyObject *self, PyObject *unused) {
  (void)self;
  (void)unused;
  PyObject *plans = thread_plans();
  return plans ? PyLong_FromSsize_t(PyDict_GET_SIZE(plans)) : NULL;
}

static void set_ref(PyObject **slot, PyObject *v) {
  PyObject *old = *slot;
  Py_INCREF(v);
  *slot = v;
  Py_XDECREF(old);
}

static PyObject *setup(PyObject *self, PyObject *args) {
  (void)self;
  PyObject *tt, *el, *cd, *rs, *last, *check, *s0, *s1, *s2;
  if (!PyArg_ParseTuple(args, "OOOOOOOOO:setup", &tt, &el, &cd, &rs, &last, &check, &s0, &s1, &s2)) return NULL;
  if (!PyType_Check(tt)) {
    PyErr_SetString(PyExc_TypeError, "setup: the tensor type must be a type");
    return NULL;
  }
  set_ref(&tensor_type, tt);
  set_ref(&empty_like, el);
  set_ref(&current_device, cd);
  set_ref(&raw_stream, rs);
  set_ref(&last_local, last);
  set_ref(&check_status, check);
  set_ref(&slow[KIND_MM], s0);
  set_ref(&slow[KIND_W4A16], s1);
  set_ref(&slow[KIND_QUANTIZE], s2);
  Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"setup", setup, METH_VARARGS,
     "setup(tensor_type, empty_like, current_device, raw_stream, last, check, mm_fp4, mm_w4a16, fp4_quantize): "
     "the PyTorch and package functions the compiled path calls; the last three take (key or None, *args)."},
    {"mm_fp4", (PyCFunction)(void (*)(void))native_mm_fp4, METH_FASTCALL, "mm_fp4's compiled path (all 12 arguments)."},
    {"mm_w4a16", (PyCFunction)(void (*)(void))native_mm_w4a16, METH_FASTCALL,
     "mm_w4a16's compiled path (all 11 arguments)."},
    {"fp4_quantize", (PyCFunction)(void (*)(void))native_fp4_quantize, METH_FASTCALL,
     "fp4_quantize's compiled path (all 9 arguments)."},
    {"remember", (PyCFunction)(void (*)(void))remember, METH_FASTCALL,
     "remember(key, plan or None): this thread's plan for a key (None: the Python path)."},
    {"forget", forget, METH_NOARGS, "Drops this thread's plans."},
    {"plan_count", plan_count, METH_NOARGS, "How many plans this thread holds."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_native",
    "The compiled hot path of fp4kit's mm_fp4, mm_w4a16 and fp4_quantize on PyTorch tensors.", -1, methods,
};

PyMODINIT_FUNC PyInit__native(void) {
  if (PyType_Ready(&PlanType) < 0) return NULL;
  PyObject *m = PyModule_Create(&module);
  if (!m) return NULL;
  struct {
    PyObject **slot;
    const char *text;
  } names[] = {{&s_shape, "shape"},       {&s_stride, "stride"},       {&s_dtype, "dtype"}, {&s_device, "device"},
               {&s_get_device, "get_device"}, {&s_data_ptr, "data_ptr"},
               {&s_float, "float"},       {&s_item, "item"},           {&s_acquire, "acquire"},     {&s_release, "release"},
               {&s_info, "info"},         {&s_plans, "fp4kit._native.plans"}, {&scalar_number, "n"}};
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
    *names[i].slot = PyUnicode_InternFromString(names[i].text);
    if (!*names[i].slot) goto fail;
  }
  Py_INCREF(&PlanType);
  if (PyModule_AddObject(m, "Plan", (PyObject *)&PlanType) < 0) goto fail;
  PyObject *sizes = Py_BuildValue("(nnnn)", (Py_ssize_t)sizeof(fp4_matrix), (Py_ssize_t)sizeof(fp4_qmatrix),
                                  (Py_ssize_t)sizeof(fp4_options), (Py_ssize_t)sizeof(fp4_run_info));
  if (!sizes || PyModule_AddObject(m, "struct_sizes", sizes) < 0) goto fail;
  return m;
fail:
  Py_DECREF(m);
  return NULL;
}
