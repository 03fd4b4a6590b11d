// The one place hora reads environment variables.
#include <cctype>
#include <algorithm>
#include <cstdlib>
#include <string>
#include <vector>

#include "hora/errors.h"
#include "hora/runtime_config.h"
#include "util/interfaces.h"

namespace hora {
namespace {

// The first of `names` that is set, or nullptr.
const char* lookup(std::initializer_list<const char*> names, const char** found) {
  for (const char* name : names) {
    if (!*name) continue;  // a name left out by its caller
    if (const char* value = std::getenv(name)) {
      *found = name;
      return value;
    }
  }
  return nullptr;
}

// Inside a task of an srun job step (a batch script alone is not one).
bool in_slurm_step() { return std::getenv("SLURM_STEP_ID") && std::getenv("SLURM_PROCID"); }

long long read_int(std::initializer_list<const char*> names, long long fallback) {
  const char* name = nullptr;
  const char* value = lookup(names, &name);
  if (!value || !*value) return fallback;
  try {
    size_t used = 0;
    long long parsed = std::stoll(value, &used);
    if (used != std::string(value).size()) throw std::invalid_argument(value);
    return parsed;
  } catch (const std::exception&) {
    throw InvalidArgument(std::string("environment variable ") + name + "='" + value + "' is not an integer");
  }
}

double read_seconds(std::initializer_list<const char*> names, double fallback) {
  const char* name = nullptr;
  const char* value = lookup(names, &name);
  if (!value || !*value) return fallback;
  try {
    size_t used = 0;
    double parsed = std::stod(value, &used);
    if (used != std::string(value).size() || parsed < 0) throw std::invalid_argument(value);
    return parsed;
  } catch (const std::exception&) {
    throw InvalidArgument(std::string("environment variable ") + name + "='" + value +
                          "' is not a non-negative number of seconds");
  }
}

std::string read_string(std::initializer_list<const char*> names, const std::string& fallback) {
  const char* name = nullptr;
  const char* value = lookup(names, &name);
  return value ? std::string(value) : fallback;
}

std::chrono::milliseconds millis(double seconds) {
  return std::chrono::milliseconds(static_cast<long long>(seconds * 1000));
}

// Whether an MPI launcher (Open MPI's mpirun, MPICH's hydra, a PMIx
// launcher) or a Slurm job step (srun) started this process.
bool started_by_mpi_launcher() {
  const char* name = nullptr;
  return lookup({"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMI_RANK", "PMIX_RANK"}, &name) != nullptr ||
         in_slurm_step();
}

// "tcp", "gloo", "mpi" or "" (not chosen): HORA_BACKEND, else Horovod's
// names, whose "gloo" (Horovod's controller without MPI) is hora's own TCP.
std::string read_backend() {
  const char* name = nullptr;
  const char* value = lookup({"HORA_BACKEND", "HOROVOD_CPU_OPERATIONS", "HOROVOD_CONTROLLER"}, &name);
  if (!value || !*value) return "";
  std::string backend(value);
  for (char& ch : backend) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  const bool ours = std::string(name) == "HORA_BACKEND";
  if (ours && backend != "tcp" && backend != "gloo" && backend != "mpi") {
    throw InvalidArgument(std::string("environment variable ") + name + "='" + value + "' must be tcp, gloo or mpi");
  }
  if (!ours && backend != "gloo" && backend != "mpi") {
    throw InvalidArgument(std::string("environment variable ") + name + "='" + value + "' must be gloo or mpi");
  }
  return !ours && backend == "gloo" ? "tcp" : backend;
}

}  // namespace

std::string mpi_library_from_env() {
  const char* name = nullptr;
  const char* value = lookup({"HORA_MPI_LIBRARY"}, &name);
  return value ? value : "";
}

RuntimeConfig runtime_config_from_env() {
  RuntimeConfig c;
  c.rendezvous_host = read_string({"HORA_RENDEZVOUS_ADDR", "HOROVOD_GLOO_RENDEZVOUS_ADDR"}, "");
  c.backend = read_backend();
  // horarun's variables come first; the launcher's are read only without them.
  c.mpi_launched = c.rendezvous_host.empty() && started_by_mpi_launcher();
  const bool slurm = in_slurm_step();
  c.rank = static_cast<int>(read_int({"HORA_RANK", "HOROVOD_RANK", "OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK",
                                      slurm ? "SLURM_PROCID" : ""},
                                     0));
  c.size = static_cast<int>(read_int({"HORA_SIZE", "HOROVOD_SIZE", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE",
                                      slurm ? "SLURM_STEP_NUM_TASKS" : "", slurm ? "SLURM_NTASKS" : ""},
                                     1));
  c.local_rank = static_cast<int>(read_int({"HORA_LOCAL_RANK", "HOROVOD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK",
                                            "MPI_LOCALRANKID", slurm ? "SLURM_LOCALID" : ""},
                                           c.rank));
  c.local_size = static_cast<int>(read_int({"HORA_LOCAL_SIZE", "HOROVOD_LOCAL_SIZE", "OMPI_COMM_WORLD_LOCAL_SIZE",
                                            "MPI_LOCALNRANKS", slurm ? "SLURM_NTASKS_PER_NODE" : ""},
                                           c.size));
  c.cross_rank = static_cast<int>(read_int({"HORA_CROSS_RANK", "HOROVOD_CROSS_RANK", slurm ? "SLURM_NODEID" : ""}, 0));
  c.cross_size = static_cast<int>(read_int({"HORA_CROSS_SIZE", "HOROVOD_CROSS_SIZE",
                                            slurm ? "SLURM_STEP_NUM_NODES" : "", slurm ? "SLURM_NNODES" : ""},
                                           1));
  c.hostname = read_string({"HORA_HOSTNAME", "HOROVOD_HOSTNAME"}, c.hostname);
  // horovodrun --network-interfaces: listen on the first of them this host has.
  const std::string interfaces = read_string({"HORA_NETWORK_INTERFACES", "HOROVOD_GLOO_IFACE"}, "");
  if (!interfaces.empty()) {
    std::vector<std::string> names;
    for (size_t begin = 0; begin <= interfaces.size();) {
      const size_t end = std::min(interfaces.find(',', begin), interfaces.size());
      if (end > begin) names.push_back(interfaces.substr(begin, end - begin));
      begin = end + 1;
    }
    try {
      c.hostname = interface_address(names);
    } catch (const InvalidArgument& e) {
      throw InvalidArgument(std::string("HORA_NETWORK_INTERFACES='") + interfaces + "': " + e.what());
    }
  }
  c.rendezvous_port = static_cast<int>(read_int({"HORA_RENDEZVOUS_PORT", "HOROVOD_GLOO_RENDEZVOUS_PORT"}, 0));
  c.secret = read_string({"HORA_SECRET"}, "");
  long long fusion = read_int({"HORA_FUSION_THRESHOLD", "HOROVOD_FUSION_THRESHOLD"}, 64 << 20);
  long long cache = read_int({"HORA_CACHE_CAPACITY", "HOROVOD_CACHE_CAPACITY"}, 1024);
  if (fusion < 0) throw InvalidArgument("HOROVOD_FUSION_THRESHOLD must not be negative");
  if (cache < 0) throw InvalidArgument("HOROVOD_CACHE_CAPACITY must not be negative");
  c.fusion_threshold = static_cast<size_t>(fusion);
  c.cache_capacity = static_cast<size_t>(cache);
  c.timeout = millis(read_seconds({"HORA_OP_TIMEOUT_SECONDS", "HOROVOD_GLOO_TIMEOUT_SECONDS"}, 600));
  c.start_timeout = millis(read_seconds({"HORA_START_TIMEOUT", "HOROVOD_START_TIMEOUT"}, 120));
  c.stall_warning_time =
      millis(read_seconds({"HORA_STALL_CHECK_TIME_SECONDS", "HOROVOD_STALL_CHECK_TIME_SECONDS"}, 60));
  if (read_int({"HORA_STALL_CHECK_DISABLE", "HOROVOD_STALL_CHECK_DISABLE"}, 0) != 0)
    c.stall_warning_time = std::chrono::milliseconds(0);
  c.stall_shutdown_time =
      millis(read_seconds({"HORA_STALL_SHUTDOWN_TIME_SECONDS", "HOROVOD_STALL_SHUTDOWN_TIME_SECONDS"}, 0));
  c.divergence_timeout = millis(read_seconds({"HORA_DIVERGENCE_TIMEOUT_SECONDS"}, 60));
  c.link_timeout = millis(read_seconds({"HORA_LINK_TIMEOUT_SECONDS"}, 15));
  const long long round = read_int({"HORA_ELASTIC_ROUND"}, -1);
  if (round < -1 || round >= kMaxElasticRounds)
    throw InvalidArgument("HORA_ELASTIC_ROUND=" + std::to_string(round) + " is outside 0.." +
                          std::to_string(kMaxElasticRounds - 1));
  c.elastic_round = static_cast<int>(round);
  c.shm = read_int({"HORA_SHM"}, 1) != 0;
  const std::string agreement = read_string({"HORA_AGREEMENT"}, "leaders");
  if (agreement != "leaders" && agreement != "stream" && agreement != "negotiated")
    throw InvalidArgument("HORA_AGREEMENT=" + agreement + " is none of 'leaders', 'stream' and 'negotiated'");
  c.stream_agreement = agreement != "negotiated";
  c.host_agreement = agreement == "leaders";
  const std::string bind = read_string({"HORA_BIND"}, "auto");
  if (bind != "auto" && bind != "none") throw InvalidArgument("HORA_BIND=" + bind + " is neither 'auto' nor 'none'");
  c.place_ranks = bind == "auto";
  c.progress_pool = read_int({"HORA_PROGRESS_POOL"}, 1) != 0;
  const long long slot_bytes = read_int({"HORA_SHM_SLOT_BYTES"}, 0);
  if (slot_bytes < 0) throw InvalidArgument("HORA_SHM_SLOT_BYTES must not be negative");
  c.shm_slot_bytes = static_cast<size_t>(slot_bytes);
  c.host_identity = read_string({"HORA_HOST_IDENTITY"}, "");
  c.timeline_path = read_string({"HORA_TIMELINE", "HOROVOD_TIMELINE"}, "");
  c.timeline_mark_cycles = read_int({"HORA_TIMELINE_MARK_CYCLES", "HOROVOD_TIMELINE_MARK_CYCLES"}, 0) != 0;
  if (c.size < 1) throw InvalidArgument("HORA_SIZE must be at least 1");
  if (c.rank < 0 || c.rank >= c.size)
    throw InvalidArgument("HORA_RANK=" + std::to_string(c.rank) + " is outside 0.." + std::to_string(c.size - 1));
  if (c.size > 1 && c.rendezvous_host.empty() && !c.mpi_launched)
    throw InvalidArgument(
        "HORA_SIZE > 1 needs HORA_RENDEZVOUS_ADDR and HORA_RENDEZVOUS_PORT; start the job with horarun, "
        "horarun --mpi or mpirun");
  return c;
}

}  // namespace hora
