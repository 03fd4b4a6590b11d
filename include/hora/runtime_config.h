// Everything a Runtime is configured with. Filled from the environment by
// runtime_config_from_env() (the only place hora reads it) or by hand.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace hora {

// Rounds an elastic job may go through (each takes a block of set ids).
inline constexpr int kMaxElasticRounds = 2000;

struct RuntimeConfig {
  int rank = 0;
  int size = 1;
  int local_rank = 0;
  int local_size = 1;
  int cross_rank = 0;
  int cross_size = 1;
  std::string hostname = "127.0.0.1";  // address this rank's transport listens on
  std::string rendezvous_host;          // empty: a single process, no store needed
  int rendezvous_port = 0;
  std::string secret;
  size_t fusion_threshold = 64 << 20;
  size_t cache_capacity = 1024;
  std::chrono::milliseconds timeout{600'000};        // collective and set-creation timeout
  std::chrono::milliseconds start_timeout{120'000};  // world rendezvous
  // Stall inspector: warn about ops that wait longer than this for members
  // that have not submitted them (0: never), and fail the set once they
  // wait longer than the shutdown time (0: never; HORA_OP_TIMEOUT_SECONDS
  // bounds them anyway).
  std::chrono::milliseconds stall_warning_time{60'000};
  std::chrono::milliseconds stall_shutdown_time{0};
  // Ranks of a set that diverged (each waits on an op the others have not
  // submitted) and stay so, nothing submitted or finished, fail the set
  // after this (0: only the timeout fails them).
  std::chrono::milliseconds divergence_timeout{60'000};
  // A control connection to a peer that gets no answer from its host, not
  // even TCP's acknowledgement of a keepalive probe, for this long is
  // declared dead, naming the peer as unreachable (0: only the op timeout).
  std::chrono::milliseconds link_timeout{15'000};
  // How many Runtimes this process started before this one (the bindings
  // count them). Each keeps its rendezvous keys under its own prefix, so
  // that a job can shut down and init again; every rank must do so alike.
  int epoch = 0;
  // The elastic driver's rendezvous round this Runtime belongs to
  // (HORA_ELASTIC_ROUND; -1: not an elastic job). Every worker of a round
  // uses it as its epoch, whatever it ran before, and the round's dynamic
  // process set ids start above every earlier round's.
  int elastic_round = -1;
  // Each round's dynamic set ids take a block of this many.
  static constexpr int32_t kElasticRoundIds = 1 << 20;

  // Sets whose members share a host use shared memory (HORA_SHM=0: never).
  bool shm = true;
  // Sets without shared memory agree on cached ops by messages, without the
  // coordinator's round trip (HORA_AGREEMENT=leaders, the default, or
  // stream); false: every op is negotiated (HORA_AGREEMENT=negotiated).
  bool stream_agreement = true;
  // Where every host of a set has two members or more sharing a segment,
  // those messages go between the hosts' leaders, each host agreeing in its
  // segment first (HORA_AGREEMENT=leaders, the default); false: every
  // member's record goes through the coordinator (HORA_AGREEMENT=stream).
  bool host_agreement = true;
  // Where a machine runs more of the job's ranks than it has CPUs and they
  // belong to several hosts (containers or network namespaces of one
  // machine), each rank keeps its threads on one CPU, a host's ranks
  // together (HORA_BIND=auto, the default; none: never). A process whose
  // CPUs a launcher or cpuset narrowed is left as it is.
  bool place_ranks = true;
  // Every set of this rank is run by one pool of threads
  // (HORA_PROGRESS_POOL=0: a thread per set).
  bool progress_pool = true;
  // Bytes of each shared-memory slot (HORA_SHM_SLOT_BYTES; 0: the default).
  size_t shm_slot_bytes = 0;
  // Added to this process's host identity (HORA_HOST_IDENTITY): ranks that
  // claim different ones never share memory (tests simulate hosts with it).
  std::string host_identity;
  // HOROVOD_TIMELINE (HORA_TIMELINE): start the timeline at init into this
  // file; HOROVOD_TIMELINE_MARK_CYCLES: mark each batch of work.
  std::string timeline_path;
  bool timeline_mark_cycles = false;

  // The transport: "gloo" or "mpi"; empty picks MPI when an MPI launcher
  // started the process (or a communicator is given), else Gloo. Once the
  // Runtime runs, config().backend names the one in use.
  std::string backend;
  // Started by mpirun or srun rather than horarun: the job bootstraps
  // through MPI (rank 0 serves the store), whichever backend carries data.
  bool mpi_launched = false;
  // init(comm=...): the job's world is this MPI communicator (its Fortran
  // handle, MPI_Comm_c2f) or these ranks of MPI_COMM_WORLD (only they start
  // hora); neither: MPI_COMM_WORLD.
  std::optional<int64_t> mpi_communicator;
  std::vector<int> mpi_world_ranks;
};

// Reads HORA_* and the Horovod names (HOROVOD_RANK, HOROVOD_FUSION_THRESHOLD,
// HOROVOD_CACHE_CAPACITY, HOROVOD_CONTROLLER, ...), and where horarun did not
// set them, the rank variables of Open MPI, MPICH / PMI and Slurm (srun).
// Malformed values throw InvalidArgument naming the variable.
RuntimeConfig runtime_config_from_env();

// HORA_MPI_LIBRARY: the MPI library (a file name or a path) that the MPI
// backend loads instead of the one hora was built with; empty when unset.
std::string mpi_library_from_env();

}  // namespace hora
