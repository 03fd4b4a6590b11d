#include "coordinator/fusion_planner.h"

namespace hora {
namespace {

bool fusable(const Response& r) { return r.op == OpType::kAllreduce && r.error.empty(); }

// Adasum fuses only with Adasum (it combines each fused tensor with
// coefficients of its own), as every reduction only with its own kind.
bool same_kind(const Request& a, const Request& b) {
  return a.dtype == b.dtype && a.reduce_op == b.reduce_op && a.prescale == b.prescale &&
         a.postscale == b.postscale;
}

void append(Response& into, Response&& from) {
  into.names.insert(into.names.end(), from.names.begin(), from.names.end());
  into.cache.insert(into.cache.end(), from.cache.begin(), from.cache.end());
  into.slots.insert(into.slots.end(), from.slots.begin(), from.slots.end());
}

}  // namespace

// Greedy, order-preserving: each allreduce joins the first open fused
// response of its kind that still has room, else opens a new one.
std::vector<Response> FusionPlanner::plan(
    std::vector<Response> ready,
    const std::function<const Request&(const std::string&)>& request_of) const {
  std::vector<Response> planned;
  std::vector<size_t> open_bytes;  // per planned response; 0 when not fusable
  for (Response& response : ready) {
    if (!fusable(response)) {
      planned.push_back(std::move(response));
      open_bytes.push_back(0);
      continue;
    }
    const Request& request = request_of(response.names.front());
    size_t bytes = request.byte_size();
    bool placed = false;
    for (size_t i = 0; i < planned.size() && !placed; ++i) {
      if (open_bytes[i] == 0 || !fusable(planned[i])) continue;
      const Request& head = request_of(planned[i].names.front());
      if (!same_kind(head, request) || open_bytes[i] + bytes > threshold_) continue;
      append(planned[i], std::move(response));
      open_bytes[i] += bytes;
      placed = true;
    }
    if (!placed) {
      planned.push_back(std::move(response));
      open_bytes.push_back(bytes == 0 ? 1 : bytes);
    }
  }
  return planned;
}

}  // namespace hora
