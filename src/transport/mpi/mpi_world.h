// MPI itself as hora uses it, and a job's world communicator.
#pragma once

#include <mpi.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "hora/runtime_config.h"

namespace hora::mpi_transport {

// Initialises MPI with MPI_THREAD_MULTIPLE unless the program (mpi4py, for
// one) already has, and then finalises it when the process exits. Returns
// the thread level MPI provides. Idempotent; throws InvalidArgument when MPI
// was already finalised.
int initialize_mpi();

// MPI is initialised and not yet finalised: MPI calls are allowed.
bool mpi_usable();

// Throws the hora error for a failed MPI call, `where` first: an argument
// MPI rejects is Internal (hora passed it), anything else PeerFailure.
void check(int rc, const std::string& where);

// A communicator that hora owns, freed on destruction (never throws).
class OwnedCommunicator {
 public:
  OwnedCommunicator() = default;
  explicit OwnedCommunicator(MPI_Comm comm) : comm_(comm) {}
  OwnedCommunicator(OwnedCommunicator&& other) noexcept : comm_(other.comm_) { other.comm_ = MPI_COMM_NULL; }
  OwnedCommunicator& operator=(OwnedCommunicator&& other) noexcept {
    std::swap(comm_, other.comm_);
    return *this;
  }
  ~OwnedCommunicator();
  MPI_Comm get() const { return comm_; }
  // Gives the communicator up without freeing it: for one that a request
  // still pending uses, since MPI_Finalize progresses that request and
  // crashes if its communicator is gone.
  void keep_forever() { comm_ = MPI_COMM_NULL; }

 private:
  MPI_Comm comm_ = MPI_COMM_NULL;
};

// A job's world under MPI: a communicator of its own (a duplicate of
// MPI_COMM_WORLD or of the one given to init(comm=...), or a new one over
// the ranks given), this process's rank in it, and the node topology.
// Global rank g of hora is rank g of this communicator. Immutable after
// join(); any thread may read it.
class MpiWorld {
 public:
  // Collective over the world (every rank of the job calls it at init).
  // Sets the communicator's error handler to MPI_ERRORS_RETURN.
  static std::shared_ptr<MpiWorld> join(const RuntimeConfig& config);

  MPI_Comm comm() const { return comm_.get(); }
  int rank() const { return rank_; }
  int size() const { return size_; }
  int local_rank() const { return local_rank_; }
  int local_size() const { return local_size_; }
  int cross_rank() const { return cross_rank_; }
  int cross_size() const { return cross_size_; }
  // The largest tag MPI allows (MPI_TAG_UB).
  int tag_upper_bound() const { return tag_upper_bound_; }

 private:
  explicit MpiWorld(OwnedCommunicator comm);
  void read_topology();

  OwnedCommunicator comm_;
  int rank_ = 0, size_ = 1;
  int local_rank_ = 0, local_size_ = 1;
  int cross_rank_ = 0, cross_size_ = 1;
  int tag_upper_bound_ = 32767;
};

}  // namespace hora::mpi_transport
