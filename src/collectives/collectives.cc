#include "collectives/collectives.h"

#include <cstring>

#include "collectives/adasum.h"
#include "core/reduce.h"
#include "hora/errors.h"

namespace hora {
namespace {

size_t row_bytes(const TensorView& t) {
  size_t bytes = dtype_size(t.dtype);
  for (size_t i = 1; i < t.shape.size(); ++i) bytes *= static_cast<size_t>(t.shape[i]);
  return bytes;
}

// Sum-like reduction the Backend runs: Average travels as Sum.
ReduceOp wire_op(ReduceOp op) { return op == ReduceOp::kAverage ? ReduceOp::kSum : op; }

double final_scale(const AllreduceOptions& options, int size) {
  return options.op == ReduceOp::kAverage ? options.postscale / size : options.postscale;
}

// Scales, reduces across the set, scales again. `counts` are the element
// counts of the tensors packed in `data`; `scratch` is the Adasum's
// (adasum_scratch_bytes), unused by the other reductions.
void reduce_in_place(Backend& backend, std::byte* data, const std::vector<size_t>& counts,
                     const AllreduceOptions& options, std::byte* scratch) {
  size_t count = 0;
  for (size_t c : counts) count += c;
  if (options.prescale != 1.0) scale_buffer(data, count, options.dtype, options.prescale);
  if (options.op == ReduceOp::kAdasum) {
    adasum_in_place(backend, data, counts, options.dtype, scratch);
  } else if (backend.size() > 1) {
    backend.allreduce(data, count, options.dtype, wire_op(options.op));
  }
  double scale = final_scale(options, backend.size());
  if (scale != 1.0) scale_buffer(data, count, options.dtype, scale);
}

size_t scratch_bytes(const AllreduceOptions& options, size_t count) {
  return options.op == ReduceOp::kAdasum ? adasum_scratch_bytes(count, options.dtype) : 0;
}

}  // namespace

std::byte* FusionBuffer::reserve(size_t bytes) {
  if (bytes_.size() < bytes) bytes_.resize(bytes);
  return bytes_.data();
}

void allreduce(Backend& backend, const std::vector<AllreducePart>& parts, const AllreduceOptions& options,
               FusionBuffer& fusion, FusionTimes* times) {
  std::vector<size_t> counts;
  size_t total = 0;
  for (const AllreducePart& part : parts) {
    counts.push_back(static_cast<size_t>(part.input.num_elements()));
    total += part.input.byte_size();
  }
  const size_t scratch = scratch_bytes(options, total / dtype_size(options.dtype));
  if (parts.size() == 1) {
    const AllreducePart& part = parts.front();
    if (part.output.data != part.input.data) std::memcpy(part.output.data, part.input.data, part.input.byte_size());
    reduce_in_place(backend, static_cast<std::byte*>(part.output.data), counts, options,
                    scratch > 0 ? fusion.reserve(scratch) : nullptr);
    return;
  }
  // Fused: pack every input into the fusion buffer (the scratch space follows
  // it, aligned for any element type), reduce once, unpack.
  const size_t packed_bytes = (total + 15) / 16 * 16;
  std::byte* packed = fusion.reserve(packed_bytes + scratch);
  size_t offset = 0;
  for (const AllreducePart& part : parts) {
    std::memcpy(packed + offset, part.input.data, part.input.byte_size());
    offset += part.input.byte_size();
  }
  if (times) times->packed = std::chrono::steady_clock::now();
  reduce_in_place(backend, packed, counts, options, packed + packed_bytes);
  if (times) times->reduced = std::chrono::steady_clock::now();
  offset = 0;
  for (const AllreducePart& part : parts) {
    std::memcpy(part.output.data, packed + offset, part.input.byte_size());
    offset += part.input.byte_size();
  }
}

void allgather(Backend& backend, const TensorView& input, const std::vector<int64_t>& first_dims, Work& work) {
  const size_t row = row_bytes(input);
  std::vector<size_t> recv_bytes;
  int64_t rows = 0;
  for (int64_t d : first_dims) {
    recv_bytes.push_back(static_cast<size_t>(d) * row);
    rows += d;
  }
  std::vector<int64_t> shape = input.shape;
  if (shape.empty()) shape = {rows};
  else shape[0] = rows;
  std::byte* out = work.allocate_output(static_cast<size_t>(rows) * row, shape);
  if (backend.size() == 1) {
    std::memcpy(out, input.data, recv_bytes.front());
    return;
  }
  backend.allgatherv(input.data, out, recv_bytes);
}

void broadcast(Backend& backend, const TensorView& input, const TensorView& output, int root) {
  if (output.data != input.data) std::memcpy(output.data, input.data, input.byte_size());
  if (backend.size() > 1) backend.broadcast(output.data, output.byte_size(), root);
}

void alltoall(Backend& backend, const TensorView& input, const std::vector<int64_t>& matrix, Work& work) {
  const int n = backend.size();
  const int me = backend.rank();
  const size_t row = row_bytes(input);
  std::vector<size_t> send_bytes(n), recv_bytes(n);
  std::vector<int64_t> received(n);
  int64_t rows = 0;
  for (int peer = 0; peer < n; ++peer) {
    send_bytes[peer] = static_cast<size_t>(matrix[me * n + peer]) * row;
    received[peer] = matrix[peer * n + me];
    recv_bytes[peer] = static_cast<size_t>(received[peer]) * row;
    rows += received[peer];
  }
  std::vector<int64_t> shape = input.shape;
  shape[0] = rows;
  std::byte* out = work.allocate_output(static_cast<size_t>(rows) * row, shape);
  if (n == 1) std::memcpy(out, input.data, recv_bytes.front());
  else backend.alltoallv(input.data, send_bytes, out, recv_bytes);
  work.set_received_splits(std::move(received));
}

std::pair<int64_t, int64_t> reducescatter_block(int64_t rows, int size, int rank) {
  int64_t base = rows / size;
  int64_t extra = rows % size;
  int64_t count = base + (rank < extra ? 1 : 0);
  int64_t first = rank * base + std::min<int64_t>(rank, extra);
  return {first, count};
}

void reducescatter(Backend& backend, const TensorView& input, const TensorView& output,
                   const AllreduceOptions& options, FusionBuffer& fusion) {
  if (options.op == ReduceOp::kAdasum) throw InvalidArgument("reducescatter does not support the Adasum reduction");
  const size_t total = input.byte_size();
  std::byte* staged = fusion.reserve(total);
  std::memcpy(staged, input.data, total);
  reduce_in_place(backend, staged, {static_cast<size_t>(input.num_elements())}, options, nullptr);
  auto [first, count] = reducescatter_block(input.shape.empty() ? 1 : input.shape[0], backend.size(), backend.rank());
  const size_t row = row_bytes(input);
  std::memcpy(output.data, staged + static_cast<size_t>(first) * row, static_cast<size_t>(count) * row);
}

}  // namespace hora
