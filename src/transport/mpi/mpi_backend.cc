#include "transport/mpi/mpi_backend.h"

#include <sched.h>

#include <climits>
#include <cstring>

#include "core/reduce.h"
#include "hora/errors.h"

namespace hora::mpi_transport {
namespace {

// The most elements (or bytes) one MPI call takes: counts are ints.
constexpr size_t kMaxCount = INT_MAX;

// An MPI_User_function over hora's kernels: inout = inout (op) in.
template <DataType kType, ReduceOp kOp>
void reduce_with_hora(void* in, void* inout, int* len, MPI_Datatype*) {
  reduce_into(inout, in, static_cast<size_t>(*len), kType, kOp);
}

int reduce_op_index(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return 0;
    case ReduceOp::kMin: return 1;
    case ReduceOp::kMax: return 2;
    case ReduceOp::kProduct: return 3;
    default: throw Internal("mpi backend: " + std::string(reduce_op_name(op)) + " is not a backend reduction");
  }
}

// Index into MpiReductions::hora_ops_, or -1 for a type MPI reduces itself.
int hora_type_index(DataType dtype) {
  switch (dtype) {
    case DataType::kFloat16: return 0;
    case DataType::kBFloat16: return 1;
    case DataType::kBool: return 2;
    default: return -1;
  }
}

template <DataType kType>
std::array<MPI_Op, 4> create_ops() {
  std::array<MPI_User_function*, 4> functions = {
      &reduce_with_hora<kType, ReduceOp::kSum>, &reduce_with_hora<kType, ReduceOp::kMin>,
      &reduce_with_hora<kType, ReduceOp::kMax>, &reduce_with_hora<kType, ReduceOp::kProduct>};
  std::array<MPI_Op, 4> ops{};
  for (size_t i = 0; i < ops.size(); ++i) check(MPI_Op_create(functions[i], 1, &ops[i]), "MPI_Op_create");
  return ops;
}

void copy_bytes(void* to, const void* from, size_t bytes) {
  if (bytes > 0) std::memmove(to, from, bytes);
}

}  // namespace

MpiReductions::MpiReductions() {
  hora_ops_[0] = create_ops<DataType::kFloat16>();
  hora_ops_[1] = create_ops<DataType::kBFloat16>();
  hora_ops_[2] = create_ops<DataType::kBool>();
}

MpiReductions::~MpiReductions() {
  if (!mpi_usable()) return;
  for (auto& ops : hora_ops_)
    for (MPI_Op& op : ops)
      if (op != MPI_OP_NULL) MPI_Op_free(&op);
}

MPI_Datatype MpiReductions::datatype(DataType dtype) const {
  switch (dtype) {
    case DataType::kUInt8: return MPI_UINT8_T;
    case DataType::kInt8: return MPI_INT8_T;
    case DataType::kUInt16: return MPI_UINT16_T;
    case DataType::kInt16: return MPI_INT16_T;
    case DataType::kInt32: return MPI_INT32_T;
    case DataType::kInt64: return MPI_INT64_T;
    case DataType::kFloat16: return MPI_UINT16_T;  // moved as bits, reduced by hora
    case DataType::kBFloat16: return MPI_UINT16_T;
    case DataType::kFloat32: return MPI_FLOAT;
    case DataType::kFloat64: return MPI_DOUBLE;
    case DataType::kBool: return MPI_UINT8_T;
  }
  throw Internal("mpi backend: no MPI datatype for dtype " + std::to_string(static_cast<int>(dtype)));
}

MPI_Op MpiReductions::op(DataType dtype, ReduceOp op) const {
  const int index = reduce_op_index(op);
  const int type_index = hora_type_index(dtype);
  if (type_index >= 0) return hora_ops_[type_index][index];
  switch (op) {
    case ReduceOp::kMin: return MPI_MIN;
    case ReduceOp::kMax: return MPI_MAX;
    case ReduceOp::kProduct: return MPI_PROD;
    default: return MPI_SUM;
  }
}

MpiBackend::MpiBackend(std::vector<int> global_ranks, int rank, OwnedCommunicator comm,
                       std::shared_ptr<const MpiReductions> reductions, std::chrono::milliseconds timeout)
    : global_ranks_(std::move(global_ranks)),
      rank_(rank),
      set_name_(describe_set(global_ranks_)),
      comm_(std::move(comm)),
      reductions_(std::move(reductions)),
      timeout_(timeout) {}

MpiBackend::~MpiBackend() {
  if (request_abandoned_) comm_.keep_forever();
}

void MpiBackend::abort(const std::string& reason) {
  std::lock_guard<std::mutex> lock(abort_mutex_);
  if (aborted_) return;
  abort_reason_ = reason;
  aborted_ = true;
}

template <typename Collective>
void MpiBackend::run(const char* name, Collective&& collective) {
  if (aborted_) {
    std::lock_guard<std::mutex> lock(abort_mutex_);
    throw PeerFailure(set_name_ + ": " + name + " on an aborted set: " + abort_reason_);
  }
  if (!broken_.empty()) {
    throw PeerFailure(set_name_ + ": " + name + " on a set broken by an earlier failure: " + broken_);
  }
  try {
    await_members(name);
    collective();
  } catch (const Timeout& e) {
    broken_ = e.what();
    throw;
  } catch (const Error& e) {
    broken_ = set_name_ + ": " + e.what();
    if (dynamic_cast<const Internal*>(&e)) throw Internal(broken_);
    throw PeerFailure(broken_);
  }
}

