#include "telemetry/set_telemetry.h"

#include <algorithm>
#include <cctype>

#include "hora/process_set.h"

namespace hora::telemetry {
namespace {

double seconds_between(Clock::time_point from, Clock::time_point to) {
  return std::chrono::duration<double>(to - from).count();
}

std::string upper(std::string text) {
  for (char& c : text) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return text;
}

bool set(Clock::time_point t) { return t != Clock::time_point{}; }

// A tensor's row, named as Horovod names tensors: "allreduce.grad" (names
// that already start with their op's name, like "allreduce.noname.3", stay).
std::string row_of(OpType op, const std::string& name) {
  const std::string prefix = std::string(op_type_name(op)) + ".";
  return name.compare(0, prefix.size(), prefix) == 0 ? name : prefix + name;
}

}  // namespace

std::string phase_name(OpType op) { return upper(op_type_name(op)); }

SetTelemetry::SetTelemetry(int32_t set_id, std::vector<int> global_ranks, int set_rank,
                           std::shared_ptr<Timeline> timeline)
    : set_id_(set_id),
      global_ranks_(std::move(global_ranks)),
      set_rank_(set_rank),
      timeline_(std::move(timeline)),
      coordinator_(set_rank == 0) {}

SetTelemetry::~SetTelemetry() {
  if (coordinator_ && timeline_) timeline_->unregister_set(set_id_);
}

void SetTelemetry::connected(const std::string& transport) {
  transport_ = upper(transport);
  if (coordinator_ && timeline_)
    timeline_->register_set(set_id_, "process set " + std::to_string(set_id_) + " " + ranks_string(global_ranks_));
}

void SetTelemetry::instant(const std::string& row, const std::string& name, Clock::time_point at, std::string args) {
  timeline_->record({'i', set_id_, row, name, timeline_us(at), 0, std::move(args)});
}

void SetTelemetry::span(const std::string& row, const std::string& name, Clock::time_point from,
                        Clock::time_point to, std::string args) {
  const int64_t begin = timeline_us(from);
  timeline_->record({'X', set_id_, row, name, begin, std::max<int64_t>(timeline_us(to) - begin, 0), std::move(args)});
}

void SetTelemetry::submitted(const std::string& name, OpType op, int set_rank, Clock::time_point now) {
  Negotiation& n = negotiating_[name];
  if (n.submitters == 0) {
    n.op = op;
    n.first = now;
  }
  n.last = now;
  n.last_rank = set_rank;
  ++n.submitters;
  if (timeline_on()) instant(row_of(op, name), std::to_string(global_ranks_.at(static_cast<size_t>(set_rank))), now);
}

void SetTelemetry::agreed(const std::string& name, bool fused_with_others, Clock::time_point now) {
  auto it = negotiating_.find(name);
  if (it == negotiating_.end()) return;
  const Negotiation n = it->second;
  negotiating_.erase(it);
  const int slowest = global_ranks_.at(static_cast<size_t>(std::max(n.last_rank, 0)));
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (n.submitters > 1) {
      metrics_.wait_for_slowest_seconds += seconds_between(n.first, n.last);
      ++metrics_.slowest_member[slowest];
    }
    if (timeline_on()) agreed_[name] = now;
  }
  if (timeline_on())
    span(row_of(n.op, name), "NEGOTIATE_" + phase_name(n.op), n.first, now,
         "\"slowest_rank\": " + std::to_string(slowest) + ", \"fused\": " + (fused_with_others ? "true" : "false"));
}

void SetTelemetry::cache_lookup(bool hit, bool fast_path) {
  std::lock_guard<std::mutex> lock(mutex_);
  ++metrics_.cache_lookups;
  if (hit) ++metrics_.cache_hits;
  if (fast_path) ++metrics_.fast_path_hits;
}

