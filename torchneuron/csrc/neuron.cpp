// The C++ shim of the `neuron` device: only what Python cannot provide.
//
// - An allocator that hands out unique virtual addresses. A storage's address is a
//   handle into the Python storage registry (handle -> flat PJRT buffer); it is never
//   dereferenced. Freeing a storage removes its registry entry, which releases the buffer.
// - PrivateUse1 hooks (generators, storage resize, pinned host memory) and a device guard.
// - Metadata-only kernels (empty, empty_strided, as_strided, view, resize_, set_, ...),
//   reusing ATen's generic implementations.
// Everything that touches data lives in Python (torchneuron.runtime, torchneuron.ops).
#include <ATen/ATen.h>
#include <ATen/EmptyTensor.h>
#include <ATen/core/GeneratorForPrivateuseone.h>
#include <ATen/detail/PrivateUse1HooksInterface.h>
#include <ATen/native/Resize.h>
#include <c10/core/CachingDeviceAllocator.h>
#include <ATen/native/transformers/attention.h>
#include <ATen/SDPBackend.h>
#include <ATen/ops/_reshape_alias_native.h>
#include <ATen/ops/as_strided_native.h>
#include <ATen/ops/unfold_native.h>
#include <ATen/ops/view_as_complex_native.h>
#include <ATen/ops/view_as_real_native.h>
#include <ATen/ops/view_native.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <torch/csrc/DynamicTypes.h>
#include <torch/csrc/autograd/python_variable.h>
#include <torch/csrc/Generator.h>
#include <torch/csrc/utils/device_lazy_init.h>
#include <torch/extension.h>
#include <torch/library.h>

#include <pthread.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <mutex>
#include <unordered_set>

namespace torchneuron {

constexpr int kMaxDevices = 64;
constexpr uint64_t kAlign = 64;

// ---------------------------------------------------------------- Python callbacks
// Set once from Python by `_set_callbacks`; owned references, never released (they
// live as long as the process).
PyObject* g_registry = nullptr;  // dict: handle (int) -> flat buffer (also used by eager.cpp)
static PyObject* g_resize_cb = nullptr;  // (old_handle, new_handle, new_nbytes) -> None
static PyObject* g_copy_cb = nullptr;    // (dst_handle, src_handle, nbytes) -> None
static PyObject* g_count_cb = nullptr;   // () -> int, the number of PJRT devices
static PyObject* g_sync_cb = nullptr;    // () -> None, waits for all queued device work
static std::atomic<bool> g_python_alive{false};

// Calls fn(a, b, n) with the GIL held; a Python exception becomes a C++ one.
static void call_python(PyObject* fn, uint64_t a, uint64_t b, size_t n) {
  py::gil_scoped_acquire gil;
  PyObject* args = Py_BuildValue("(KKn)", static_cast<unsigned long long>(a), static_cast<unsigned long long>(b),
                                 static_cast<Py_ssize_t>(n));
  PyObject* out = PyObject_CallObject(fn, args);
  Py_DECREF(args);
  if (!out) {
    throw py::error_already_set();
  }
  Py_DECREF(out);
}

// Waits for all queued device work (torch.accelerator.synchronize, stream and event
// synchronization). A no-op while Python is not running.
static void synchronize_all() {
  if (!g_sync_cb || !g_python_alive.load() || !Py_IsInitialized() || _Py_IsFinalizing()) return;
  py::gil_scoped_acquire gil;
  PyObject* out = PyObject_CallObject(g_sync_cb, nullptr);
  if (!out) throw py::error_already_set();
  Py_DECREF(out);
}

// ---------------------------------------------------------------- device index
static thread_local c10::DeviceIndex t_current_device = 0;
static std::atomic<int> g_device_count{-1};

static c10::DeviceIndex device_count() {
  int n = g_device_count.load();
  if (n >= 0) return static_cast<c10::DeviceIndex>(n);
  if (!g_count_cb || !g_python_alive.load() || !Py_IsInitialized()) return 1;
  py::gil_scoped_acquire gil;
  PyObject* out = PyObject_CallObject(g_count_cb, nullptr);
  if (!out) {
    PyErr_Clear();
    return 1;
  }
  n = static_cast<int>(PyLong_AsLong(out));
  Py_DECREF(out);
  g_device_count.store(n);
  return static_cast<c10::DeviceIndex>(n);
}

static void check_device(c10::DeviceIndex index) {
  TORCH_CHECK(
      index >= 0 && index < device_count(),
      "neuron: invalid device index ", static_cast<int>(index), " (", static_cast<int>(device_count()),
      " device(s) available)");
}

// ---------------------------------------------------------------- memory statistics
// One CUDA-style statistic: its current value, peak, and cumulative increases
// ("allocated") and decreases ("freed").
struct Counter {
  std::atomic<int64_t> current{0};
  std::atomic<int64_t> peak{0};
  std::atomic<int64_t> allocated{0};
  std::atomic<int64_t> freed{0};

