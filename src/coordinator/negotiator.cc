#include "coordinator/negotiator.h"

#include <algorithm>

#include "coordinator/validation.h"
#include "hora/errors.h"

namespace hora {

Negotiator::Negotiator(NegotiatorOptions options)
    : options_(std::move(options)), planner_(options_.fusion_threshold), cache_(options_.cache_capacity) {}

void Negotiator::submit(int rank, Request request) { record(rank, std::move(request), false); }

void Negotiator::submit_cached(int rank, uint32_t slot) { record(rank, cache_.request(slot), true); }

void Negotiator::record(int rank, Request request, bool via_cache) {
  if (rank < 0 || rank >= size())
    throw Internal("request from set rank " + std::to_string(rank) + " outside a set of size " +
                   std::to_string(size()));
  Entry& entry = table_[request.name];
  if (entry.seen.empty()) {
    entry.by_rank.resize(size());
    entry.seen.assign(size(), false);
    entry.via_cache.assign(size(), false);
  }
  if (entry.seen[rank])
    throw Internal("rank " + std::to_string(options_.global_ranks[rank]) + " submitted '" + request.name +
                   "' twice");
  entry.seen[rank] = true;
  entry.via_cache[rank] = via_cache;
  const std::string name = request.name;
  entry.by_rank[rank] = std::move(request);
  if (++entry.count == size()) ready_order_.push_back(name);
}

std::vector<Response> Negotiator::ready() {
  std::vector<Response> responses;
  decided_.clear();
  for (const std::string& name : ready_order_) {
    auto it = table_.find(name);
    responses.push_back(decide(name, it->second));
    decided_[name] = std::move(it->second.by_rank.front());
    table_.erase(it);
  }
  ready_order_.clear();
  if (responses.empty()) return responses;
  std::vector<Response> planned = planner_.plan(std::move(responses), [this](const std::string& n) -> const Request& {
    return decided_.at(n);
  });
  // Members fill their caches in the order of the response stream, which
  // fusion may have changed, so the coordinator fills its cache in that order
  // too: a slot must mean the same request on both sides.
  for (Response& response : planned)
    for (size_t i = 0; i < response.names.size(); ++i)
      if (response.cache[i] && cache_.insert(decided_.at(response.names[i])) < 0) response.cache[i] = 0;
  return planned;
}

Response Negotiator::decide(const std::string& name, Entry& entry) {
  Response response;
  response.op = entry.by_rank.front().op;
  response.names = {name};
  response.error = validate_requests(entry.by_rank, options_.global_ranks, options_.process_set_id);
  response.cache = {0};
  response.slots = {-1};
  if (!response.error.empty()) return response;
  response.sizes = sizes_for(entry);
  const Request& head = entry.by_rank.front();
  if (!ResponseCache::cacheable(head.op)) return response;
  bool all_cached = std::all_of(entry.via_cache.begin(), entry.via_cache.end(), [](bool b) { return b; });
  if (all_cached) {
    response.slots = {cache_.lookup(head)};
  } else if (cache_.lookup(head) < 0 && !cache_.full()) {
    response.cache = {1};  // ready() inserts it, in response-stream order
  }
  return response;
}

std::vector<int64_t> Negotiator::sizes_for(const Entry& entry) const {
  std::vector<int64_t> sizes;
  const OpType op = entry.by_rank.front().op;
  if (op == OpType::kAllgather) {
    for (const Request& q : entry.by_rank) sizes.push_back(q.shape.empty() ? 1 : q.shape.front());
  } else if (op == OpType::kAlltoall) {
    for (const Request& q : entry.by_rank) sizes.insert(sizes.end(), q.splits.begin(), q.splits.end());
  }
  return sizes;
}

std::vector<PendingOp> Negotiator::pending() const {
  std::vector<PendingOp> out;
  for (const auto& [name, entry] : table_) {
    if (entry.count == size()) continue;
    PendingOp op{name, {}, {}};
    for (int r = 0; r < size(); ++r)
      (entry.seen[r] ? op.submitted : op.missing).push_back(options_.global_ranks[r]);
    out.push_back(std::move(op));
  }
  return out;
}

}  // namespace hora
