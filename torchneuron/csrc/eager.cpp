// The eager hot path in C++: a boxed PrivateUse1 kernel per lowered ATen overload that
// runs a cached executable straight from the dispatcher's stack.
//
// Without it every eager op crosses into Python as the dispatcher's Python kernels do
// (arguments converted to an args tuple and kwargs dict, then OpKernel.__call__ and
// _run in Python), which costs more than the XLA call itself. This kernel converts the
// arguments once, builds the cache key with the same `fast_signature` the Python path
// uses (so both paths read and write one cache with one key format), and, when the
// executable is cached and needs nothing else, gathers its input buffers, calls it,
// stores written buffers and makes the output tensors. Every other call (a cache miss,
// a profiler running, device-side checks, storages never written, calls fast_signature
// leaves to Python) resumes in Python at OpKernel._dispatch with the same values and
// signature, so semantics stay defined in torchneuron/eager/executor.py.
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>
#include <torch/csrc/DynamicTypes.h>
#include <torch/csrc/Exceptions.h>
#include <torch/csrc/autograd/python_variable.h>
#include <torch/csrc/jit/python/pybind_utils.h>
#include <torch/csrc/profiler/api.h>
#include <torch/extension.h>
#include <torch/library.h>

#include <cmath>
#include <memory>
#include <string>
#include <vector>

namespace torchneuron {

// Defined in neuron.cpp.
extern PyObject* g_registry;
py::object fast_signature(PyObject* const* values, Py_ssize_t n, const py::tuple& kinds, const py::tuple& defaults,
                          const py::dict& buffers, const py::dict& to_jax);
at::Tensor new_output(PyObject* sizes, PyObject* strides, PyObject* dtype, int device, PyObject* buffer);

namespace {

// Python objects of torchneuron.eager.executor, set once by `set_eager_callbacks`
// (owned references kept for the life of the process).
PyObject* g_to_jax = nullptr;       // dict: torch dtype -> JAX dtype
PyObject* g_int64_array = nullptr;  // list -> np.int64 array (the dynamic storage offsets)
PyObject* g_run_failed = nullptr;   // (exception, device) -> raises it, or OutOfMemoryError
PyObject* g_run_lock = nullptr;     // executor.RUN_LOCK (an RLock)

PyObject* interned(const char* s) {
  PyObject* out = PyUnicode_InternFromString(s);
  if (!out) throw py::error_already_set();
  return out;
}

py::object attr(PyObject* obj, PyObject* name) {
  PyObject* out = PyObject_GetAttr(obj, name);
  if (!out) throw py::error_already_set();
  return py::reinterpret_steal<py::object>(out);
}

// A kernel's Python result (one Tensor, a tuple of them, or None) -> its tensors.
at::Tensor as_tensor(PyObject* obj) {
  if (obj == Py_None) return at::Tensor();
  TORCH_CHECK(THPVariable_Check(obj), "neuron eager kernel returned ", Py_TYPE(obj)->tp_name, ", not a Tensor");
  return THPVariable_Unpack(obj);
}

// Holds executor.RUN_LOCK if it was free (or held by this thread); a busy lock leaves
// the call to Python, which waits for it with the GIL released.
class RunLock {
 public:
  RunLock() {
    PyObject* ok = PyObject_CallMethodOneArg(g_run_lock, s_acquire(), Py_False);
    if (!ok) throw py::error_already_set();
    held_ = ok == Py_True;
    Py_DECREF(ok);
  }
  ~RunLock() {
    if (!held_) return;
    PyObject* type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);  // release even while an error propagates
    PyObject* ok = PyObject_CallMethodNoArgs(g_run_lock, s_release());
    Py_XDECREF(ok);
    PyErr_Restore(type, value, tb);
  }
  bool held() const { return held_; }