  void increase(int64_t n) {
    int64_t now = (current += n);
    allocated += n;
    int64_t p = peak.load();
    while (now > p && !peak.compare_exchange_weak(p, now)) {
    }
  }
  void decrease(int64_t n) {
    current -= n;
    freed += n;
  }
  c10::CachingAllocator::Stat stat() const {
    c10::CachingAllocator::Stat st;
    st.current = current.load();
    st.peak = peak.load();
    st.allocated = allocated.load();
    st.freed = freed.load();
    return st;
  }
};

// Storages of one device: bytes and count. There is no cache, so allocated, reserved,
// active and requested memory are all the same.
struct DeviceStats {
  Counter bytes;
  Counter blocks;
  std::atomic<int64_t> ooms{0};
  // The bytes the device can hold (set from Python when PJRT starts); 0: unknown.
  std::atomic<uint64_t> capacity{0};
};
static DeviceStats g_stats[kMaxDevices];

static DeviceStats& stats_of(c10::DeviceIndex index) {
  TORCH_CHECK(index >= 0 && index < kMaxDevices, "neuron: invalid device index ", static_cast<int>(index));
  return g_stats[index];
}

// ---------------------------------------------------------------- allocator
struct Block {
  uint64_t handle;
  size_t nbytes;
  c10::DeviceIndex device;
};

static std::atomic<uint64_t> g_next_handle{uint64_t(1) << 44};

static void free_block(void* ctx) {
  auto* block = static_cast<Block*>(ctx);
  DeviceStats& s = g_stats[block->device];
  s.bytes.decrease(static_cast<int64_t>(block->nbytes));
  s.blocks.decrease(1);
  if (g_python_alive.load() && Py_IsInitialized() && !_Py_IsFinalizing()) {
    py::gil_scoped_acquire gil;
    // Storages are also freed while a Python exception unwinds: keep it pending.
    PyObject *exc_type, *exc_value, *exc_tb;
    PyErr_Fetch(&exc_type, &exc_value, &exc_tb);
    PyObject* key = PyLong_FromUnsignedLongLong(block->handle);
    if (PyDict_DelItem(g_registry, key) < 0) {
      PyErr_Clear();  // never written: no buffer was created
    }
    Py_DECREF(key);
    PyErr_Restore(exc_type, exc_value, exc_tb);
  }
  delete block;
}

// A c10::DeviceAllocator so that torch.accelerator's memory API works on `neuron`.
struct NeuronAllocator final : public c10::DeviceAllocator {
  c10::DataPtr allocate(size_t nbytes) override {
    c10::DeviceIndex device = t_current_device;
    DeviceStats& s = g_stats[device];
    // Buffers are made later, by PJRT; a storage the device can never hold fails here,
    // at the op, as CUDA's allocator does, not at some later synchronization.
    uint64_t capacity = s.capacity.load();
    if (capacity && nbytes > capacity) {
      s.ooms.fetch_add(1);
      TORCH_CHECK_WITH(OutOfMemoryError, false, "neuron out of memory on neuron:", static_cast<int>(device),
                       ": tried to allocate ", static_cast<double>(nbytes) / (1 << 30), " GiB; the device holds ",
                       static_cast<double>(capacity) / (1 << 30), " GiB in all.");
    }
    // Every storage, even an empty one, gets a distinct handle so that data_ptr()
    // identifies it (tied-weight detection, the registry key).
    uint64_t span = (std::max<uint64_t>(nbytes, 1) + kAlign - 1) / kAlign * kAlign;
    uint64_t handle = g_next_handle.fetch_add(span);
    auto* block = new Block{handle, nbytes, device};
    s.bytes.increase(static_cast<int64_t>(nbytes));
    s.blocks.increase(1);
    return {reinterpret_cast<void*>(handle), block, &free_block,
            c10::Device(c10::DeviceType::PrivateUse1, device)};
  }

  c10::DeleterFnPtr raw_deleter() const override {
    return nullptr;
  }

  void copy_data(void* dest, const void* src, std::size_t count) const override {
    call_python(g_copy_cb, reinterpret_cast<uint64_t>(dest), reinterpret_cast<uint64_t>(src), count);
  }

  bool initialized() override {
    return true;
  }
  // Nothing is cached: a buffer is released when its storage dies.
  void emptyCache(c10::MempoolId_t /*mempool_id*/) override {}
  // One in-order queue per device: memory is never reused across streams early.
  void recordStream(const c10::DataPtr& /*ptr*/, c10::Stream /*stream*/) override {}

  c10::CachingDeviceAllocator::DeviceStats getDeviceStats(c10::DeviceIndex device) override {
    const DeviceStats& s = stats_of(device < 0 ? t_current_device : device);
    c10::CachingDeviceAllocator::DeviceStats out;
    const auto all = static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE);
    out.allocation[all] = out.segment[all] = out.active[all] = s.blocks.stat();
    out.allocated_bytes[all] = out.reserved_bytes[all] = out.active_bytes[all] = out.requested_bytes[all] =
        s.bytes.stat();
    return out;
  }
  void resetAccumulatedStats(c10::DeviceIndex device) override {
    DeviceStats& s = stats_of(device < 0 ? t_current_device : device);
    for (Counter* c : {&s.bytes, &s.blocks}) {
      c->allocated.store(0);
      c->freed.store(0);
    }
  }
  void resetPeakStats(c10::DeviceIndex device) override {
    DeviceStats& s = stats_of(device < 0 ? t_current_device : device);
    for (Counter* c : {&s.bytes, &s.blocks}) {
      c->peak.store(c->current.load());
    }
  }
};

static NeuronAllocator g_allocator;

// Re-points a storage at a fresh handle of `nbytes`, carrying the bytes over in Python.
static void resize_storage_bytes(c10::StorageImpl* storage, size_t nbytes) {
  TORCH_CHECK(storage->resizable(), "Trying to resize storage that is not resizable");
  c10::DeviceIndex device = storage->device().index();
  c10::DeviceIndex saved = t_current_device;
  t_current_device = device < 0 ? 0 : device;
  c10::DataPtr fresh = g_allocator.allocate(nbytes);
  t_current_device = saved;
  call_python(g_resize_cb, reinterpret_cast<uint64_t>(storage->data()), reinterpret_cast<uint64_t>(fresh.get()),
              nbytes);
  storage->set_data_ptr_noswap(std::move(fresh));
  storage->set_nbytes(nbytes);
}

// ---------------------------------------------------------------- pinned host memory
// Host memory is host memory for PJRT's CPU client; "pinned" only has to be tracked so
// that is_pinned() and DataLoader's pin_memory path behave as on CUDA.
static std::mutex g_pinned_mutex;
static std::unordered_set<const void*> g_pinned;

static void free_pinned(void* ptr) {
  {
    std::lock_guard<std::mutex> lock(g_pinned_mutex);
    g_pinned.erase(ptr);
  }
  std::free(ptr);
}

