// EngineOptions: what one process set's engine on one rank is told about the
// set (who its members are, its limits), shared read-only by the engine's
// parts.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "telemetry/timeline.h"

namespace hora {

struct EngineOptions {
  int32_t process_set_id = 0;
  std::vector<int> global_ranks;
  int rank = 0;  // this process's rank within the set
  size_t fusion_threshold = 64 << 20;
  size_t cache_capacity = 1024;
  std::chrono::milliseconds timeout{600'000};            // op timeout; 0: none
  std::chrono::milliseconds stall_warning_time{60'000};  // 0: no stall warnings
  std::chrono::milliseconds stall_shutdown_time{0};      // 0: stalls never fail the set
  std::string transport = "local";                       // names the transport's timeline phases
  std::shared_ptr<telemetry::Timeline> timeline;         // null: none
  // The ops of diverged members with nothing submitted or finished fail
  // after this (the set goes on); 0: only the op timeout fails them.
  std::chrono::milliseconds divergence_timeout{60'000};

  int size() const { return static_cast<int>(global_ranks.size()); }
  bool coordinator() const { return rank == 0; }
  // "process set 3 [0, 2] is broken; missing global rank(s) [2]: <reason>".
  std::string broken_message(const std::vector<int>& missing_global, const std::string& reason) const;
  // "process set 3 [0, 2] is closed: <reason>" (a member left it cleanly).
  std::string closed_message(const std::string& reason) const;
  // Why a set closes when set rank `member` says goodbye.
  std::string goodbye_reason(int member) const;
  // The set ranks of those of `global` that are members.
  std::vector<int> set_ranks_of(const std::vector<int>& global) const;
};

}  // namespace hora