 private:
  static PyObject* s_acquire() {
    static PyObject* name = interned("acquire");
    return name;
  }
  static PyObject* s_release() {
    static PyObject* name = interned("release");
    return name;
  }
  bool held_ = false;
};

// CPU's checked_convert of the Python-number Scalars an executable converts, made before
// each run (as OpKernel._run makes them in Python): `checks` is the entry's tuple of
// (position in `dyn`, lo, hi, message, dtype) that _common.check_scalar recorded while
// tracing. lo and hi are floats for a floating target type (finite values outside
// [lo, hi] overflow; infinities and NaN convert) and ints for an integer one (floats
// must lie in [lo, hi + 1); unsigned types take ints down to -hi). Raises RuntimeError
// with the message, as CPU does.
void check_scalars(PyObject* checks, PyObject* dyn) {
  const Py_ssize_t m = PyTuple_GET_SIZE(checks);
  for (Py_ssize_t i = 0; i < m; ++i) {
    PyObject* c = PyTuple_GET_ITEM(checks, i);
    PyObject* v = PyList_GET_ITEM(dyn, PyLong_AsSsize_t(PyTuple_GET_ITEM(c, 0)));
    PyObject* lo = PyTuple_GET_ITEM(c, 1);
    PyObject* hi = PyTuple_GET_ITEM(c, 2);
    bool bad;
    if (PyFloat_Check(lo)) {
      double x = PyFloat_Check(v) ? PyFloat_AS_DOUBLE(v) : PyLong_AsDouble(v);
      bad = std::isfinite(x) && (x < PyFloat_AS_DOUBLE(lo) || x > PyFloat_AS_DOUBLE(hi));
    } else if (PyFloat_Check(v)) {
      double x = PyFloat_AS_DOUBLE(v);
      bad = !(x >= PyLong_AsDouble(lo) && x < PyLong_AsDouble(hi) + 1);  // NaN compares false
    } else {
      int overflow = 0;
      long long x = PyLong_AsLongLongAndOverflow(v, &overflow);
      long long l = PyLong_AsLongLong(lo), h = PyLong_AsLongLong(hi);
      bad = overflow != 0 || (l == 0 ? (x > h || x < -h) : (x < l || x > h));
    }
    if (PyErr_Occurred()) throw py::error_already_set();
    if (bad) {
      PyErr_SetObject(PyExc_RuntimeError, PyTuple_GET_ITEM(c, 3));
      throw py::error_already_set();
    }
  }
}

class EagerKernel final : public c10::OperatorKernel {
 public:
  // kernel: the OpKernel; dtype_args: per schema argument, whether it is a ScalarType
  // (held as an int on the stack; Python kernels receive a torch.dtype).
  EagerKernel(py::object kernel, std::vector<bool> dtype_args)
      : kernel_(kernel.release().ptr()), dtype_args_(std::move(dtype_args)) {
    kinds_ = attr(kernel_, interned("kinds_t")).release().ptr();
    defaults_ = attr(kernel_, interned("defaults_t")).release().ptr();
    for (py::handle src : attr(kernel_, interned("return_src"))) {
      return_src_.push_back(src.is_none() ? -1 : src.cast<int>());
    }
    s_cache_ = interned("cache");
    s_cpp_ = interned("cpp");
    s_reads_ = interned("reads");
    s_writes_ = interned("writes");
    s_fresh_ = interned("fresh");
    s_runs_ = interned("runs");
    s_fn_ = interned("fn");
    s_dispatch_ = interned("_dispatch");
    s_scalar_checks_ = interned("scalar_checks");
  }

