// The transport registry: which backends this build has, and the one place
// that picks a job's store and network backend factory from its
// RuntimeConfig (planner/ then plans each set on them).
#pragma once

#include <memory>

#include "hora/runtime_config.h"
#include "hora/store.h"
#include "transport/backend.h"

namespace hora {

// What a Runtime needs to reach the rest of its job.
struct JobTransport {
  // The configuration as the transport sees the job: `backend` is resolved,
  // and under MPI rank, size and topology come from the world communicator.
  RuntimeConfig config;
  std::shared_ptr<Store> store;
  std::unique_ptr<BackendFactory> factory;
};

// Chooses the backend (RuntimeConfig::backend says how) and connects this
// process to its job's store. Under MPI this is collective over the job's
// world communicator; under horarun it only opens a client. Throws
// InvalidArgument for a backend this build lacks or a launch that does not
// fit it.
JobTransport open_job_transport(RuntimeConfig config);

// Whether this host runs more of the job's ranks (config.local_size) than it
// has cores: a thread that spins for a peer there takes the core the peer
// needs, so waits spin only briefly.
bool host_crowded(const RuntimeConfig& config);

// The backend of a job whose ranks talk over sockets: Gloo when
// `config.backend` is "gloo", else hora's own TCP, listening on
// config.hostname; its waits spin only briefly when the host runs more
// ranks (config.local_size) than it has cores.
std::unique_ptr<BackendFactory> make_socket_backend_factory(const RuntimeConfig& config);

// Whether the MPI backend can run here: this build has it, and its plugin
// and the MPI library it needs load (which loads them).
bool mpi_built();
// Whether MPI runs with MPI_THREAD_MULTIPLE in this process (false when MPI
// is not built or not initialised).
bool mpi_threads_supported();
// Ends every process of the MPI job (MPI_Abort) when MPI is in use; else
// does nothing. For a rank that fails: its peers may wait in MPI forever,
// and MPI_Finalize at exit would wait for them.
void abort_mpi_job(int exit_code);

}  // namespace hora
