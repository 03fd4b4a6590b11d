// OpRunner: runs one agreed op's collective over a set's data plane and
// tells telemetry when it ran. Called only by the thread that holds the
// set's executor role (Executor); blocks for the collective. Owns the
// fusion buffer and the stand-ins' zeros; last_run() may be read by any
// thread.
#pragma once

#include <atomic>
#include <chrono>
#include <vector>

#include "collectives/collectives.h"
#include "coordinator/tensor_queue.h"
#include "coordinator/wire.h"
#include "telemetry/set_telemetry.h"
#include "transport/backend.h"

namespace hora {

class OpRunner {
 public:
  using Clock = std::chrono::steady_clock;

  explicit OpRunner(telemetry::SetTelemetry& telemetry) : telemetry_(telemetry) {}

  // Runs `op` (with the sizes `response` carries) on `entries`, stand-ins
  // reading zeros; notes when this rank ran. Not for joins.
  void run(Backend& data, const Response& response, std::vector<TensorEntry>& entries);
  // When this rank last started or finished running an op on the set.
  Clock::time_point last_run() const { return Clock::time_point(Clock::duration(last_run_.load())); }

 private:
  void zero_stand_ins(std::vector<TensorEntry>& entries);
  void run_collective(Backend& data, const Response& response, std::vector<TensorEntry>& entries,
                      telemetry::OpTimes& times);

  telemetry::SetTelemetry& telemetry_;
  FusionBuffer fusion_;
  FusionBuffer stand_in_zeros_;  // a joined member's inputs and outputs
  std::vector<telemetry::RunTensor> run_tensors_;
  std::atomic<Clock::rep> last_run_{0};
};

}  // namespace hora
