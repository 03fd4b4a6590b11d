// The communicator of one process set over MPI.
#pragma once

#include <mpi.h>

#include <array>
#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "transport/backend.h"
#include "transport/mpi/mpi_world.h"

namespace hora::mpi_transport {

// MPI datatypes and reduction operations for hora's DataType and ReduceOp.
// Types MPI reduces natively use MPI's own operations; float16, bfloat16 and
// bool use operations of hora's (core/reduce.h), so every backend rounds
// alike. Made after MPI_Init, freed on destruction; shared by the backends
// of one job (read-only, any thread).
class MpiReductions {
 public:
  MpiReductions();
  ~MpiReductions();
  MpiReductions(const MpiReductions&) = delete;
  MpiReductions& operator=(const MpiReductions&) = delete;

  MPI_Datatype datatype(DataType dtype) const;
  MPI_Op op(DataType dtype, ReduceOp op) const;

 private:
  // [float16, bfloat16, bool][sum, min, max, product]
  std::array<std::array<MPI_Op, 4>, 3> hora_ops_{};
};

// One process set's data plane: collectives on an MPI communicator of its
// own (made by the members alone, MPI_Comm_create_group); its control plane
// is the TCP star planner/ gives every network set, so the engine sleeps in
// poll(2) instead of spinning in MPI. Threading is as Backend states; MPI runs with
// MPI_THREAD_MULTIPLE, so sets progress side by side.
//
// A blocking MPI collective cannot be interrupted or timed out, so each one
// starts with a non-blocking barrier, waited for in a loop that honours
// abort() and the timeout: a member that gave the set up (stop, shutdown)
// never strands the others inside MPI. Past the barrier every member is in
// the collective, which then runs on MPI's own tuned algorithms; only a
// member that dies inside it can hold it up, and under mpirun that ends the
// whole job.
class MpiBackend final : public Backend {
 public:
  MpiBackend(std::vector<int> global_ranks, int rank, OwnedCommunicator comm,
             std::shared_ptr<const MpiReductions> reductions, std::chrono::milliseconds timeout);
  ~MpiBackend() override;

  int rank() const override { return rank_; }
  int size() const override { return static_cast<int>(global_ranks_.size()); }

  void allreduce(void* buf, size_t count, DataType dtype, ReduceOp op) override;
  void allgatherv(const void* in, void* out, const std::vector<size_t>& recv_bytes) override;
  void broadcast(void* buf, size_t bytes, int root) override;
  void alltoallv(const void* in, const std::vector<size_t>& send_bytes, void* out,
                 const std::vector<size_t>& recv_bytes) override;
  void barrier() override;

  void abort(const std::string& reason) override;

 private:
  // Runs one MPI collective, turning its failure into a hora error that
  // breaks the backend.
  template <typename Collective>
  void run(const char* name, Collective&& collective);
  // Returns once every member has reached this collective; throws
  // PeerFailure once aborted and Timeout past the timeout.
  void await_members(const char* name);
  void expect_one_per_member(const char* name, const std::vector<size_t>& sizes) const;
  // MPI counts and displacements are ints.
  std::vector<int> as_int_counts(const char* name, const std::vector<size_t>& bytes,
                                 std::vector<int>* displacements) const;

  const std::vector<int> global_ranks_;
  const int rank_;
  const std::string set_name_;
  OwnedCommunicator comm_;  // MPI_COMM_NULL for a set of one
  const std::shared_ptr<const MpiReductions> reductions_;
  const std::chrono::milliseconds timeout_;
  std::string broken_;  // the first data-plane failure (engine thread only)
  bool request_abandoned_ = false;  // a barrier still pending on comm_ (engine thread only)
  std::mutex abort_mutex_;
  std::atomic<bool> aborted_{false};
  std::string abort_reason_;  // guarded by abort_mutex_
};

// Makes MpiBackends over `world`. `job_store` (the job's store, not a set's) hands out the tags that keep
// concurrent MPI_Comm_create_group calls apart. create() may run on several
// threads at once, one per process set being built.
std::unique_ptr<BackendFactory> make_mpi_backend_factory(std::shared_ptr<const MpiWorld> world,
                                                         std::shared_ptr<Store> job_store);

}  // namespace hora::mpi_transport