struct PinnedAllocator final : public c10::Allocator {
  c10::DataPtr allocate(size_t nbytes) override {
    void* ptr = nullptr;
    if (nbytes > 0) {
      ptr = std::aligned_alloc(kAlign, (nbytes + kAlign - 1) / kAlign * kAlign);
      TORCH_CHECK(ptr, "neuron: failed to allocate ", nbytes, " bytes of pinned host memory");
      std::lock_guard<std::mutex> lock(g_pinned_mutex);
      g_pinned.insert(ptr);
    }
    return {ptr, ptr, &free_pinned, c10::Device(c10::DeviceType::CPU)};
  }
  c10::DeleterFnPtr raw_deleter() const override {
    return &free_pinned;
  }
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    default_copy_data(dest, src, count);
  }
};

static PinnedAllocator g_pinned_allocator;

// ---------------------------------------------------------------- generator
// Counter-based generator: Python derives a JAX PRNG key from (seed, offset) and
// advances the offset by one per random op, so draws are reproducible and states are
// two integers.
struct NeuronGeneratorImpl : public c10::GeneratorImpl {
  explicit NeuronGeneratorImpl(c10::DeviceIndex index)
      : c10::GeneratorImpl(c10::Device(c10::DeviceType::PrivateUse1, index),
                           c10::DispatchKeySet(c10::DispatchKey::PrivateUse1)) {}

  void set_current_seed(uint64_t seed) override {
    seed_ = seed;
    offset_ = 0;
  }
  uint64_t current_seed() const override {
    return seed_;
  }
  uint64_t seed() override {
    set_current_seed(c10::detail::getNonDeterministicRandom());
    return seed_;
  }
  void set_offset(uint64_t offset) override {
    offset_ = offset;
  }
  uint64_t get_offset() const override {
    return offset_;
  }
  c10::intrusive_ptr<c10::TensorImpl> get_state() const override {
    auto state = at::empty({16}, at::TensorOptions().dtype(at::kByte).device(at::kCPU));
    auto* data = reinterpret_cast<uint64_t*>(state.data_ptr());
    data[0] = seed_;
    data[1] = offset_;
    return state.getIntrusivePtr();
  }
  void set_state(const c10::TensorImpl& new_state) override {
    TORCH_CHECK(new_state.numel() == 16 && new_state.dtype() == at::kByte,
                "neuron generator state must be a uint8 tensor of 16 bytes, got ", new_state.numel(),
                " elements of ", new_state.dtype());
    const auto* data = static_cast<const uint64_t*>(new_state.data());
    seed_ = data[0];
    offset_ = data[1];
  }
  static c10::DeviceType device_type() {
    return c10::DeviceType::PrivateUse1;
  }

 private:
  NeuronGeneratorImpl* clone_impl() const override {
    auto* gen = new NeuronGeneratorImpl(device().index());
    gen->seed_ = seed_;
    gen->offset_ = offset_;
    return gen;
  }
  uint64_t seed_ = c10::default_rng_seed_val;
  uint64_t offset_ = 0;
};

static const at::Generator& default_generator(c10::DeviceIndex index) {
  static std::vector<at::Generator> generators;
  static std::once_flag once;
  std::call_once(once, [] {
    generators.resize(kMaxDevices);
    for (int i = 0; i < kMaxDevices; ++i) {
      generators[i] = at::make_generator<NeuronGeneratorImpl>(static_cast<c10::DeviceIndex>(i));
    }
  });
  if (index < 0) index = t_current_device;
  check_device(index);
  return generators[index];
}

// ---------------------------------------------------------------- hooks
struct NeuronHooks final : public at::PrivateUse1HooksInterface {
  bool isBuilt() const override {
    return true;
  }
  bool isAvailable() const override {
    return device_count() > 0;
  }
  const at::Generator& getDefaultGenerator(c10::DeviceIndex index) const override {
    return default_generator(index);
  }
  at::Generator getNewGenerator(c10::DeviceIndex index) const override {
    if (index < 0) index = t_current_device;
    return at::make_generator<NeuronGeneratorImpl>(index);
  }
  at::Device getDeviceFromPtr(void* /*data*/) const override {
    return c10::Device(c10::DeviceType::PrivateUse1, t_current_device);
  }
  bool isPinnedPtr(const void* data) const override {
    std::lock_guard<std::mutex> lock(g_pinned_mutex);
    return g_pinned.count(data) > 0;
  }
  c10::Allocator* getPinnedMemoryAllocator() const override {
    return &g_pinned_allocator;
  }
  bool hasPrimaryContext(c10::DeviceIndex /*index*/) const override {
    return true;
  }
  c10::DeviceIndex deviceCount() const override {
    return device_count();
  }
  void setCurrentDevice(c10::DeviceIndex index) const override {
    check_device(index);
    t_current_device = index;
  }
  c10::DeviceIndex getCurrentDevice() const override {
    return t_current_device;
  }
  c10::DeviceIndex exchangeDevice(c10::DeviceIndex index) const override {
    auto old = t_current_device;
    setCurrentDevice(index);
    return old;
  }
  c10::DeviceIndex maybeExchangeDevice(c10::DeviceIndex index) const override {
    return exchangeDevice(index);
  }
  void resizePrivateUse1Bytes(const c10::Storage& storage, size_t newsize) const override {
    resize_storage_bytes(storage.unsafeGetStorageImpl(), newsize);
  }
};

