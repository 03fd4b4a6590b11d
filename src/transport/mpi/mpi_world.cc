#include "transport/mpi/mpi_world.h"

#include <algorithm>
#include <cstdlib>
#include <mutex>

#include "hora/errors.h"

namespace hora::mpi_transport {
namespace {

// The tag of MPI_Comm_create_group for init(comm=[ranks]); only one init
// runs at a time, so one constant serves.
constexpr int kWorldCreationTag = 7219;

std::string error_text(int rc) {
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  if (MPI_Error_string(rc, text, &length) != MPI_SUCCESS) return "MPI error " + std::to_string(rc);
  return std::string(text, static_cast<size_t>(length));
}

bool is_argument_error(int error_class) {
  switch (error_class) {
    case MPI_ERR_BUFFER:
    case MPI_ERR_COUNT:
    case MPI_ERR_TYPE:
    case MPI_ERR_TAG:
    case MPI_ERR_COMM:
    case MPI_ERR_RANK:
    case MPI_ERR_ROOT:
    case MPI_ERR_GROUP:
    case MPI_ERR_OP:
    case MPI_ERR_ARG:
      return true;
    default:
      return false;
  }
}

// MPI is process-wide state: hora finalises it at exit only if hora
// initialised it (otherwise its owner, such as mpi4py, does).
void finalize_at_exit() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
}

}  // namespace

int initialize_mpi() {
  static std::mutex mutex;
  std::lock_guard<std::mutex> lock(mutex);
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (finalized) throw InvalidArgument("MPI has already been finalized in this process; hora cannot start on it");
  int provided = MPI_THREAD_SINGLE;
  if (initialized) {
    MPI_Query_thread(&provided);
    return provided;
  }
  check(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided), "MPI_Init_thread");
  std::atexit(finalize_at_exit);
  return provided;
}

bool mpi_usable() {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  return initialized && !finalized;
}

void check(int rc, const std::string& where) {
  if (rc == MPI_SUCCESS) return;
  int error_class = MPI_ERR_OTHER;
  MPI_Error_class(rc, &error_class);
  const std::string message = where + " failed: " + error_text(rc);
  if (is_argument_error(error_class)) throw Internal(message);
  throw PeerFailure(message);
}

OwnedCommunicator::~OwnedCommunicator() {
  if (comm_ == MPI_COMM_NULL || !mpi_usable()) return;
  MPI_Comm_free(&comm_);  // local in practice; a failure leaves nothing to do
}

MpiWorld::MpiWorld(OwnedCommunicator comm) : comm_(std::move(comm)) {
  check(MPI_Comm_set_errhandler(comm_.get(), MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
  check(MPI_Comm_rank(comm_.get(), &rank_), "MPI_Comm_rank");
  check(MPI_Comm_size(comm_.get(), &size_), "MPI_Comm_size");
  int* tag_ub = nullptr;
  int found = 0;
  MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &tag_ub, &found);
  if (found && tag_ub) tag_upper_bound_ = *tag_ub;
}

// Nodes are the shared-memory domains MPI reports: local rank and size
// within this node, cross rank and size among the ranks of equal local rank.
void MpiWorld::read_topology() {
  MPI_Comm local = MPI_COMM_NULL;
  check(MPI_Comm_split_type(comm(), MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &local), "MPI_Comm_split_type");
  OwnedCommunicator local_owned(local);
  check(MPI_Comm_rank(local, &local_rank_), "MPI_Comm_rank");
  check(MPI_Comm_size(local, &local_size_), "MPI_Comm_size");
  MPI_Comm cross = MPI_COMM_NULL;
  check(MPI_Comm_split(comm(), local_rank_, rank_, &cross), "MPI_Comm_split");
  OwnedCommunicator cross_owned(cross);
  check(MPI_Comm_rank(cross, &cross_rank_), "MPI_Comm_rank");
  check(MPI_Comm_size(cross, &cross_size_), "MPI_Comm_size");
}

std::shared_ptr<MpiWorld> MpiWorld::join(const RuntimeConfig& config) {
  MPI_Comm comm = MPI_COMM_NULL;
  if (!config.mpi_world_ranks.empty()) {
    // init(comm=[ranks]): only these ranks of MPI_COMM_WORLD form the job.
    std::vector<int> ranks = config.mpi_world_ranks;
    std::sort(ranks.begin(), ranks.end());
    int world_rank = 0, world_size = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world_size);
    if (std::adjacent_find(ranks.begin(), ranks.end()) != ranks.end() || ranks.front() < 0 ||
        ranks.back() >= world_size) {
      throw InvalidArgument("init(comm=[...]): the ranks must be distinct ranks of MPI_COMM_WORLD (0.." +
                            std::to_string(world_size - 1) + ")");
    }
    if (!std::binary_search(ranks.begin(), ranks.end(), world_rank)) {
      throw InvalidArgument("init(comm=[...]): rank " + std::to_string(world_rank) +
                            " of MPI_COMM_WORLD is not in the list, so it must not call init");
    }
    MPI_Group world_group = MPI_GROUP_NULL, group = MPI_GROUP_NULL;
    MPI_Comm_group(MPI_COMM_WORLD, &world_group);
    MPI_Group_incl(world_group, static_cast<int>(ranks.size()), ranks.data(), &group);
    const int rc = MPI_Comm_create_group(MPI_COMM_WORLD, group, kWorldCreationTag, &comm);
    MPI_Group_free(&group);
    MPI_Group_free(&world_group);
    check(rc, "init(comm=[...]): MPI_Comm_create_group");
  } else {
    MPI_Comm given = MPI_COMM_WORLD;
    if (config.mpi_communicator) {
      given = MPI_Comm_f2c(static_cast<MPI_Fint>(*config.mpi_communicator));
      if (given == MPI_COMM_NULL) throw InvalidArgument("init(comm=...): the communicator is MPI.COMM_NULL");
    }
    // A duplicate keeps hora's traffic apart from the program's own.
    check(MPI_Comm_dup(given, &comm), "MPI_Comm_dup");
  }
  std::shared_ptr<MpiWorld> world(new MpiWorld(OwnedCommunicator(comm)));
  world->read_topology();
  return world;
}

}  // namespace hora::mpi_transport
