#include "coordinator/negotiator.h"

#include <algorithm>

#include "coordinator/validation.h"
#include "hora/errors.h"
#include "hora/process_set.h"

namespace hora {
namespace {

// The ops a joined member can take part in without having submitted them.
bool stand_in_allowed(OpType op) { return op == OpType::kAllreduce || op == OpType::kBarrier; }

const Request& first_submitted(const std::vector<Request>& by_rank, const std::vector<bool>& seen) {
  for (size_t r = 0; r < seen.size(); ++r)
    if (seen[r]) return by_rank[r];
  throw Internal("an op that no member submitted reached the negotiator");
}

}  // namespace

Negotiator::Negotiator(NegotiatorOptions options)
    : options_(std::move(options)),
      planner_(options_.fusion_threshold),
      cache_(options_.cache_capacity),
      joined_(options_.global_ranks.size(), false) {}

void Negotiator::submit(int rank, Request request) { record(rank, std::move(request), false); }

void Negotiator::submit_cached(int rank, uint32_t slot) { record(rank, cache_.request(slot), true); }

void Negotiator::record(int rank, Request request, bool via_cache) {
  if (rank < 0 || rank >= size())
    throw Internal("request from set rank " + std::to_string(rank) + " outside a set of size " +
                   std::to_string(size()));
  const std::string who = "rank " + std::to_string(options_.global_ranks[rank]);
  if (request.op == OpType::kJoin) return join(rank);
  if (joined_[rank])
    throw Internal(who + " submitted '" + request.name + "' after it joined process set " +
                   std::to_string(options_.process_set_id));
  Entry& entry = table_[request.name];
  if (entry.seen.empty()) {
    entry.by_rank.resize(size());
    entry.seen.assign(size(), false);
    entry.via_cache.assign(size(), false);
  }
  if (entry.seen[rank]) throw Internal(who + " submitted '" + request.name + "' twice");
  entry.seen[rank] = true;
  entry.via_cache[rank] = via_cache;
  const std::string name = request.name;
  entry.by_rank[rank] = std::move(request);
  ++entry.count;
  queue_if_complete(name, entry);
}

// Joins set rank `rank`: ops that waited only for it are ready now.
void Negotiator::join(int rank) {
  const int global = options_.global_ranks[rank];
  if (joined_[rank])
    throw Internal("rank " + std::to_string(global) + " joined process set " +
                   std::to_string(options_.process_set_id) + " twice");
  joined_[rank] = true;
  ++joined_count_;
  const bool same_round = last_joined_ >= 0 && last_join_round_ == round_;
  last_joined_ = same_round ? std::max(last_joined_, global) : global;
  last_join_round_ = round_;
  for (auto& [name, entry] : table_) queue_if_complete(name, entry);
}

// Every member that has not joined submitted it, and at least one has not.
bool Negotiator::complete(const Entry& entry) const {
  if (joined_count_ == 0) return entry.count == size();
  if (joined_count_ == size()) return false;
  for (int r = 0; r < size(); ++r)
    if (!joined_[r] && !entry.seen[r]) return false;
  return true;
}

void Negotiator::queue_if_complete(const std::string& name, Entry& entry) {
  if (entry.queued || !complete(entry)) return;
  entry.queued = true;
  ready_order_.push_back(name);
}

std::vector<Response> Negotiator::ready() {
  std::vector<Response> responses;
  std::vector<std::string> stand_ins;  // names some joined member did not submit
  decided_.clear();
  for (const std::string& name : ready_order_) {
    auto it = table_.find(name);
    responses.push_back(decide(name, it->second));
    if (it->second.count < size()) stand_ins.push_back(name);
    decided_[name] = first_submitted(it->second.by_rank, it->second.seen);
    table_.erase(it);
  }
  ready_order_.clear();
  std::vector<Response> planned;
  if (!responses.empty())
    planned = planner_.plan(std::move(responses), [this](const std::string& n) -> const Request& {
      return decided_.at(n);
    });
  // Members fill their caches in the order of the response stream, which
  // fusion may have changed, so the coordinator fills its cache in that order
  // too: a slot must mean the same request on both sides.
  for (Response& response : planned)
    for (size_t i = 0; i < response.names.size(); ++i)
      if (response.cache[i] && cache_.insert(decided_.at(response.names[i])) < 0) response.cache[i] = 0;
  describe_stand_ins(planned, stand_ins);
  if (joined_count_ == size()) planned.push_back(finish_join());
  ++round_;
  return planned;
}

Response Negotiator::decide(const std::string& name, const Entry& entry) const {
  const Request& head = first_submitted(entry.by_rank, entry.seen);
  Response response;
  response.op = head.op;
  response.names = {name};
  response.cache = {0};
  response.slots = {-1};
  const bool everyone = entry.count == size();
  if (everyone) {
    response.error = validate_requests(entry.by_rank, options_.global_ranks, options_.process_set_id);
  } else if (!stand_in_allowed(head.op)) {
    response.error = joined_error(head, entry);
  } else {
    // Allreduce and barrier compare no root or splits, so the submitters
    // alone can be compared.
    std::vector<Request> submitted;
    std::vector<int> ranks;
    for (int r = 0; r < size(); ++r)
      if (entry.seen[r]) {
        submitted.push_back(entry.by_rank[r]);
        ranks.push_back(options_.global_ranks[r]);
      }
    response.error = validate_requests(submitted, ranks, options_.process_set_id);
  }
  if (!response.error.empty()) return response;
  response.sizes = sizes_for(entry);
  if (!ResponseCache::cacheable(head.op)) return response;
  const int32_t slot = cache_.lookup(head);
  bool all_cached = everyone && std::all_of(entry.via_cache.begin(), entry.via_cache.end(), [](bool b) { return b; });
  if (all_cached) {
    response.slots = {slot};
  } else if (slot < 0 && !cache_.full()) {
    response.cache = {1};  // ready() inserts it, in response-stream order
  }
  return response;
}

std::string Negotiator::joined_error(const Request& head, const Entry& entry) const {
  std::vector<int> absent;
  for (int r = 0; r < size(); ++r)
    if (joined_[r] && !entry.seen[r]) absent.push_back(options_.global_ranks[r]);
  return std::string(op_type_name(head.op)) + " '" + head.name + "' on process set " +
         std::to_string(options_.process_set_id) + " cannot run: global rank(s) " + ranks_string(absent) +
         " called join(); while members have joined, only allreduce and barrier run (as in Horovod)";
}

std::vector<int64_t> Negotiator::sizes_for(const Entry& entry) const {
  std::vector<int64_t> sizes;
  const OpType op = first_submitted(entry.by_rank, entry.seen).op;
  if (op == OpType::kAllgather) {
    for (const Request& q : entry.by_rank) sizes.push_back(q.shape.empty() ? 1 : q.shape.front());
  } else if (op == OpType::kAlltoall) {
    for (const Request& q : entry.by_rank) sizes.insert(sizes.end(), q.splits.begin(), q.splits.end());
  }
  return sizes;
}

// A response that a joined member did not submit (in part, when fused)
// carries every request behind it, so that member can build stand-ins.
void Negotiator::describe_stand_ins(std::vector<Response>& planned, const std::vector<std::string>& stand_ins) const {
  if (stand_ins.empty()) return;
  for (Response& response : planned) {
    if (!response.error.empty()) continue;
    bool needed = std::any_of(response.names.begin(), response.names.end(), [&](const std::string& n) {
      return std::find(stand_ins.begin(), stand_ins.end(), n) != stand_ins.end();
    });
    if (!needed) continue;
    response.requests.clear();
    for (const std::string& n : response.names) response.requests.push_back(decided_.at(n));
  }
}

Response Negotiator::finish_join() {
  Response response;
  response.op = OpType::kJoin;
  response.names = {kJoinName};
  response.sizes = {last_joined_};
  response.cache = {0};
  response.slots = {-1};
  joined_.assign(size(), false);
  joined_count_ = 0;
  last_joined_ = -1;
  return response;
}

std::vector<Response> Negotiator::abandon(const std::string& reason) {
  std::vector<Response> out;
  for (auto it = table_.begin(); it != table_.end();) {
    if (it->second.queued) {
      ++it;
      continue;
    }
    const Request& head = first_submitted(it->second.by_rank, it->second.seen);
    Response response;
    response.op = head.op;
    response.names = {it->first};
    response.cache = {0};
    response.slots = {-1};
    response.error = head.describe() + " on process set " + std::to_string(options_.process_set_id) + " " +
                     ranks_string(options_.global_ranks) + " failed: " + reason;
    for (int r = 0; r < size(); ++r)
      if (it->second.seen[r]) response.sizes.push_back(r);
    out.push_back(std::move(response));
    it = table_.erase(it);
  }
  return out;
}

std::vector<PendingOp> Negotiator::pending() const {
  std::vector<PendingOp> out;
  for (const auto& [name, entry] : table_) {
    if (entry.queued) continue;
    PendingOp op{name, {}, {}, {}};
    for (int r = 0; r < size(); ++r) {
      if (entry.seen[r] && op.description.empty()) op.description = entry.by_rank[r].describe();
      if (entry.seen[r]) op.submitted.push_back(options_.global_ranks[r]);
      else if (!joined_[r]) op.missing.push_back(options_.global_ranks[r]);
    }
    out.push_back(std::move(op));
  }
  return out;
}

}  // namespace hora
