// The hora._core extension: the one Runtime of this process, ops, Work
// handles and the error types. No logic beyond argument conversion.
#include <nanobind/nanobind.h>
#include <nanobind/stl/map.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "hora/errors.h"
#include "hora/runtime.h"
#include "store.h"
#include "tensors.h"
#include "transport/registry.h"

namespace nb = nanobind;
using namespace nb::literals;

namespace hora::bindings {
namespace {

std::mutex runtime_mutex;
std::unique_ptr<Runtime> runtime;  // the one Runtime of this process
int runtimes_started = 0;          // init() calls that tried to start one

Runtime& current() {
  std::lock_guard<std::mutex> lock(runtime_mutex);
  if (!runtime) throw InvalidArgument("hora has not been initialized; call hvd.init() first");
  return *runtime;
}

nb::tuple set_tuple(const ProcessSet& set) { return nb::make_tuple(set.id, set.ranks, set.rank); }

nb::dict metrics_dict(const SetMetrics& m) {
  nb::dict out;
  out["ops"] = m.ops;
  out["bytes"] = m.bytes;
  out["negotiation_seconds"] = m.negotiation_seconds;
  out["transport_seconds"] = m.transport_seconds;
  out["wait_for_slowest_seconds"] = m.wait_for_slowest_seconds;
  out["slowest_member"] = m.slowest_member;
  out["cache_lookups"] = m.cache_lookups;
  out["cache_hits"] = m.cache_hits;
  out["fast_path_hits"] = m.fast_path_hits;
  out["responses"] = m.responses;
  out["tensors"] = m.tensors;
  out["errors"] = m.errors;
  out["stalls"] = m.stalls;
  out["broken"] = m.broken;
  return out;
}

// What init() learned in Python (hora.common.config.Config.core_settings():
// an elastic worker's round, a torchrun job's rendezvous) over what the
// environment says.
void apply_settings(RuntimeConfig& config, const nb::dict& settings) {
  static const std::map<std::string, int RuntimeConfig::*> numbers = {
      {"rank", &RuntimeConfig::rank},
      {"size", &RuntimeConfig::size},
      {"local_rank", &RuntimeConfig::local_rank},
      {"local_size", &RuntimeConfig::local_size},
      {"cross_rank", &RuntimeConfig::cross_rank},
      {"cross_size", &RuntimeConfig::cross_size},
      {"rendezvous_port", &RuntimeConfig::rendezvous_port},
      {"elastic_round", &RuntimeConfig::elastic_round}};
  static const std::map<std::string, std::string RuntimeConfig::*> texts = {
      {"hostname", &RuntimeConfig::hostname},
      {"rendezvous_addr", &RuntimeConfig::rendezvous_host},
      {"secret", &RuntimeConfig::secret}};
  for (auto [key, value] : settings) {
    const std::string name = nb::cast<std::string>(key);
    if (auto number = numbers.find(name); number != numbers.end()) {
      config.*(number->second) = nb::cast<int>(value);
    } else if (auto text = texts.find(name); text != texts.end()) {
      config.*(text->second) = nb::cast<std::string>(value);
    } else {
      throw InvalidArgument("init: the core takes no setting named " + name);
    }
  }
  // horarun's (or torchrun's) rendezvous, not MPI's bootstrap.
  if (settings.contains("rendezvous_addr")) config.mpi_launched = false;
}

// `mpi_communicator` (a Fortran handle) or `mpi_world_ranks`: init(comm=...).
void init(const std::vector<std::vector<int>>& process_sets, std::optional<int64_t> mpi_communicator,
          const std::vector<int>& mpi_world_ranks, const nb::dict& settings) {
  std::lock_guard<std::mutex> lock(runtime_mutex);
  if (runtime) return;
  RuntimeConfig config = runtime_config_from_env();
  apply_settings(config, settings);
  config.mpi_communicator = mpi_communicator;
  config.mpi_world_ranks = mpi_world_ranks;
  // An elastic round is every worker's common epoch; otherwise each init of
  // this process is the next one (every rank must init alike).
  config.epoch = config.elastic_round >= 0 ? config.elastic_round + 1 : runtimes_started;
  ++runtimes_started;
  nb::gil_scoped_release release;
  runtime = std::make_unique<Runtime>(config, process_sets);
}

void shutdown(bool goodbye) {
  std::unique_ptr<Runtime> done;
  {
    std::lock_guard<std::mutex> lock(runtime_mutex);
    done.swap(runtime);
  }
  nb::gil_scoped_release release;
  if (done) done->shutdown(goodbye);
  done.reset();
}

// `input` and `output` (None: the core allocates it) are arrays; an output
// that is the input object (the in-place forms) is not converted twice.
std::shared_ptr<Work> enqueue(int32_t set_id, OpType op, const std::string& name, nb::handle input,
                              nb::handle output, ReduceOp reduce_op, int root, double prescale, double postscale,
                              const std::vector<int64_t>& splits, bool caller_waits) {
  OpArgs args;
  args.op = op;
  args.name = name;
  const Array input_array = as_array(input, "input");
  args.input = to_view(input_array, "input");
  std::optional<Array> output_array;
  if (output.is(input)) {
    args.output = args.input;
  } else if (!output.is_none()) {
    output_array = as_array(output, "output");
    args.output = to_view(*output_array, "output");
  }
  args.reduce_op = reduce_op;
  args.root = root;
  args.prescale = prescale;
  args.postscale = postscale;
  args.splits = splits;
  args.caller_waits = caller_waits;
  std::shared_ptr<Work> work = current().enqueue(set_id, std::move(args));
  if (caller_waits) {
    // The op runs here, without a hand-off; its error comes from the
    // caller's own wait on the handle.
    nb::gil_scoped_release release;
    try {
      work->wait();
    } catch (const std::exception&) {
    }
  }
  return work;
}

// The wire enums as Python enums. Arithmetic (IntEnum-like): a plain int of
// a valid value converts implicitly where a member is expected.
void register_enums(nb::module_& m) {
  static_assert(kNumDataTypes == 11 && kNumReduceOps == 6 && kNumOpTypes == 7,
                "register every value of the wire enums below");
  nb::enum_<DataType>(m, "DataType", nb::is_arithmetic())
      .value("UINT8", DataType::kUInt8)
      .value("INT8", DataType::kInt8)
      .value("UINT16", DataType::kUInt16)
      .value("INT16", DataType::kInt16)
      .value("INT32", DataType::kInt32)
      .value("INT64", DataType::kInt64)
      .value("FLOAT16", DataType::kFloat16)
      .value("BFLOAT16", DataType::kBFloat16)
      .value("FLOAT32", DataType::kFloat32)
      .value("FLOAT64", DataType::kFloat64)
      .value("BOOL", DataType::kBool);
  nb::enum_<ReduceOp>(m, "ReduceOp", nb::is_arithmetic())
      .value("SUM", ReduceOp::kSum)
      .value("AVERAGE", ReduceOp::kAverage)
      .value("MIN", ReduceOp::kMin)
      .value("MAX", ReduceOp::kMax)
      .value("PRODUCT", ReduceOp::kProduct)
      .value("ADASUM", ReduceOp::kAdasum);
  nb::enum_<OpType>(m, "OpType", nb::is_arithmetic())
      .value("ALLREDUCE", OpType::kAllreduce)
      .value("ALLGATHER", OpType::kAllgather)
      .value("BROADCAST", OpType::kBroadcast)
      .value("ALLTOALL", OpType::kAlltoall)
      .value("REDUCESCATTER", OpType::kReducescatter)
      .value("BARRIER", OpType::kBarrier)
      .value("JOIN", OpType::kJoin);
}

void register_errors(nb::module_& m) {
  nb::exception<Error> base(m, "HoraError", PyExc_RuntimeError);
  nb::exception<Mismatch>(m, "MismatchError", base);
  nb::exception<Timeout>(m, "TimeoutError", base);
  nb::exception<PeerFailure>(m, "PeerFailureError", base);
  nb::exception<Internal>(m, "InternalError", base);
  nb::register_exception_translator([](const std::exception_ptr& p, void*) {
    try {
      std::rethrow_exception(p);
    } catch (const InvalidArgument& e) {
      PyErr_SetString(PyExc_ValueError, e.what());
    }
  });
}

}  // namespace

NB_MODULE(_core, m) {
  register_enums(m);
  register_errors(m);
  register_store(m);

  nb::class_<Work>(m, "Work")
      .def("ready", &Work::ready)
      .def("finished", &Work::finished)
      .def("wait",
           [](const Work& work) {
             if (work.finished()) return work.wait();  // no wait: keep the GIL
             nb::gil_scoped_release release;
             work.wait();
           })
      .def("received_splits", &Work::received_splits);
  m.def("output", [](const std::shared_ptr<Work>& work, DataType dtype) { return output_array(work, dtype); },
        "work"_a, "dtype"_a);

  m.def("init", &init, "process_sets"_a, "mpi_communicator"_a.none() = nb::none(),
        "mpi_world_ranks"_a = std::vector<int>{}, "settings"_a = nb::dict());
  m.def("shutdown", &shutdown, nb::arg("goodbye") = true);
  // The process ends because of an uncaught exception: objects a daemon
  // thread still holds at exit are expected, not a binding's leak.
  m.def("quiet_leak_warnings", [] { nb::set_leak_warnings(false); });
  m.def("is_initialized", [] {
    std::lock_guard<std::mutex> lock(runtime_mutex);
    return runtime != nullptr;
  });
  m.def("rank", [] { return current().rank(); });
  m.def("size", [] { return current().size(); });
  m.def("local_rank", [] { return current().config().local_rank; });
  m.def("local_size", [] { return current().config().local_size; });
  m.def("cross_rank", [] { return current().config().cross_rank; });
  m.def("cross_size", [] { return current().config().cross_size; });
  m.def("backend", [] { return current().config().backend; });
  m.def("mpi_built", &mpi_built);
  m.def("mpi_threads_supported", &mpi_threads_supported);
  m.def("mpi_abort", &abort_mpi_job, "exit_code"_a);

  m.def(
      "add_process_set",
      [](const std::vector<int>& ranks, bool first_use) {
        Runtime& rt = current();
        ProcessSet set;
        {
          nb::gil_scoped_release release;
          set = rt.add_process_set(ranks, first_use ? SetOrigin::kFirstUse : SetOrigin::kAdded);
        }
        return nb::make_tuple(set.id, set.ranks, set.rank, set.generation);
      },
      "ranks"_a, "first_use"_a = false);
  m.def("process_set_id", [](const std::vector<int>& ranks, int generation) {
    Runtime& rt = current();
    nb::gil_scoped_release release;
    return rt.process_set_id(ranks, generation);
  });
  m.def("remove_process_set", [](int32_t id) {
    Runtime& rt = current();
    nb::gil_scoped_release release;
    return rt.remove_process_set(id);
  });
  m.def("process_set", [](int32_t id) { return set_tuple(current().process_set(id)); });
  m.def("process_set_ids", [] {
    std::vector<int32_t> ids;
    for (const ProcessSet& set : current().process_sets()) ids.push_back(set.id);
    return ids;
  });
  m.def("metrics", [](int32_t id) { return metrics_dict(current().metrics(id)); }, "set_id"_a);
  m.def(
      "start_timeline",
      [](const std::string& path, bool mark_cycles) {
        Runtime& rt = current();
        nb::gil_scoped_release release;
        rt.start_timeline(path, mark_cycles);
      },
      "path"_a, "mark_cycles"_a = false);
  m.def("stop_timeline", [] {
    Runtime& rt = current();
    nb::gil_scoped_release release;
    rt.stop_timeline();
  });
  m.def("timeline_file", &Runtime::timeline_file, "path"_a, "rank"_a);
  m.def("enqueue", &enqueue, "set_id"_a, "op"_a, "name"_a, "input"_a, "output"_a.none(), "reduce_op"_a,
        "root"_a, "prescale"_a, "postscale"_a, "splits"_a, "caller_waits"_a = false);
}

}  // namespace hora::bindings