  void operator()(const c10::OperatorHandle& op, c10::DispatchKeySet /*keys*/, torch::jit::Stack* stack) {
    const size_t n = op.schema().arguments().size();
    py::gil_scoped_acquire gil;
    try {
      // The values a Python kernel would get, all of them, in schema order (owned).
      std::vector<py::object> values(n);
      std::vector<PyObject*> items(n);
      {
        auto args = torch::jit::last(*stack, n);
        for (size_t i = 0; i < n; ++i) {
          py::object v;
          if (dtype_args_[i] && args[i].isInt()) {
            v = py::reinterpret_borrow<py::object>(
                reinterpret_cast<PyObject*>(torch::getTHPDtype(static_cast<at::ScalarType>(args[i].toInt()))));
          } else {
            v = torch::jit::toPyObject(args[i]);
          }
          items[i] = v.ptr();
          values[i] = std::move(v);
        }
      }
      py::object sig = fast_signature(items.data(), static_cast<Py_ssize_t>(n),
                                      py::reinterpret_borrow<py::tuple>(kinds_),
                                      py::reinterpret_borrow<py::tuple>(defaults_),
                                      py::reinterpret_borrow<py::dict>(g_registry),
                                      py::reinterpret_borrow<py::dict>(g_to_jax));
      std::vector<at::Tensor> fresh;
      if (!sig.is_none() && run_cached(sig.ptr(), fresh)) {
        std::vector<at::Tensor> results;
        size_t next = 0;
        for (int src : return_src_) {
          results.push_back(src < 0 ? std::move(fresh[next++]) : (*stack)[stack->size() - n + src].toTensor());
        }
        torch::jit::drop(*stack, n);
        for (auto& r : results) torch::jit::push(*stack, std::move(r));
        return;
      }
      py::list value_list(n);
      for (size_t i = 0; i < n; ++i) PyList_SET_ITEM(value_list.ptr(), i, values[i].release().ptr());
      PyObject* out = PyObject_CallMethodObjArgs(kernel_, s_dispatch_, value_list.ptr(), sig.ptr(), nullptr);
      if (!out) throw py::error_already_set();
      py::object result = py::reinterpret_steal<py::object>(out);
      torch::jit::drop(*stack, n);
      if (return_src_.size() == 1) {
        torch::jit::push(*stack, as_tensor(out));
      } else if (!return_src_.empty()) {
        py::tuple items = result.cast<py::tuple>();
        for (py::handle item : items) torch::jit::push(*stack, as_tensor(item.ptr()));
      }
    } catch (py::error_already_set& e) {
      e.restore();
      throw python_error();
    }
  }

 private:
  // Runs the cached executable of signature `sig` (fast_signature's tuple) and fills
  // `fresh` with the new output tensors; false, having done nothing, when the Python
  // path must take the call.
  bool run_cached(PyObject* sig, std::vector<at::Tensor>& fresh) {
    PyObject* key = PyTuple_GET_ITEM(sig, 0);
    PyObject* metas = PyTuple_GET_ITEM(sig, 2);
    PyObject* dyn = PyTuple_GET_ITEM(sig, 3);
    long device = PyLong_AsLong(PyTuple_GET_ITEM(sig, 4));
    if (device < 0) return false;  // no tensor argument: the current device decides
    py::object cache = attr(kernel_, s_cache_);
    PyObject* entry = PyDict_GetItemWithError(cache.ptr(), key);
    if (!entry) {
      if (PyErr_Occurred()) throw py::error_already_set();
      return false;
    }
    py::object entry_ref = py::reinterpret_borrow<py::object>(entry);
    // What torch._C._autograd._profiler_enabled (torchneuron.profiler.enabled) returns.
    if (torch::profiler::impl::profilerEnabled()) return false;
    if (!PyObject_IsTrue(attr(entry, s_cpp_).ptr())) return false;  // checks that live in Python
    py::object scalar_checks = attr(entry, s_scalar_checks_);
    if (scalar_checks.ptr() != Py_None) check_scalars(scalar_checks.ptr(), dyn);

    RunLock lock;
    if (!lock.held()) return false;
    // Strong references: converting the offsets runs Python code, which may free storages.
    std::vector<py::object> inputs;
    py::object reads = attr(entry, s_reads_);
    for (py::handle j : reads) {
      PyObject* meta = PyList_GET_ITEM(metas, PyLong_AsSsize_t(j.ptr()));
      PyObject* buf = PyDict_GetItemWithError(g_registry, PyTuple_GET_ITEM(meta, 0));
      if (!buf) {
        if (PyErr_Occurred()) throw py::error_already_set();
        return false;  // a storage never written reads as zeros: Python creates its buffer
      }
      inputs.push_back(py::reinterpret_borrow<py::object>(buf));
    }
    const Py_ssize_t n_dyn = PyList_GET_SIZE(dyn);
    for (Py_ssize_t i = 0; i < n_dyn; ++i) {
      PyObject* v = PyList_GET_ITEM(dyn, i);
      if (i == n_dyn - 1 && PyList_CheckExact(v)) {  // the nonzero storage offsets
        PyObject* arr = PyObject_CallOneArg(g_int64_array, v);
        if (!arr) throw py::error_already_set();
        inputs.push_back(py::reinterpret_steal<py::object>(arr));
      } else {
        inputs.push_back(py::reinterpret_borrow<py::object>(v));
      }
    }

    py::object more = py::int_(PyLong_AsLongLong(attr(entry, s_runs_).ptr()) + 1);
    if (PyObject_SetAttr(entry, s_runs_, more.ptr()) < 0) throw py::error_already_set();
    py::object fn = attr(entry, s_fn_);
    std::vector<PyObject*> argv;
    argv.reserve(inputs.size());
    for (auto& x : inputs) argv.push_back(x.ptr());
    PyObject* outs_raw = PyObject_Vectorcall(fn.ptr(), argv.data(), argv.size(), nullptr);
    if (!outs_raw) raise_run_error(device);
    py::object outs = py::reinterpret_steal<py::object>(PySequence_Fast(outs_raw, "executable outputs"));
    Py_DECREF(outs_raw);
    if (!outs) throw py::error_already_set();
    PyObject** out_items = PySequence_Fast_ITEMS(outs.ptr());
    Py_ssize_t k = 0;
    for (py::handle j : attr(entry, s_writes_)) {
      PyObject* meta = PyList_GET_ITEM(metas, PyLong_AsSsize_t(j.ptr()));
      if (PyDict_SetItem(g_registry, PyTuple_GET_ITEM(meta, 0), out_items[k++]) < 0) throw py::error_already_set();
    }
    for (py::handle spec : attr(entry, s_fresh_)) {
      if (spec.is_none()) {  // an undefined tensor (a masked-out gradient)
        fresh.emplace_back();
        continue;
      }
      PyObject* s = spec.ptr();
      fresh.push_back(new_output(PyTuple_GET_ITEM(s, 0), PyTuple_GET_ITEM(s, 1), PyTuple_GET_ITEM(s, 2),
                                 static_cast<int>(device), out_items[k++]));
    }
    return true;
  }

