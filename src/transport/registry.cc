#include "transport/registry.h"

#include <algorithm>

#include "hora/errors.h"
#include "transport/mpi_plugin.h"
#include "util/caller_waits.h"

#ifndef HORA_WITH_MPI
#define HORA_WITH_MPI 0
#endif

namespace hora {
namespace {

#if HORA_WITH_MPI
// The MPI plugin, after the MPI library it runs on: HORA_MPI_LIBRARY, else
// the library hora was built with, by its file name (the machine's own, as
// the dynamic linker finds it), then where it was at build time.
const MpiPlugin& mpi_plugin() {
  const std::string chosen = mpi_library_from_env();
  const std::vector<std::string> libraries =
      chosen.empty() ? std::vector<std::string>{HORA_MPI_LIBRARY, HORA_MPI_LIBRARY_PATH}
                     : std::vector<std::string>{chosen};
  return load_mpi_plugin(HORA_MPI_PLUGIN, libraries);
}
#endif

// A job that MPI starts or describes: mpirun, srun, init(comm=...), or an
// explicit request for the MPI backend.
bool bootstraps_through_mpi(const RuntimeConfig& config) {
  return config.mpi_launched || config.mpi_communicator.has_value() || !config.mpi_world_ranks.empty() ||
         config.backend == "mpi";
}

}  // namespace

bool host_crowded(const RuntimeConfig& config) {
  return more_than_cores(static_cast<size_t>(std::max(config.local_size, 0)));
}

std::unique_ptr<BackendFactory> make_socket_backend_factory(const RuntimeConfig& config) {
  if (config.backend == "gloo") return make_gloo_backend_factory(config.hostname);
  TcpOptions options;
  options.hostname = config.hostname;
  options.link_timeout = config.link_timeout;
  if (host_crowded(config)) options.spin = std::chrono::microseconds(2);
  return make_tcp_backend_factory(std::move(options));
}

namespace {

// A job started by horarun (or a single process): the launcher's store, and
// hora's own TCP (or Gloo, when asked for) between ranks.
JobTransport open_launcher_job(RuntimeConfig config) {
  if (config.backend != "tcp" && config.backend != "gloo")
    throw Internal("launcher job with backend '" + config.backend + "'");
  JobTransport job;
  if (config.rendezvous_host.empty()) {
    job.store = make_hash_store();
    job.factory = config.size == 1 ? make_local_backend_factory() : nullptr;
  } else {
    job.store = make_tcp_store(config.rendezvous_host, config.rendezvous_port, config.secret);
  }
  if (!job.factory) job.factory = make_socket_backend_factory(config);
  job.config = std::move(config);
  return job;
}

}  // namespace

JobTransport open_job_transport(RuntimeConfig config) {
  if (!config.backend.empty() && config.backend != "tcp" && config.backend != "gloo" && config.backend != "mpi") {
    throw InvalidArgument("unknown backend '" + config.backend + "'; choose tcp, gloo or mpi");
  }
  const bool through_mpi = bootstraps_through_mpi(config);
  if (config.backend.empty()) config.backend = through_mpi ? "mpi" : "tcp";
  if (!through_mpi) return open_launcher_job(std::move(config));
  const std::string context =
      "this process was started by an MPI launcher or asked for MPI (HORA_BACKEND=mpi, init(comm=...)), but ";
  const std::string alternative = "; or run the job on TCP: horarun without --mpi, HORA_BACKEND unset";
#if HORA_WITH_MPI
  const MpiPlugin* plugin = nullptr;
  try {
    plugin = &mpi_plugin();
  } catch (const InvalidArgument& error) {
    throw InvalidArgument(context + error.what() + alternative);
  }
  return plugin->open_job(std::move(config));
#else
  throw InvalidArgument(context +
                        "this build of hora has no MPI backend: build hora from source on a machine with an MPI "
                        "library (Debian: apt-get install libopenmpi-dev)" +
                        alternative);
#endif
}

bool mpi_built() {
#if HORA_WITH_MPI
  try {
    mpi_plugin();
    return true;
  } catch (const InvalidArgument&) {
    return false;
  }
#else
  return false;
#endif
}

bool mpi_threads_supported() {
#if HORA_WITH_MPI
  const MpiPlugin* plugin = loaded_mpi_plugin(HORA_MPI_PLUGIN);
  return plugin && plugin->threads_supported();
#else
  return false;
#endif
}

void abort_mpi_job(int exit_code) {
#if HORA_WITH_MPI
  if (const MpiPlugin* plugin = loaded_mpi_plugin(HORA_MPI_PLUGIN)) plugin->abort_job(exit_code);
#else
  (void)exit_code;
#endif
}

}  // namespace hora
