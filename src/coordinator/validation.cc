#include "coordinator/validation.h"

#include <functional>
#include <map>
#include <sstream>

namespace hora {
namespace {

std::string shape_string(const std::vector<int64_t>& dims, size_t from = 0) {
  std::ostringstream out;
  out << "[";
  for (size_t i = from; i < dims.size(); ++i) out << (i > from ? ", " : "") << dims[i];
  out << "]";
  return out.str();
}

std::string number_string(double x) {
  std::ostringstream out;
  out << x;
  return out.str();
}

// Groups ranks by the value `field` gives; appends "<label> differs: v on
// ranks a, b; w on rank c" when there is more than one group.
void compare(const std::vector<Request>& by_rank, const std::vector<int>& global_ranks, const char* label,
             const std::function<std::string(const Request&)>& field, std::vector<std::string>& problems) {
  std::map<std::string, std::vector<int>> groups;
  std::vector<std::string> order;
  for (size_t r = 0; r < by_rank.size(); ++r) {
    std::string value = field(by_rank[r]);
    if (!groups.count(value)) order.push_back(value);
    groups[value].push_back(global_ranks[r]);
  }
  if (groups.size() <= 1) return;
  std::ostringstream out;
  out << label << " differs: ";
  for (size_t g = 0; g < order.size(); ++g) {
    const std::vector<int>& ranks = groups[order[g]];
    out << (g ? "; " : "") << order[g] << " on rank" << (ranks.size() > 1 ? "s " : " ");
    for (size_t i = 0; i < ranks.size(); ++i) out << (i ? ", " : "") << ranks[i];
  }
  problems.push_back(out.str());
}

}  // namespace

std::string validate_requests(const std::vector<Request>& by_rank, const std::vector<int>& global_ranks,
                              int process_set_id) {
  std::vector<std::string> problems;
  compare(by_rank, global_ranks, "op", [](const Request& q) { return std::string(op_type_name(q.op)); },
          problems);
  if (problems.empty()) {
    OpType op = by_rank.front().op;
    if (op != OpType::kBarrier)
      compare(by_rank, global_ranks, "dtype", [](const Request& q) { return std::string(dtype_name(q.dtype)); },
              problems);
    if (op == OpType::kAllreduce || op == OpType::kReducescatter) {
      compare(by_rank, global_ranks, "reduce op",
              [](const Request& q) { return std::string(reduce_op_name(q.reduce_op)); }, problems);
      compare(by_rank, global_ranks, "prescale factor", [](const Request& q) { return number_string(q.prescale); },
              problems);
      compare(by_rank, global_ranks, "postscale factor",
              [](const Request& q) { return number_string(q.postscale); }, problems);
    }
    if (op == OpType::kAllreduce || op == OpType::kReducescatter || op == OpType::kBroadcast)
      compare(by_rank, global_ranks, "shape", [](const Request& q) { return shape_string(q.shape); }, problems);
    if (op == OpType::kAllgather || op == OpType::kAlltoall)
      compare(by_rank, global_ranks, "shape after the first dimension",
              [](const Request& q) { return q.shape.empty() ? std::string("scalar") : shape_string(q.shape, 1); },
              problems);
    if (op == OpType::kAlltoall)
      compare(by_rank, global_ranks, "number of splits",
              [&](const Request& q) {
                return q.splits.size() == global_ranks.size() ? std::string("one per member")
                                                              : std::to_string(q.splits.size());
              },
              problems);
    if (op == OpType::kBroadcast)
      compare(by_rank, global_ranks, "root rank",
              [&](const Request& q) {
                return q.root >= 0 && q.root < static_cast<int>(global_ranks.size())
                           ? std::to_string(global_ranks[q.root])
                           : std::string("invalid");
              },
              problems);
  }
  if (problems.empty()) return "";
  const Request& head = by_rank.front();
  std::ostringstream out;
  out << "Mismatched " << op_type_name(head.op) << " '" << head.name << "' on process set " << process_set_id
      << ": ";
  for (size_t i = 0; i < problems.size(); ++i) out << (i ? ". " : "") << problems[i];
  return out.str();
}

}  // namespace hora