// ---------------------------------------------------------------- device guard
// PJRT orders work on a device by data dependencies, so one default stream per device
// keeps CUDA's stream semantics; events complete immediately.
struct NeuronGuardImpl final : public c10::impl::DeviceGuardImplInterface {
  static constexpr c10::DeviceType static_type = c10::DeviceType::PrivateUse1;
  c10::DeviceType type() const override {
    return static_type;
  }
  c10::Device exchangeDevice(c10::Device d) const override {
    auto old = getDevice();
    if (d.index() != old.index()) setDevice(d);
    return old;
  }
  c10::Device getDevice() const override {
    return c10::Device(static_type, t_current_device);
  }
  void setDevice(c10::Device d) const override {
    TORCH_CHECK(d.type() == static_type, "expected a neuron device, got ", d);
    if (d.index() >= 0) {
      check_device(d.index());
      t_current_device = d.index();
    }
  }
  void uncheckedSetDevice(c10::Device d) const noexcept override {
    if (d.index() >= 0) t_current_device = d.index();
  }
  // Streams name a concrete device, as CUDA's do (`torch.Stream("neuron")` is on the
  // current device).
  static c10::Device concrete(c10::Device d) {
    return c10::Device(static_type, d.index() < 0 ? t_current_device : d.index());
  }
  c10::Stream getStream(c10::Device d) const override {
    return c10::Stream(c10::Stream::DEFAULT, concrete(d));
  }
  c10::Stream getNewStream(c10::Device d, int /*priority*/) const override {
    return c10::Stream(c10::Stream::DEFAULT, concrete(d));
  }
  c10::Stream exchangeStream(c10::Stream s) const override {
    return c10::Stream(c10::Stream::DEFAULT, concrete(s.device()));
  }
  c10::DeviceIndex deviceCount() const noexcept override {
    return device_count();
  }
  // An event is the host time at which all work queued before its record() was done,
  // which is what elapsed_time() measures on a device with one in-order queue.
  struct Event {
    std::chrono::steady_clock::time_point time;
  };
  void record(void** event, const c10::Stream& /*stream*/, const c10::DeviceIndex /*device_index*/,
              const c10::EventFlag /*flag*/) const override {
    synchronize_all();
    if (*event == nullptr) *event = new Event();
    static_cast<Event*>(*event)->time = std::chrono::steady_clock::now();
  }
  void block(void* /*event*/, const c10::Stream& /*stream*/) const override {}
  bool queryEvent(void* /*event*/) const override {
    return true;
  }
  void destroyEvent(void* event, const c10::DeviceIndex /*device_index*/) const noexcept override {
    delete static_cast<Event*>(event);
  }
  double elapsedTime(void* start, void* end, const c10::DeviceIndex /*device_index*/) const override {
    TORCH_CHECK(start && end, "Both events must be recorded before calculating elapsed time.");
    auto dt = static_cast<Event*>(end)->time - static_cast<Event*>(start)->time;
    return std::chrono::duration<double, std::milli>(dt).count();
  }
  bool queryStream(const c10::Stream& /*stream*/) const override {
    return true;
  }
  void synchronizeStream(const c10::Stream& /*stream*/) const override {
    synchronize_all();
  }
  void synchronizeEvent(void* /*event*/) const override {}
  void synchronizeDevice(const c10::DeviceIndex /*device_index*/) const override {
    synchronize_all();
  }
  void recordDataPtrOnStream(const c10::DataPtr& /*data_ptr*/, const c10::Stream& /*stream*/) const override {}
};

C10_REGISTER_GUARD_IMPL(PrivateUse1, NeuronGuardImpl);

// ---------------------------------------------------------------- metadata-only kernels
static at::Tensor empty_memory_format(c10::IntArrayRef size, std::optional<at::ScalarType> dtype,
                                      std::optional<at::Layout> layout, std::optional<at::Device> device,
                                      std::optional<bool> pin_memory,
                                      std::optional<at::MemoryFormat> memory_format) {
  TORCH_CHECK(!layout.has_value() || *layout == at::kStrided, "neuron supports only strided tensors, got ",
              *layout);
  TORCH_CHECK(!pin_memory.value_or(false), "Only dense CPU tensors can be pinned");
  c10::DeviceIndex index = device.has_value() && device->has_index() ? device->index() : t_current_device;
  check_device(index);
  c10::DeviceIndex saved = t_current_device;
  t_current_device = index;
  auto out = at::detail::empty_generic(size, &g_allocator, c10::DispatchKeySet(c10::DispatchKey::PrivateUse1),
                                       c10::dtype_or_default(dtype), memory_format);
  t_current_device = saved;
  return out;
}

static at::Tensor empty_strided(c10::IntArrayRef size, c10::IntArrayRef stride, std::optional<at::ScalarType> dtype,
                                std::optional<at::Layout> layout, std::optional<at::Device> device,
                                std::optional<bool> pin_memory) {
  TORCH_CHECK(!layout.has_value() || *layout == at::kStrided, "neuron supports only strided tensors, got ",
              *layout);
  TORCH_CHECK(!pin_memory.value_or(false), "Only dense CPU tensors can be pinned");
  c10::DeviceIndex index = device.has_value() && device->has_index() ? device->index() : t_current_device;
  check_device(index);
  c10::DeviceIndex saved = t_current_device;
  t_current_device = index;
  auto out = at::detail::empty_strided_generic(size, stride, &g_allocator,
                                               c10::DispatchKeySet(c10::DispatchKey::PrivateUse1),
                                               c10::dtype_or_default(dtype));
  t_current_device = saved;
  return out;
}

// Grows the storage (carrying its bytes) when the new geometry needs more of it.
static void ensure_storage_nbytes(const at::Tensor& self, int64_t needed) {
  c10::StorageImpl* storage = self.unsafeGetTensorImpl()->unsafe_storage().unsafeGetStorageImpl();
  if (needed > static_cast<int64_t>(storage->nbytes())) {
    resize_storage_bytes(storage, static_cast<size_t>(needed));
  }
}

static const at::Tensor& resize_(const at::Tensor& self, c10::IntArrayRef size,
                                 std::optional<at::MemoryFormat> memory_format) {
  TORCH_CHECK(memory_format != at::MemoryFormat::Preserve, "Unsupported memory format", at::MemoryFormat::Preserve);
  auto* impl = self.unsafeGetTensorImpl();
  int64_t offset = impl->storage_offset();
  // As ATen's resize_: the same size keeps the geometry (composite out= kernels resize
  // their out tensor to the size it already has and must not make it contiguous).
  if (impl->sizes() != size) {
    impl->set_sizes_contiguous(size);
  }
  if (memory_format.has_value()) {
    impl->empty_tensor_restride(*memory_format);
  }
  int64_t needed = (offset + static_cast<int64_t>(at::detail::computeStorageNbytes(
                                 impl->sizes(), impl->strides(), 1))) * static_cast<int64_t>(self.itemsize());
  if (self.numel() > 0) ensure_storage_nbytes(self, needed);
  return self;
}

