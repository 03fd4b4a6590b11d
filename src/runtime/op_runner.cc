#include "runtime/op_runner.h"

#include <algorithm>
#include <cstring>

#include "hora/errors.h"
#include "runtime/progress_pool.h"

namespace hora {

void OpRunner::run(Backend& data, const Response& response, std::vector<TensorEntry>& entries) {
  zero_stand_ins(entries);
  telemetry::OpTimes times;
  times.start = Clock::now();
  last_run_.store(times.start.time_since_epoch().count());
  {
    // Other sets' runs go on meanwhile (once it sleeps, where the data
    // plane says when).
    ProgressPool::BlockingScope blocking(data.notices_sleep());
    run_collective(data, response, entries, times);
  }
  times.end = Clock::now();
  last_run_.store(times.end.time_since_epoch().count());
  run_tensors_.clear();
  for (const TensorEntry& entry : entries)
    run_tensors_.push_back(
        {&entry.request.name, entry.request.byte_size(), entry.submitted, !entry.stand_in, entry.lane});
  telemetry_.executed(response.op, run_tensors_, times);
}

// Stand-ins read zeros and write into the same scratch memory: a fused
// allreduce packs every input before it unpacks any output.
void OpRunner::zero_stand_ins(std::vector<TensorEntry>& entries) {
  size_t bytes = 0;
  for (const TensorEntry& entry : entries)
    if (entry.stand_in) bytes = std::max(bytes, entry.request.byte_size());
  if (bytes == 0) return;
  std::byte* zeros = stand_in_zeros_.reserve(bytes);
  std::memset(zeros, 0, bytes);
  for (TensorEntry& entry : entries) {
    if (!entry.stand_in) continue;
    entry.input = TensorView{zeros, entry.request.dtype, entry.request.shape};
    entry.output = entry.input;
  }
}

void OpRunner::run_collective(Backend& data, const Response& response, std::vector<TensorEntry>& entries,
                              telemetry::OpTimes& times) {
  const Request& head = entries.front().request;
  AllreduceOptions options{head.dtype, head.reduce_op, head.prescale, head.postscale};
  switch (response.op) {
    case OpType::kAllreduce: {
      std::vector<AllreducePart> parts;
      for (TensorEntry& entry : entries) parts.push_back({entry.input, entry.output});
      FusionTimes fusion_times;
      allreduce(data, parts, options, fusion_, &fusion_times);
      times.packed = fusion_times.packed;
      times.transported = fusion_times.reduced;
      return;
    }
    case OpType::kAllgather:
      allgather(data, entries.front().input, response.sizes, *entries.front().work);
      return;
    case OpType::kBroadcast:
      broadcast(data, entries.front().input, entries.front().output, head.root);
      return;
    case OpType::kAlltoall:
      alltoall(data, entries.front().input, response.sizes, *entries.front().work);
      return;
    case OpType::kReducescatter:
      reducescatter(data, entries.front().input, entries.front().output, options, fusion_);
      return;
    case OpType::kBarrier:
      if (data.size() > 1) data.barrier();
      return;
    case OpType::kJoin:
      break;  // the executor completes joins
  }
  throw Internal("unknown op type in response");
}

}  // namespace hora
