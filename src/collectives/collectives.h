// The collectives, run by a process set's engine thread once the set agreed
// on them. Each takes the set's Backend and caller tensors, blocks until done
// and throws the Backend's error on failure. Scale factors, Average and the
// fusion buffer are handled here, so a Backend only moves and reduces bytes.
#pragma once

#include <chrono>
#include <cstddef>
#include <vector>

#include "hora/tensor_view.h"
#include "hora/work.h"
#include "transport/backend.h"

namespace hora {

// Reused staging memory of one engine: fresh pages are slow to touch, so it
// only grows.
class FusionBuffer {
 public:
  std::byte* reserve(size_t bytes);

 private:
  std::vector<std::byte> bytes_;
};

struct AllreduceOptions {
  DataType dtype = DataType::kFloat32;
  ReduceOp op = ReduceOp::kSum;
  double prescale = 1.0;
  double postscale = 1.0;
};

// One tensor of an allreduce: input and output may be the same memory.
struct AllreducePart {
  TensorView input;
  TensorView output;
};

// When a fused allreduce finished copying its inputs into the fusion
// buffer and finished reducing it (left unset for a single tensor).
struct FusionTimes {
  std::chrono::steady_clock::time_point packed{};
  std::chrono::steady_clock::time_point reduced{};
};

// Reduces every part across the set; several parts travel fused in one
// buffer.
void allreduce(Backend& backend, const std::vector<AllreducePart>& parts, const AllreduceOptions& options,
               FusionBuffer& fusion, FusionTimes* times = nullptr);

// Concatenates every member's input along the first dimension into an output
// the Work owns. first_dims[i] is member i's first dimension.
void allgather(Backend& backend, const TensorView& input, const std::vector<int64_t>& first_dims, Work& work);

// Copies the root's input into every member's output. `root` is a set rank.
void broadcast(Backend& backend, const TensorView& input, const TensorView& output, int root);

// Sends splits[i] rows of the input to member i; `matrix` (n*n, row =
// sender) says how many rows arrive from each. The Work receives the output
// and the received splits.
void alltoall(Backend& backend, const TensorView& input, const std::vector<int64_t>& matrix, Work& work);

// Reduces across the set, then keeps this member's block of rows: rows are
// split evenly and the lowest set ranks take one extra row each when the
// first dimension does not divide.
void reducescatter(Backend& backend, const TensorView& input, const TensorView& output,
                   const AllreduceOptions& options, FusionBuffer& fusion);

// First row and row count of `rank`'s reducescatter block.
std::pair<int64_t, int64_t> reducescatter_block(int64_t rows, int size, int rank);

}  // namespace hora