static at::Tensor& set_storage(at::Tensor& self, c10::Storage source, int64_t offset, c10::IntArrayRef size,
                               c10::IntArrayRef stride) {
  at::native::checkSetStorage(self, source, offset, size, stride);
  auto* impl = self.unsafeGetTensorImpl();
  if (!impl->storage().is_alias_of(source)) {
    impl->set_storage_keep_dtype(std::move(source));
  }
  impl->set_storage_offset(offset);
  at::OptionalIntArrayRef stride_opt = stride.data() != nullptr ? at::OptionalIntArrayRef(stride) : std::nullopt;
  if (stride_opt.has_value()) {
    impl->set_sizes_and_strides(size, *stride_opt);
  } else {
    impl->set_sizes_contiguous(size);
  }
  if (self.numel() > 0) {
    int64_t needed = (offset + static_cast<int64_t>(at::detail::computeStorageNbytes(
                                   impl->sizes(), impl->strides(), 1))) * static_cast<int64_t>(self.itemsize());
    ensure_storage_nbytes(self, needed);
  }
  return self;
}

static at::Tensor& set_source_storage(at::Tensor& self, c10::Storage source) {
  int64_t numel = static_cast<int64_t>(source.nbytes() / self.dtype().itemsize());
  return set_storage(self, std::move(source), 0, {numel}, {});
}

static at::Tensor& set_source_tensor(at::Tensor& self, const at::Tensor& source) {
  if (self.unsafeGetTensorImpl() == source.unsafeGetTensorImpl()) return self;
  return set_storage(self, source.storage(), source.storage_offset(), source.sizes(), source.strides());
}

static at::Tensor& set_empty(at::Tensor& self) {
  c10::Storage storage(c10::Storage::use_byte_size_t(), 0, &g_allocator, /*resizable=*/true);
  return set_storage(self, std::move(storage), 0, {0}, {});
}

// CUDA semantics for `param.data = other` and Module.to(): a dense strided tensor may
// take another dense strided tensor's metadata across CPU <-> neuron. c10 lists only
// its built-in backends as dense, so without this `.data` assignment raises and
// Module.to() replaces Parameters (breaking tied weights) instead of swapping data.
static bool has_compatible_shallow_copy_type(const at::Tensor& self, const at::Tensor& from) {
  auto dense = [](const at::Tensor& t) {
    constexpr auto backends = c10::DispatchKeySet(
        {c10::BackendComponent::CPUBit, c10::BackendComponent::CUDABit, c10::BackendComponent::PrivateUse1Bit});
    auto ks = t.key_set();
    return t.layout() == at::kStrided && ks.has(c10::DispatchKey::Dense) && ks.has_any(backends);
  };
  if (dense(self) && dense(from)) return true;
  return self.unsafeGetTensorImpl()->has_compatible_shallow_copy_type(from.key_set());
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("_has_compatible_shallow_copy_type", has_compatible_shallow_copy_type);
  m.impl("empty.memory_format", empty_memory_format);
  m.impl("empty_strided", empty_strided);
  m.impl("as_strided", at::native::as_strided_tensorimpl);
  m.impl("view", at::native::view);
  m.impl("_reshape_alias", at::native::_reshape_alias);
  m.impl("unfold", at::native::unfold);
  m.impl("view_as_real", at::native::view_as_real);
  m.impl("view_as_complex", at::native::view_as_complex);
  m.impl("resize_", resize_);
  m.impl("set_.source_Storage_storage_offset", set_storage);
  m.impl("set_.source_Storage", set_source_storage);
  m.impl("set_.source_Tensor", set_source_tensor);
  m.impl("set_", set_empty);
}

// ---------------------------------------------------------------- attention backend
// F.scaled_dot_product_attention asks this stub which kernel to use on PrivateUse1
// (without one it always decomposes into the math path). `overrideable` is
// _scaled_dot_product_fused_attention_overrideable, lowered in ops/nn.py by the blocked
// kernel, which reads grouped-query heads in place (query head h uses key head
// h / (Hq / Hk), as enable_gqa defines it; Hk == 1 is the same as broadcasting).
static int64_t fused_sdp_choice(const at::Tensor& query, const at::Tensor& key, const at::Tensor& value,
                                const std::optional<at::Tensor>& attn_mask, double dropout_p, bool is_causal,
                                std::optional<double> scale, bool enable_gqa) {
  // Other shapes (a query batch broadcast against keys, head counts that only fail)
  // take the math path, which computes or rejects them as CPU does.
  // So do dtypes the kernel does not take (integers, complex): the math path raises
  // CPU's errors for them.
  bool rank_ok = query.dim() == 3 || query.dim() == 4;
  if (!rank_ok || !at::isFloatingType(query.scalar_type())) return static_cast<int64_t>(at::SDPBackend::math);
  bool batch_ok = key.size(0) == value.size(0) && (key.size(0) == query.size(0) || key.size(0) == 1);
  int64_t hq = query.size(-3), hk = key.size(-3);
  bool heads_ok = query.dim() == 3 ||
                  (hk == value.size(-3) && (hq == hk || hk == 1 || (enable_gqa && hk > 0 && hq % hk == 0)));
  return static_cast<int64_t>(batch_ok && heads_ok ? at::SDPBackend::overrideable : at::SDPBackend::math);
}
}  // namespace torchneuron

namespace at::native {
REGISTER_PRIVATEUSE1_DISPATCH(_fused_sdp_choice_stub, &torchneuron::fused_sdp_choice)
}  // namespace at::native

