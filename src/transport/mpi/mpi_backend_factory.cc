// make_mpi_backend_factory: one MPI communicator per process set, made by
// the set's members only.
#include <algorithm>

#include "hora/errors.h"
#include "store/cancellable_wait.h"
#include "transport/mpi/mpi_backend.h"

namespace hora::mpi_transport {
namespace {

constexpr char kTagCounterKey[] = "mpi/communicator_tags";  // in the job's store
constexpr char kTagKey[] = "mpi/tag";                        // in the set's store
constexpr char kArrivedKey[] = "mpi/arrived/";               // + set rank, in the set's store

class MpiBackendFactory final : public BackendFactory {
 public:
  MpiBackendFactory(std::shared_ptr<const MpiWorld> world, std::shared_ptr<Store> job_store)
      : world_(std::move(world)),
        job_store_(std::move(job_store)),
        reductions_(std::make_shared<const MpiReductions>()) {}

  std::string name() const override { return "mpi"; }

  using BackendFactory::create;
  std::unique_ptr<Backend> create(const std::vector<int>& global_ranks, int my_global_rank,
                                  std::shared_ptr<Store> set_store, std::chrono::milliseconds timeout,
                                  const std::atomic<bool>& cancelled) override {
    const int rank = set_rank_of(global_ranks, my_global_rank);
    if (!set_store) throw InvalidArgument("mpi backend: the set store is null");
    const std::string set_name = describe_set(global_ranks);
    OwnedCommunicator comm;
    if (global_ranks.size() > 1) {
      // Set rank 0 hands out the tag once every member has arrived, so the
      // MPI call below, which cannot time out, finds them all.
      const int tag = agree_tag(global_ranks, rank, *set_store, timeout, cancelled, set_name);
      comm = create_communicator(global_ranks, tag, set_name);
    }
    return std::make_unique<MpiBackend>(global_ranks, rank, std::move(comm), reductions_, timeout);
  }

 private:
  int set_rank_of(const std::vector<int>& global_ranks, int my_global_rank) const {
    if (global_ranks.empty() || !std::is_sorted(global_ranks.begin(), global_ranks.end()) ||
        std::adjacent_find(global_ranks.begin(), global_ranks.end()) != global_ranks.end() ||
        global_ranks.front() < 0 || global_ranks.back() >= world_->size()) {
      throw InvalidArgument("mpi backend: a process set's global ranks must be sorted, distinct and below " +
                            std::to_string(world_->size()));
    }
    auto it = std::lower_bound(global_ranks.begin(), global_ranks.end(), my_global_rank);
    if (it == global_ranks.end() || *it != my_global_rank) {
      throw InvalidArgument("mpi backend: global rank " + std::to_string(my_global_rank) +
                            " is not a member of the process set");
    }
    return static_cast<int>(it - global_ranks.begin());
  }

  // Concurrent MPI_Comm_create_group calls on one communicator must differ
  // in tag. Every other member announces its arrival; set rank 0 waits for
  // them all, draws the next tag from a job-wide counter and publishes it.
  int agree_tag(const std::vector<int>& global_ranks, int rank, Store& set_store, std::chrono::milliseconds timeout,
                const std::atomic<bool>& cancelled, const std::string& set_name) {
    if (rank == 0) {
      std::vector<std::string> arrivals;
      for (size_t r = 1; r < global_ranks.size(); ++r) arrivals.push_back(kArrivedKey + std::to_string(r));
      wait_unless_cancelled(set_store, arrivals, timeout, cancelled, kCancelPoll,
                            set_name + ": waiting for the members to create the MPI communicator");
      const int64_t drawn = job_store_->add(kTagCounterKey, 1);
      const int tag = static_cast<int>(drawn % std::max(world_->tag_upper_bound(), 1));
      const std::string text = std::to_string(tag);
      set_store.set(kTagKey, std::vector<uint8_t>(text.begin(), text.end()));
      return tag;
    }
    set_store.set(kArrivedKey + std::to_string(rank), std::vector<uint8_t>{1});
    const std::vector<uint8_t> value =
        get_unless_cancelled(set_store, kTagKey, timeout, cancelled, kCancelPoll, set_name + ": creating the MPI communicator");
    return stored_int32(value, kTagKey);
  }

  OwnedCommunicator create_communicator(const std::vector<int>& global_ranks, int tag, const std::string& set_name) {
    MPI_Group world_group = MPI_GROUP_NULL, group = MPI_GROUP_NULL;
    check(MPI_Comm_group(world_->comm(), &world_group), set_name + ": MPI_Comm_group");
    int rc = MPI_Group_incl(world_group, static_cast<int>(global_ranks.size()), global_ranks.data(), &group);
    MPI_Comm comm = MPI_COMM_NULL;
    if (rc == MPI_SUCCESS) rc = MPI_Comm_create_group(world_->comm(), group, tag, &comm);
    if (group != MPI_GROUP_NULL) MPI_Group_free(&group);
    MPI_Group_free(&world_group);
    check(rc, set_name + ": MPI_Comm_create_group");
    OwnedCommunicator owned(comm);
    check(MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN), set_name + ": MPI_Comm_set_errhandler");
    return owned;
  }

  const std::shared_ptr<const MpiWorld> world_;
  const std::shared_ptr<Store> job_store_;
  const std::shared_ptr<const MpiReductions> reductions_;
};

}  // namespace

std::unique_ptr<BackendFactory> make_mpi_backend_factory(std::shared_ptr<const MpiWorld> world,
                                                         std::shared_ptr<Store> job_store) {
  return std::make_unique<MpiBackendFactory>(std::move(world), std::move(job_store));
}

}  // namespace hora::mpi_transport
