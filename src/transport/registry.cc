#include "transport/registry.h"

#include "hora/errors.h"

#ifndef HORA_WITH_MPI
#define HORA_WITH_MPI 0
#endif

namespace hora {
namespace {

// A job that MPI starts or describes: mpirun, srun, init(comm=...), or an
// explicit request for the MPI backend.
bool bootstraps_through_mpi(const RuntimeConfig& config) {
  return config.mpi_launched || config.mpi_communicator.has_value() || !config.mpi_world_ranks.empty() ||
         config.backend == "mpi";
}

// A job started by horarun (or a single process): the launcher's store, and
// Gloo between ranks.
JobTransport open_launcher_job(RuntimeConfig config) {
  if (config.backend != "gloo") throw Internal("launcher job with backend '" + config.backend + "'");
  JobTransport job;
  if (config.rendezvous_host.empty()) {
    job.store = make_hash_store();
    job.factory = config.size == 1 ? make_local_backend_factory() : nullptr;
  } else {
    job.store = make_tcp_store(config.rendezvous_host, config.rendezvous_port, config.secret);
  }
  if (!job.factory) job.factory = make_gloo_backend_factory(config.hostname);
  job.config = std::move(config);
  return job;
}

// Sets on one host take shared memory, others the job's network factory.
JobTransport with_shared_memory(JobTransport job) {
  if (job.config.size > 1 && job.factory) {
    ShmOptions options{job.config.shm, job.config.shm_slot_bytes, job.config.host_identity, job.config.local_size,
                       job.config.size};
    job.factory = make_shm_backend_factory(std::move(job.factory), std::move(options));
  }
  return job;
}

}  // namespace

JobTransport open_job_transport(RuntimeConfig config) {
  if (!config.backend.empty() && config.backend != "gloo" && config.backend != "mpi") {
    throw InvalidArgument("unknown backend '" + config.backend + "'; choose gloo or mpi");
  }
  const bool through_mpi = bootstraps_through_mpi(config);
  if (config.backend.empty()) config.backend = through_mpi ? "mpi" : "gloo";
  if (!through_mpi) return with_shared_memory(open_launcher_job(std::move(config)));
#if HORA_WITH_MPI
  return with_shared_memory(mpi_transport::open_job(std::move(config)));
#else
  throw InvalidArgument(
      "this process was started by an MPI launcher or asked for MPI (HORA_BACKEND=mpi, init(comm=...)), "
      "but this build of hora has no MPI backend: install an MPI library (Debian: libopenmpi-dev) and "
      "rebuild, or start the job with horarun");
#endif
}

bool mpi_built() { return HORA_WITH_MPI != 0; }

bool mpi_threads_supported() {
#if HORA_WITH_MPI
  return mpi_transport::threads_supported();
#else
  return false;
#endif
}

void abort_mpi_job(int exit_code) {
#if HORA_WITH_MPI
  mpi_transport::abort_job(exit_code);
#else
  (void)exit_code;
#endif
}

}  // namespace hora