namespace torchneuron {

// ---------------------------------------------------------------- Python bindings
static void set_callbacks(py::object registry, py::object resize_cb, py::object copy_cb, py::object count_cb,
                          py::object sync_cb) {
  g_registry = registry.release().ptr();
  g_resize_cb = resize_cb.release().ptr();
  g_copy_cb = copy_cb.release().ptr();
  g_count_cb = count_cb.release().ptr();
  g_sync_cb = sync_cb.release().ptr();
  g_python_alive.store(true);
}

// (storage handle, sizes, strides, storage offset, dtype, device index) of a tensor,
// in one call because it runs for every tensor argument of every op.
// None for a tensor that is not on `neuron`.
static py::object tensor_meta(const at::Tensor& t) {
  if (!t.is_privateuseone()) return py::none();
  auto* impl = t.unsafeGetTensorImpl();
  const auto& storage = impl->unsafe_storage();
  py::tuple sizes(t.dim());
  py::tuple strides(t.dim());
  for (int64_t i = 0; i < t.dim(); ++i) {
    sizes[i] = py::int_(t.size(i));
    strides[i] = py::int_(t.stride(i));
  }
  return py::make_tuple(reinterpret_cast<uint64_t>(storage.data()), sizes, strides, impl->storage_offset(),
                        py::reinterpret_borrow<py::object>(reinterpret_cast<PyObject*>(torch::getTHPDtype(t.scalar_type()))),
                        static_cast<int>(t.device().index()),
                        storage.nbytes());
}

// A new `neuron` tensor whose storage's bytes are `buffer` (a flat jax.Array), registered
// in the storage registry: the eager executor's output path, one call instead of
// torch.empty_strided plus a registry insertion. sizes and strides: tuples of ints.
at::Tensor new_output(PyObject* sizes, PyObject* strides, PyObject* dtype, int device, PyObject* buffer) {
  auto ints = [](PyObject* seq) {
    py::object fast = py::reinterpret_steal<py::object>(PySequence_Fast(seq, "expected a sequence of ints"));
    if (!fast) throw py::error_already_set();
    Py_ssize_t m = PySequence_Fast_GET_SIZE(fast.ptr());
    c10::SmallVector<int64_t, 6> out(m);
    for (Py_ssize_t i = 0; i < m; ++i) {
      out[i] = PyLong_AsLongLong(PySequence_Fast_GET_ITEM(fast.ptr(), i));
    }
    if (PyErr_Occurred()) throw py::error_already_set();
    return out;
  };
  auto size_v = ints(sizes);
  auto stride_v = ints(strides);
  auto scalar_type = reinterpret_cast<THPDtype*>(dtype)->scalar_type;
  c10::DeviceIndex saved = t_current_device;
  t_current_device = static_cast<c10::DeviceIndex>(device);
  at::Tensor out = at::detail::empty_strided_generic(size_v, stride_v, &g_allocator,
                                                     c10::DispatchKeySet(c10::DispatchKey::PrivateUse1),
                                                     scalar_type);
  t_current_device = saved;
  py::int_ handle(reinterpret_cast<uint64_t>(out.unsafeGetTensorImpl()->unsafe_storage().data()));
  if (PyDict_SetItem(g_registry, handle.ptr(), buffer) < 0) throw py::error_already_set();
  return out;
}

// A hashable key part for a static argument: lists become tuples, and numbers carry
// their type (1 == 1.0 == True, yet they give different dtypes).
static py::object freeze(PyObject* v) {
  if (PyList_Check(v)) {
    Py_ssize_t m = PyList_GET_SIZE(v);
    py::tuple out(m);
    for (Py_ssize_t j = 0; j < m; ++j) out[j] = freeze(PyList_GET_ITEM(v, j));
    return out;
  }
  if (PyBool_Check(v) || PyLong_CheckExact(v) || PyFloat_CheckExact(v)) {
    return py::make_tuple(py::reinterpret_borrow<py::object>(reinterpret_cast<PyObject*>(Py_TYPE(v))),
                          py::reinterpret_borrow<py::object>(v));
  }
  return py::reinterpret_borrow<py::object>(v);
}

// The cache key of one eager call, computed in C++ because it runs for every op (see
// torchneuron/eager/executor.py, OpKernel._signature, for the meaning of each part).
// kinds: 0 tensor, 1 tensor list, 2 dynamic scalar, 3 dynamic scalar list, 4 generator,
// 5 static. Returns None for calls the Python path must handle: a tensor that is not on
// `neuron` (CPU scalars, device errors), tensors on several devices, a tensor given for a
// scalar. Returns (key, tensors, metas, dynamic values, device index or -1).
py::object fast_signature(PyObject* const* values, Py_ssize_t n, const py::tuple& kinds,
                          const py::tuple& defaults, const py::dict& buffers, const py::dict& to_jax) {
  py::list key, tensors, metas, dyn;
  py::object offsets;  // a list, made for the first nonzero storage offset
  // Distinct storages in order of first use: a tensor's slot is its storage's index here.
  c10::SmallVector<const void*, 8> slots;
  static PyObject* dtype_name = PyUnicode_InternFromString("dtype");
  int device = -1;
  PyObject* tensor_type = reinterpret_cast<PyObject*>(THPVariableClass);
  auto add_tensor = [&](PyObject* obj) -> bool {
    const at::Tensor& t = THPVariable_Unpack(obj);
    if (!t.is_privateuseone()) return false;
    int index = static_cast<int>(t.device().index());
    if (device < 0) {
      device = index;
    } else if (device != index) {
      return false;
    }
    auto* impl = t.unsafeGetTensorImpl();
    const auto& storage = impl->unsafe_storage();
    py::int_ handle(reinterpret_cast<uint64_t>(storage.data()));
    py::tuple sizes(t.dim()), strides(t.dim());
    for (int64_t i = 0; i < t.dim(); ++i) {
      sizes[i] = py::int_(t.size(i));
      strides[i] = py::int_(t.stride(i));
    }
    int64_t offset = impl->storage_offset();
    py::object dtype = py::reinterpret_borrow<py::object>(reinterpret_cast<PyObject*>(torch::getTHPDtype(t.scalar_type())));
    py::int_ nbytes(storage.nbytes());
    const void* data = storage.data();
    size_t slot = std::find(slots.begin(), slots.end(), data) - slots.begin();
    if (slot == slots.size()) slots.push_back(data);
    PyObject* buf = PyDict_GetItem(buffers.ptr(), handle.ptr());
    py::object buf_dtype;
    if (buf) {
      buf_dtype = py::reinterpret_steal<py::object>(PyObject_GetAttr(buf, dtype_name));
      if (!buf_dtype) throw py::error_already_set();
    } else {
      PyObject* jax_dtype = PyDict_GetItem(to_jax.ptr(), dtype.ptr());
      if (!jax_dtype) return false;  // a dtype `neuron` cannot hold: the Python path raises
      buf_dtype = py::reinterpret_borrow<py::object>(jax_dtype);
    }
    if (offset) {
      if (!offsets) offsets = py::list();
      offsets.cast<py::list>().append(py::int_(offset));
    }
    key.append(py::int_(slot));
    key.append(sizes);
    key.append(strides);
    key.append(py::bool_(offset == 0));
    key.append(dtype);
    key.append(py::int_(index));
    key.append(nbytes);
    key.append(buf_dtype);
    tensors.append(py::reinterpret_borrow<py::object>(obj));
    metas.append(py::make_tuple(handle, sizes, strides, offset, dtype, index, nbytes));
    return true;
  };
  for (Py_ssize_t i = 0; i < n; ++i) {
    PyObject* v = values[i];
    long kind = PyLong_AsLong(PyTuple_GET_ITEM(kinds.ptr(), i));
    if (kind == 0) {
      if (v == Py_None) {
        key.append(py::none());
      } else if (PyObject_TypeCheck(v, reinterpret_cast<PyTypeObject*>(tensor_type))) {
        if (!add_tensor(v)) return py::none();
      } else {  // a wrapped Python number
        key.append(py::reinterpret_borrow<py::object>(reinterpret_cast<PyObject*>(Py_TYPE(v))));
        dyn.append(py::reinterpret_borrow<py::object>(v));
      }
    } else if (kind == 1) {
      py::object seq = py::reinterpret_steal<py::object>(PySequence_Fast(v, "expected a list of tensors"));
      if (!seq) throw py::error_already_set();
      Py_ssize_t m = PySequence_Fast_GET_SIZE(seq.ptr());
      key.append(py::int_(m));
      for (Py_ssize_t j = 0; j < m; ++j) {
        PyObject* item = PySequence_Fast_GET_ITEM(seq.ptr(), j);
        if (item == Py_None) {
          key.append(py::none());
        } else if (!PyObject_TypeCheck(item, reinterpret_cast<PyTypeObject*>(tensor_type)) || !add_tensor(item)) {
          return py::none();
        }
      }
    } else if (kind == 2) {
      PyObject* d = PyTuple_GET_ITEM(defaults.ptr(), i);
      if (v == Py_None) {
        key.append(py::none());
      } else if (PyObject_TypeCheck(v, reinterpret_cast<PyTypeObject*>(tensor_type))) {
        return py::none();
      } else if (d != Py_None && Py_TYPE(v) == Py_TYPE(d) && PyObject_RichCompareBool(v, d, Py_EQ) == 1) {
        key.append(py::str("v"));
        key.append(py::reinterpret_borrow<py::object>(v));
      } else {
        key.append(py::reinterpret_borrow<py::object>(reinterpret_cast<PyObject*>(Py_TYPE(v))));
        dyn.append(py::reinterpret_borrow<py::object>(v));
      }
    } else if (kind == 3) {
      py::object seq = py::reinterpret_steal<py::object>(PySequence_Fast(v, "expected a list of scalars"));
      if (!seq) throw py::error_already_set();
      Py_ssize_t m = PySequence_Fast_GET_SIZE(seq.ptr());
      key.append(py::int_(m));
      for (Py_ssize_t j = 0; j < m; ++j) {
        PyObject* item = PySequence_Fast_GET_ITEM(seq.ptr(), j);
        key.append(py::reinterpret_borrow<py::object>(reinterpret_cast<PyObject*>(Py_TYPE(item))));
        dyn.append(py::reinterpret_borrow<py::object>(item));
      }
    } else if (kind == 4) {
      key.append(py::str("g"));
    } else {
      key.append(freeze(v));
    }
  }
  if (offsets) {
    dyn.append(offsets);
  }
  return py::make_tuple(py::tuple(key), tensors, metas, dyn, device);
}

// The statistics of torch.cuda.memory_stats() that apply to `neuron`, with its keys.
static py::dict device_stats(int index) {
  const DeviceStats& s = stats_of(static_cast<c10::DeviceIndex>(index));
  py::dict d;
  auto put = [&d](const char* name, const Counter& c) {
    std::string prefix = std::string(name) + ".all.";
    d[py::str(prefix + "current")] = c.current.load();
    d[py::str(prefix + "peak")] = c.peak.load();
    d[py::str(prefix + "allocated")] = c.allocated.load();
    d[py::str(prefix + "freed")] = c.freed.load();
  };
  for (const char* name : {"allocation", "segment", "active"}) put(name, s.blocks);
  for (const char* name : {"allocated_bytes", "reserved_bytes", "active_bytes", "requested_bytes"}) put(name, s.bytes);
  d["num_alloc_retries"] = 0;
  d["num_ooms"] = s.ooms.load();
  return d;
}

static void python_shutdown() {
  g_python_alive.store(false);
}

static bool g_hooks_registered = false;

static void register_hooks() {
  if (g_hooks_registered) return;
  at::RegisterPrivateUse1HooksInterface(new NeuronHooks());
  // Storages made without a tensor (torch.UntypedStorage(n, device="neuron"), which
  // torch.load uses for map_location) look the allocator up by device type.
  c10::SetAllocator(c10::DeviceType::PrivateUse1, &g_allocator);
  // As for CUDA: a forked child must run torch.neuron._lazy_init() again before it
  // makes neuron tensors, so that it raises instead of using the parent's PJRT client
  // (whose threads do not exist in the child).
  pthread_atfork(nullptr, nullptr, [] { torch::utils::set_requires_device_init(c10::DeviceType::PrivateUse1, true); });
  g_hooks_registered = true;
}

// Calls `fn` with ATen's warnings dropped. c10 hands a warning to the calling thread's
// handler, which during a user's torch.* call is that call's: it turns the warnings into
// Python warnings once the call returns, out of reach of any Python filter set around
// `fn`. The out= dtype probes (eager/out_dtypes.py) run CPU kernels the user never called.
struct DropWarnings : c10::WarningHandler {
  void process(const c10::Warning&) override {}
};

static py::object without_warnings(const py::function& fn) {
  DropWarnings drop;
  c10::WarningUtils::WarningHandlerGuard guard(&drop);
  return fn();
}

// csrc/profiler.cpp: the Kineto activity profiler that attaches device time.
void register_profiler(py::module& m);
// csrc/eager.cpp: the eager hot path.
void register_eager_bindings(py::module& m);

}  // namespace torchneuron

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  using namespace torchneuron;
  register_profiler(m);
  register_eager_bindings(m);
  m.def("register_hooks", &register_hooks);
  m.def("set_callbacks", &set_callbacks);
  m.def("tensor_meta", &tensor_meta);
  m.def("fast_signature", [](const py::list& values, const py::tuple& kinds, const py::tuple& defaults,
                             const py::dict& buffers, const py::dict& to_jax) {
    return fast_signature(PySequence_Fast_ITEMS(values.ptr()), PyList_GET_SIZE(values.ptr()), kinds, defaults, buffers,
                          to_jax);
  });
  m.def("new_output", [](const py::object& sizes, const py::object& strides, const py::object& dtype, int device,
                         const py::object& buffer) {
    return new_output(sizes.ptr(), strides.ptr(), dtype.ptr(), device, buffer.ptr());
  });
  m.def("device_stats", &device_stats);
  m.def("reset_peak", [](int index) { g_allocator.resetPeakStats(static_cast<c10::DeviceIndex>(index)); });
  m.def("reset_accumulated", [](int index) { g_allocator.resetAccumulatedStats(static_cast<c10::DeviceIndex>(index)); });
  m.def("python_shutdown", &python_shutdown);
  m.def("set_capacity", [](int index, uint64_t bytes) {
    stats_of(static_cast<c10::DeviceIndex>(index)).capacity.store(bytes);
  });
  m.def("count_oom", [](int index) { stats_of(static_cast<c10::DeviceIndex>(index)).ooms.fetch_add(1); });
  m.def("set_device_count", [](int n) { g_device_count.store(n); });
  m.def("current_device", []() { return static_cast<int>(t_current_device); });
  m.def("set_device", [](int index) {
    check_device(static_cast<c10::DeviceIndex>(index));
    t_current_device = static_cast<c10::DeviceIndex>(index);
  });
  m.def("without_warnings", &without_warnings);
  m.def("default_generator", [](int index) {
    return py::reinterpret_steal<py::object>(
        THPGenerator_initDefaultGenerator(default_generator(static_cast<c10::DeviceIndex>(index))));
  });
}

