// The counters of one process set on one rank (Runtime::metrics,
// hvd.metrics() in Python; docs/observability.md).
#pragma once

#include <cstdint>
#include <map>
#include <string>

namespace hora {

struct SetMetrics {
  std::map<std::string, int64_t> ops;     // completed ops by kind ("allreduce", ...)
  std::map<std::string, int64_t> bytes;   // their payload on this rank, by kind
  double negotiation_seconds = 0;         // submission to the start of each op, summed
  double transport_seconds = 0;           // moving and reducing the data, summed
  double wait_for_slowest_seconds = 0;    // coordinator: first to last member's submission, summed
  std::map<int, int64_t> slowest_member;  // coordinator: global rank -> ops it submitted last
  int64_t cache_lookups = 0;              // submissions of cacheable ops
  int64_t cache_hits = 0;                 // ... agreed through the response cache
  int64_t fast_path_hits = 0;             // ... of those, agreed without the coordinator's round trip
  int64_t responses = 0;                  // ops run (a fused allreduce is one)
  int64_t tensors = 0;                    // tensors in them (this rank's own)
  int64_t errors = 0;                     // ops that failed with a mismatch
  int64_t stalls = 0;                     // coordinator: stall warnings
  bool broken = false;
};

}  // namespace hora