  // The executable raised: PJRT's out-of-memory becomes torch.OutOfMemoryError, as in
  // OpKernel._run; anything else propagates unchanged.
  [[noreturn]] static void raise_run_error(long device) {
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    PyErr_NormalizeException(&type, &value, &tb);
    if (tb) PyException_SetTraceback(value, tb);
    py::object dev = py::int_(device);
    PyObject* ok = PyObject_CallFunctionObjArgs(g_run_failed, value, dev.ptr(), nullptr);
    if (ok) {  // it returned instead of raising: keep the original error
      Py_DECREF(ok);
      PyErr_Restore(type, value, tb);
    } else {
      Py_XDECREF(type);
      Py_XDECREF(value);
      Py_XDECREF(tb);
    }
    throw py::error_already_set();
  }

  // Owned references, never released: the dispatcher destroys its kernels after the
  // interpreter has finalized.
  PyObject* kernel_;  // the OpKernel
  std::vector<bool> dtype_args_;
  PyObject* kinds_;     // kernel.kinds_t
  PyObject* defaults_;  // kernel.defaults_t
  std::vector<int> return_src_;  // per schema return: the argument it aliases, or -1 for a new tensor
  PyObject *s_cache_, *s_cpp_, *s_reads_, *s_writes_, *s_fresh_, *s_runs_, *s_fn_, *s_dispatch_, *s_scalar_checks_;
};

// The library holding the eager kernels; never destroyed (kernels live as long as the
// process, like those of TORCH_LIBRARY_IMPL).
torch::Library* g_library = nullptr;

void set_eager_callbacks(py::object to_jax, py::object int64_array, py::object run_failed, py::object run_lock) {
  g_run_lock = run_lock.release().ptr();
  g_to_jax = to_jax.release().ptr();
  g_int64_array = int64_array.release().ptr();
  g_run_failed = run_failed.release().ptr();
}

// Registers `kernel` (an OpKernel) as the PrivateUse1 kernel of aten::`name`.
void register_eager(const std::string& name, py::object kernel, std::vector<bool> dtype_args) {
  TORCH_CHECK(g_to_jax, "set_eager_callbacks must run before register_eager");
  if (!g_library) {
    g_library = new torch::Library(torch::Library::IMPL, "aten", c10::DispatchKey::PrivateUse1, __FILE__, __LINE__);
  }
  g_library->impl(name.c_str(), torch::CppFunction::makeFromBoxedFunctor(
                                    std::make_unique<EagerKernel>(std::move(kernel), std::move(dtype_args))));
}

}  // namespace

void register_eager_bindings(py::module& m) {
  m.def("set_eager_callbacks", &set_eager_callbacks);
  m.def("register_eager", &register_eager);
}

}  // namespace torchneuron