// ================================================================ autocast
// torch.autocast("neuron") follows CUDA's op policy: the same op lists (ATen's
// AT_FORALL_* macros, which autocast_mode.cpp uses for AutocastCUDA) registered on
// AutocastPrivateUse1. Ops on no list fall through to the next dispatch key, as on CUDA.
// The default autocast dtype is bfloat16 (what Neuron hardware runs natively; fp16
// needs a GradScaler): set below for the thread that loads the shim, which is where
// `import torch` ran. PyTorch keeps this default per thread, so a thread started by the
// user sees PyTorch's default (float16) unless it passes `dtype=`; autograd's threads
// inherit the caller's.
#include <ATen/autocast_mode.h>

namespace torchneuron {

// CUDA refuses binary_cross_entropy under autocast (the log of a 16-bit probability
// near 0 or 1 is imprecise or infinite); so does `neuron`, pointing at the fused op.
static at::Tensor binary_cross_entropy_banned(const at::Tensor&, const at::Tensor&, const std::optional<at::Tensor>&,
                                              int64_t) {
  TORCH_CHECK(false,
              "torch.nn.functional.binary_cross_entropy and torch.nn.BCELoss are unsafe to autocast: a sigmoid "
              "before them loses precision in lower-precision types. Use "
              "torch.nn.functional.binary_cross_entropy_with_logits or torch.nn.BCEWithLogitsLoss, which are safe "
              "to autocast, or run the loss outside the autocast region on float32 inputs.");
}

static const bool g_autocast_bf16_default = [] {
  at::autocast::set_autocast_dtype(at::kPrivateUse1, at::kBFloat16);
  return true;
}();

}  // namespace torchneuron

