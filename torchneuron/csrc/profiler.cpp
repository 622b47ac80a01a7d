// Device time in torch.profiler: a Kineto activity profiler for PrivateUse1.
//
// PyTorch forwards a PrivateUse1 IActivityProfiler registered here to Kineto
// (torch/csrc/profiler/standalone/privateuse1_profiler.h). When a profile requests
// ProfilerActivity.PrivateUse1 (the default when `neuron` is available), Kineto opens a
// session of ours next to its CPU tracing:
// - start()/stop() start and stop the PJRT/XLA profiler through Python callbacks
//   (torchneuron.profiler); stop() receives the measured device executions;
// - Kineto pushes the correlation id of every profiled op on the thread that runs it;
//   `mark(module)`, called by the executor just before it dispatches an executable,
//   pairs the innermost op with that executable;
// - processTrace() logs each device kernel as a CONCURRENT_KERNEL activity linked to
//   the op that dispatched it, so key_averages() shows "Self NEURON"/"NEURON total" and
//   the chrome trace has a device row.
// Executions of one executable are paired with its dispatches in order.
#include <torch/extension.h>

#include <libkineto.h>
#include <IActivityProfiler.h>
#include <output_base.h>
#include <torch/csrc/profiler/standalone/privateuse1_profiler.h>

#include <atomic>
#include <deque>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

namespace torchneuron {
namespace {

using libkineto::ActivityType;

struct Kernel {
  std::string name;
  int64_t start_ns;
  int64_t end_ns;
};

// One measured execution of one executable (an HLO module) on one device.
struct Execution {
  std::string module;
  int64_t device;
  std::vector<Kernel> kernels;
};

PyObject* g_start_cb = nullptr;  // () -> None: starts the PJRT/XLA profiler
PyObject* g_stop_cb = nullptr;   // () -> [(module, device, [(kernel, start_ns, end_ns)])]

thread_local std::vector<uint64_t> t_correlation;  // Kineto's op stack on this thread

class Session;
std::atomic<Session*> g_session{nullptr};

class Session : public libkineto::IActivityProfilerSession {
 public:
  void start() override {
    t_correlation.clear();
    call_start();
    g_session.store(this);
    status_ = libkineto::TraceStatus::RECORDING;
  }

  void stop() override {
    g_session.store(nullptr);
    executions_ = call_stop();
    status_ = libkineto::TraceStatus::PROCESSING;
  }

  void mark(const std::string& module) {
    uint64_t op = t_correlation.empty() ? 0 : t_correlation.back();
    std::lock_guard<std::mutex> lock(mutex_);
    dispatches_[module].push_back(op);
  }

  std::vector<std::string> errors() override { return errors_; }

  void processTrace(libkineto::ActivityLogger& logger) override {
    processTrace(logger, [](int32_t) -> const libkineto::ITraceActivity* { return nullptr; }, 0, 0);
  }

  void processTrace(libkineto::ActivityLogger& logger, libkineto::getLinkedActivityCallback linked, int64_t,
                    int64_t) override {
    std::lock_guard<std::mutex> lock(mutex_);
    static const libkineto::TraceSpan span(0, 0, "neuron", "");
    int32_t id = 0;
    for (const auto& run : executions_) {
      auto& queue = dispatches_[run.module];
      uint64_t op = 0;
      if (!queue.empty()) {
        op = queue.front();
        queue.pop_front();
      }
      for (const auto& k : run.kernels) {
        libkineto::GenericTraceActivity activity(span, ActivityType::CONCURRENT_KERNEL, k.name);
        activity.startTime = k.start_ns;
        activity.endTime = k.end_ns;
        activity.id = ++id;
        activity.device = static_cast<int32_t>(run.device);
        activity.resource = 0;
        activity.linked = op ? linked(static_cast<int32_t>(op)) : nullptr;
        activity.addMetadataQuoted("hlo_module", run.module);
        logger.handleGenericActivity(activity);
      }
    }
    status_ = libkineto::TraceStatus::READY;
  }

  std::unique_ptr<libkineto::DeviceInfo> getDeviceInfo() override {
    return std::make_unique<libkineto::DeviceInfo>(libkineto::DeviceInfo{0, 0, "neuron", "neuron:0"});
  }

  std::vector<libkineto::ResourceInfo> getResourceInfos() override {
    return {libkineto::ResourceInfo{0, 0, 0, "executions"}};
  }

  std::unique_ptr<libkineto::CpuTraceBuffer> getTraceBuffer() override { return nullptr; }

  void pushCorrelationId(uint64_t id) override { t_correlation.push_back(id); }

  void popCorrelationId() override {
    if (!t_correlation.empty()) t_correlation.pop_back();
  }

 private:
  void call_start() {
    if (!g_start_cb || !Py_IsInitialized()) return;
    py::gil_scoped_acquire gil;
    try {
      py::reinterpret_borrow<py::object>(g_start_cb)();
    } catch (const py::error_already_set& e) {
      errors_.push_back(e.what());
    }
  }

  std::vector<Execution> call_stop() {
    std::vector<Execution> out;
    if (!g_stop_cb || !Py_IsInitialized()) return out;
    py::gil_scoped_acquire gil;
    try {
      for (auto run : py::reinterpret_borrow<py::object>(g_stop_cb)()) {
        auto t = run.cast<py::tuple>();
        Execution e{t[0].cast<std::string>(), t[1].cast<int64_t>(), {}};
        for (auto k : t[2]) {
          auto kt = k.cast<py::tuple>();
          e.kernels.push_back(Kernel{kt[0].cast<std::string>(), kt[1].cast<int64_t>(), kt[2].cast<int64_t>()});
        }
        out.push_back(std::move(e));
      }
    } catch (const py::error_already_set& e) {
      errors_.push_back(e.what());
    }
    return out;
  }

  std::mutex mutex_;
  std::unordered_map<std::string, std::deque<uint64_t>> dispatches_;
  std::vector<Execution> executions_;
  std::vector<std::string> errors_;
};

class ActivityProfiler : public libkineto::IActivityProfiler {
 public:
  const std::string& name() const override { return name_; }

  const std::set<ActivityType>& availableActivities() const override { return activities_; }

  std::unique_ptr<libkineto::IActivityProfilerSession> configure(const std::set<ActivityType>& requested,
                                                                 const libkineto::Config&) override {
    for (auto type : requested) {
      if (activities_.count(type)) return std::make_unique<Session>();
    }
    return nullptr;
  }

  std::unique_ptr<libkineto::IActivityProfilerSession> configure(int64_t, int64_t,
                                                                 const std::set<ActivityType>& requested,
                                                                 const libkineto::Config& config) override {
    return configure(requested, config);
  }

 private:
  std::string name_{"neuron"};
  // Device kernels only: a CPU-only profile also asks for the PRIVATEUSE1 host types.
  std::set<ActivityType> activities_{ActivityType::CONCURRENT_KERNEL};
};

}  // namespace

void register_profiler(py::module& m) {
  torch::profiler::impl::PrivateUse1ProfilerRegistry::instance().registerFactory(
      [] { return std::unique_ptr<libkineto::IActivityProfiler>(new ActivityProfiler()); });
  m.def("set_profiler_callbacks", [](py::object start, py::object stop) {
    g_start_cb = start.release().ptr();
    g_stop_cb = stop.release().ptr();
  });
  m.def("profiler_mark", [](const std::string& module) {
    if (Session* s = g_session.load()) s->mark(module);
  });
}

}  // namespace torchneuron
