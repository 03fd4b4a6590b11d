// TensorQueue: the ops one rank has submitted to one process set and that
// have not run yet. Front-end threads push; the set's engine thread takes the
// new requests to negotiate and, once agreed, the entries to run.
// Thread-safe; never blocks beyond its mutex.
#pragma once

#include <chrono>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "coordinator/request.h"
#include "hora/tensor_view.h"
#include "hora/work.h"

namespace hora {

struct TensorEntry {
  Request request;
  TensorView input;
  TensorView output;  // caller memory for allreduce, broadcast, reducescatter
  std::shared_ptr<Work> work;
  std::chrono::steady_clock::time_point submitted{};
  bool stand_in = false;  // a joined member's share of an op it did not submit
  bool lane = false;      // submitted through the fast lane (agreed there, not negotiated)
};

class TensorQueue {
 public:
  // Throws InvalidArgument when an op of the same name is still pending.
  // `negotiate` false: the entry is agreed elsewhere (the fast lane) and
  // take_new() never returns it.
  void push(TensorEntry entry, bool negotiate = true);
  // Requests pushed since the last call, in push order.
  std::vector<Request> take_new();
  // Removes and returns the pending entry `name`; throws Internal if absent.
  TensorEntry take(const std::string& name);
  // The same, or nullopt when `name` is not pending.
  std::optional<TensorEntry> try_take(const std::string& name);
  // Removes and returns every pending entry.
  std::vector<TensorEntry> take_all();
  bool empty() const;
  // When the longest-pending entry was submitted; nullopt when none is. A
  // join is not counted: it waits as long as the other members keep working.
  std::optional<std::chrono::steady_clock::time_point> oldest_submission() const;

 private:
  mutable std::mutex mutex_;
  std::unordered_map<std::string, TensorEntry> pending_;
  std::vector<std::string> fresh_;
};

}  // namespace hora
