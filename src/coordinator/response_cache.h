// ResponseCache: lets a repeated op (same name and fields every step) be
// agreed by exchanging slot bits instead of full requests.
//
// Every member and the coordinator keep one per process set and insert into
// it in the order of the response stream, which all of them see identically,
// so a slot means the same request everywhere. Slots are append-only: once
// the capacity is reached nothing more is cached, so a slot is never reused
// and a member's cache is always a prefix of the coordinator's. Only ops
// whose request is identical on every member are cached (allreduce,
// broadcast, reducescatter, barrier; never join). Not thread-safe: one engine thread.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "coordinator/request.h"

namespace hora {

class ResponseCache {
 public:
  explicit ResponseCache(size_t capacity) : capacity_(capacity) {}

  static bool cacheable(OpType op) {
    return op != OpType::kAllgather && op != OpType::kAlltoall && op != OpType::kJoin;
  }

  // The slot holding a request equal to `q`, or -1.
  int32_t lookup(const Request& q) const;
  // The slot holding a request named `name`, or -1.
  int32_t slot_of(const std::string& name) const {
    auto it = slot_by_name_.find(name);
    return it == slot_by_name_.end() ? -1 : static_cast<int32_t>(it->second);
  }
  // Stores `q` under the next slot; returns it, or -1 when full.
  int32_t insert(const Request& q);
  bool full() const { return slots_.size() >= capacity_; }
  // The request stored at `slot`; throws Internal for a slot never filled.
  const Request& request(uint32_t slot) const;
  size_t size() const { return slots_.size(); }

 private:
  size_t capacity_;
  std::vector<Request> slots_;
  std::unordered_map<std::string, uint32_t> slot_by_name_;
};

}  // namespace hora