// The barrier's request is abandoned when the wait gives up: the set is
// broken then, and its communicator is never freed, since the request still
// uses it.
void MpiBackend::await_members(const char* name) {
  MPI_Request request = MPI_REQUEST_NULL;
  check(MPI_Ibarrier(comm_.get(), &request), "MPI_Ibarrier");
  const auto deadline = std::chrono::steady_clock::now() + timeout_;
  for (unsigned polls = 1;; ++polls) {
    int done = 0;
    check(MPI_Test(&request, &done, MPI_STATUS_IGNORE), "MPI_Test");
    if (done) return;
    const bool aborted = aborted_;
    if (aborted || (polls % 256 == 0 && std::chrono::steady_clock::now() >= deadline)) {
      request_abandoned_ = true;
      if (aborted) {
        std::lock_guard<std::mutex> lock(abort_mutex_);
        throw PeerFailure(std::string(name) + " given up waiting for the other members: " + abort_reason_);
      }
      throw Timeout(set_name_ + ": " + name + " timed out after " + std::to_string(timeout_.count()) +
                    " ms waiting for the other members to reach it");
    }
    sched_yield();  // MPI progresses only inside MPI_Test; let peers on this core run
  }
}

void MpiBackend::expect_one_per_member(const char* name, const std::vector<size_t>& sizes) const {
  if (sizes.size() != global_ranks_.size()) {
    throw InvalidArgument(set_name_ + ": " + name + " needs one size per member, got " +
                          std::to_string(sizes.size()));
  }
}

std::vector<int> MpiBackend::as_int_counts(const char* name, const std::vector<size_t>& bytes,
                                           std::vector<int>* displacements) const {
  std::vector<int> counts(bytes.size());
  displacements->assign(bytes.size(), 0);
  size_t offset = 0;
  for (size_t i = 0; i < bytes.size(); ++i) {
    if (bytes[i] > kMaxCount || offset > kMaxCount) {
      throw InvalidArgument(set_name_ + ": " + name + " of more than " + std::to_string(kMaxCount) +
                            " bytes per process set is beyond MPI's int counts; use the tcp backend");
    }
    counts[i] = static_cast<int>(bytes[i]);
    (*displacements)[i] = static_cast<int>(offset);
    offset += bytes[i];
  }
  return counts;
}

void MpiBackend::allreduce(void* buf, size_t count, DataType dtype, ReduceOp op) {
  if (size() == 1 || count == 0) return;
  const MPI_Datatype type = reductions_->datatype(dtype);
  const MPI_Op mpi_op = reductions_->op(dtype, op);
  const size_t element_bytes = dtype_size(dtype);
  run("allreduce", [&] {
    auto* bytes = static_cast<uint8_t*>(buf);
    for (size_t done = 0; done < count;) {
      const size_t chunk = std::min(count - done, kMaxCount);
      check(MPI_Allreduce(MPI_IN_PLACE, bytes + done * element_bytes, static_cast<int>(chunk), type, mpi_op,
                          comm_.get()),
            "MPI_Allreduce");
      done += chunk;
    }
  });
}

void MpiBackend::allgatherv(const void* in, void* out, const std::vector<size_t>& recv_bytes) {
  expect_one_per_member("allgatherv", recv_bytes);
  if (size() == 1) return copy_bytes(out, in, recv_bytes[0]);
  std::vector<int> displacements;
  const std::vector<int> counts = as_int_counts("allgatherv", recv_bytes, &displacements);
  run("allgatherv", [&] {
    check(MPI_Allgatherv(in, counts[rank_], MPI_BYTE, out, counts.data(), displacements.data(), MPI_BYTE,
                         comm_.get()),
          "MPI_Allgatherv");
  });
}

void MpiBackend::broadcast(void* buf, size_t bytes, int root) {
  if (root < 0 || root >= size()) {
    throw InvalidArgument(set_name_ + ": broadcast root " + std::to_string(root) + " is not a set rank");
  }
  if (size() == 1 || bytes == 0) return;
  run("broadcast", [&] {
    auto* data = static_cast<uint8_t*>(buf);
    for (size_t done = 0; done < bytes;) {
      const size_t chunk = std::min(bytes - done, kMaxCount);
      check(MPI_Bcast(data + done, static_cast<int>(chunk), MPI_BYTE, root, comm_.get()), "MPI_Bcast");
      done += chunk;
    }
  });
}

void MpiBackend::alltoallv(const void* in, const std::vector<size_t>& send_bytes, void* out,
                           const std::vector<size_t>& recv_bytes) {
  expect_one_per_member("alltoallv", send_bytes);
  expect_one_per_member("alltoallv", recv_bytes);
  if (size() == 1) {
    if (send_bytes[0] != recv_bytes[0]) {
      throw InvalidArgument(set_name_ + ": alltoallv sends " + std::to_string(send_bytes[0]) +
                            " bytes to itself but expects " + std::to_string(recv_bytes[0]));
    }
    return copy_bytes(out, in, send_bytes[0]);
  }
  std::vector<int> send_displacements, recv_displacements;
  const std::vector<int> send_counts = as_int_counts("alltoallv", send_bytes, &send_displacements);
  const std::vector<int> recv_counts = as_int_counts("alltoallv", recv_bytes, &recv_displacements);
  run("alltoallv", [&] {
    check(MPI_Alltoallv(in, send_counts.data(), send_displacements.data(), MPI_BYTE, out, recv_counts.data(),
                        recv_displacements.data(), MPI_BYTE, comm_.get()),
          "MPI_Alltoallv");
  });
}

void MpiBackend::barrier() {
  if (size() == 1) return;
  run("barrier", [] {});  // the arrival barrier is the whole barrier
}

}  // namespace hora::mpi_transport