void SetTelemetry::executed(OpType op, const std::vector<RunTensor>& tensors, const OpTimes& times) {
  const auto kind = static_cast<size_t>(op);
  const bool fused = set(times.packed) && set(times.transported);
  const bool recording = timeline_on();
  std::vector<Clock::time_point> agreed;
  if (recording) agreed.resize(tensors.size());
  {
    std::lock_guard<std::mutex> lock(mutex_);
    ++metrics_.responses;
    for (size_t i = 0; i < tensors.size(); ++i) {
      const RunTensor& t = tensors[i];
      if (!t.own) continue;
      ++metrics_.tensors;
      ++ops_[kind];
      bytes_[kind] += static_cast<int64_t>(t.bytes);
      if (set(t.submitted)) metrics_.negotiation_seconds += seconds_between(t.submitted, times.start);
      if (agreed_.empty()) continue;
      if (auto it = agreed_.find(*t.name); it != agreed_.end()) {
        if (recording) agreed[i] = it->second;
        agreed_.erase(it);
      }
    }
    metrics_.transport_seconds +=
        fused ? seconds_between(times.packed, times.transported) : seconds_between(times.start, times.end);
  }
  if (!recording) return;
  std::string names;
  for (const RunTensor& t : tensors)
    names += (names.empty() ? "\"" : ", \"") + json_escaped(row_of(op, *t.name)) + "\"";
  const std::string phase = phase_name(op);
  for (size_t i = 0; i < tensors.size(); ++i) {
    const RunTensor& t = tensors[i];
    const std::string row = row_of(op, *t.name);
    if (t.lane) {
      instant(row, "CACHE_HIT", t.submitted);
      if (set(t.submitted)) span(row, "NEGOTIATE_" + phase, t.submitted, times.start, "\"cache_hit\": true");
    }
    if (set(agreed[i]) && agreed[i] < times.start) span(row, "QUEUE", agreed[i], times.start);
    std::string args = "\"bytes\": " + std::to_string(t.bytes);
    if (tensors.size() > 1) args += ", \"fused_with\": [" + names + "]";
    if (!t.own) args += ", \"stand_in\": true";
    span(row, phase, times.start, times.end, args);
    if (fused) {
      span(row, "MEMCPY_IN_FUSION_BUFFER", times.start, times.packed);
      span(row, transport_ + "_" + phase, times.packed, times.transported);
      span(row, "MEMCPY_OUT_FUSION_BUFFER", times.transported, times.end);
    } else {
      span(row, transport_ + "_" + phase, times.start, times.end);
    }
  }
}

void SetTelemetry::failed(OpType op, const std::vector<std::string>& names, const std::string& error) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    metrics_.errors += static_cast<int64_t>(names.size());
    for (const std::string& name : names) agreed_.erase(name);
  }
  if (!timeline_on()) return;
  const auto now = Clock::now();
  for (const std::string& name : names)
    instant(row_of(op, name), "ERROR", now, "\"op\": \"" + std::string(op_type_name(op)) + "\", \"message\": \"" +
                                    json_escaped(error) + "\"");
}

void SetTelemetry::stall(const std::string& warning) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    ++metrics_.stalls;
  }
  if (timeline_on()) instant("", "STALL", Clock::now(), "\"warning\": \"" + json_escaped(warning) + "\"");
}

void SetTelemetry::broken(const std::string& reason) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    metrics_.broken = true;
  }
  if (timeline_on()) instant("", "SET_BROKEN", Clock::now(), "\"reason\": \"" + json_escaped(reason) + "\"");
}

void SetTelemetry::closed(const std::string& reason) {
  if (timeline_on()) instant("", "SET_CLOSED", Clock::now(), "\"reason\": \"" + json_escaped(reason) + "\"");
}

void SetTelemetry::cycle() {
  if (timeline_on() && timeline_->mark_cycles()) instant("", "CYCLE_START", Clock::now());
}

SetMetrics SetTelemetry::metrics() const {
  std::lock_guard<std::mutex> lock(mutex_);
  SetMetrics out = metrics_;
  for (int op = 0; op < kNumOpTypes; ++op) {
    if (ops_[op] == 0) continue;
    const char* kind = op_type_name(static_cast<OpType>(op));
    out.ops[kind] = ops_[op];
    out.bytes[kind] = bytes_[op];
  }
  return out;
}

}  // namespace hora::telemetry