// Ops without a policy run unchanged in whatever dtypes they get.
TORCH_LIBRARY_IMPL(_, AutocastPrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFallthrough());
}

TORCH_LIBRARY_IMPL(aten, AutocastPrivateUse1, m) {
  // The signature lists name ATen types unqualified.
  using namespace at;
#define TORCHNEURON_AUTOCAST_LOWER(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, lower_precision_fp)
  AT_FORALL_LOWER_PRECISION_FP(TORCHNEURON_AUTOCAST_LOWER)
#undef TORCHNEURON_AUTOCAST_LOWER
#define TORCHNEURON_AUTOCAST_FP32(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, fp32)
  AT_FORALL_FP32(TORCHNEURON_AUTOCAST_FP32)
#undef TORCHNEURON_AUTOCAST_FP32
#define TORCHNEURON_AUTOCAST_FP32_OPT_DTYPE(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, fp32_set_opt_dtype)
  AT_FORALL_FP32_SET_OPT_DTYPE(TORCHNEURON_AUTOCAST_FP32_OPT_DTYPE)
#undef TORCHNEURON_AUTOCAST_FP32_OPT_DTYPE
  AT_FORALL_DIFFERENT_REDISPATCH_SIGNATURE(KERNEL_DIFFERENT_REDISPATCH_SIGNATURE_PRIVATEUSEONE)
#define TORCHNEURON_AUTOCAST_PROMOTE(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, promote)
  AT_FORALL_PROMOTE(TORCHNEURON_AUTOCAST_PROMOTE)
#undef TORCHNEURON_AUTOCAST_PROMOTE
  // PyTorch documents cross_entropy among CUDA's float32 ops, but its composite kernel
  // passes the input's own dtype to log_softmax, so only nll_loss would see float32 and
  // log_softmax's output would be rounded to 16 bits. Casting at the entry, as CPU's
  // autocast does, gives what the documentation promises.
  KERNEL_PRIVATEUSEONE(cross_entropy_loss, fp32)
  m.impl(TORCH_SELECTIVE_NAME("aten::binary_cross_entropy"), TORCH_FN(torchneuron::binary_cross_entropy_banned));
}
