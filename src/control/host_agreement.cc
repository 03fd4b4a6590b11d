#include "control/host_agreement.h"

#include <algorithm>
#include <string>
#include <utility>

#include "core/reduce.h"
#include "hora/errors.h"

namespace hora::control {

using Kind = AgreementMessage::Kind;

namespace {

const std::vector<int>& host_members(const HostAgreement::Hosts& hosts, int rank) {
  for (const std::vector<int>& members : hosts)
    if (std::find(members.begin(), members.end(), rank) != members.end()) return members;
  throw Internal("host agreement: set rank " + std::to_string(rank) + " is on none of the hosts");
}

}  // namespace

HostAgreement::HostAgreement(shm::FastLane& lane, bool lane_carries, Hosts hosts, int rank, Send send,
                             std::function<void()> wake_engine, std::chrono::nanoseconds spin)
    : lane_(lane),
      lane_carries_(lane_carries),
      hosts_(std::move(hosts)),
      rank_(rank),
      host_(host_of(rank)),
      locals_(host_members(hosts_, rank)),
      leader_(locals_.front() == rank),
      send_(std::move(send)),
      wake_engine_(wake_engine),
      reductions_(shm::kCarriedRows) {
  if (hosts_.size() < 2 || hosts_.front().empty() || hosts_.front().front() != 0)
    throw Internal("host agreement: " + std::to_string(hosts_.size()) + " hosts, the first without set rank 0");
  for (const std::vector<int>& members : hosts_)
    if (members.empty() || !std::is_sorted(members.begin(), members.end()))
      throw Internal("host agreement: a host's set ranks are not ascending");
  if (leader_) {
    stream_ = std::make_unique<StreamAgreement>(
        host_, static_cast<int>(hosts_.size()),
        [this](int to, const std::vector<uint8_t>& bytes) { send_(leader_of(to), bytes); }, std::move(wake_engine),
        spin);
  }
}

int HostAgreement::host_of(int rank) const {
  for (size_t host = 0; host < hosts_.size(); ++host)
    if (std::find(hosts_[host].begin(), hosts_[host].end(), rank) != hosts_[host].end()) return static_cast<int>(host);
  throw Internal("host agreement: set rank " + std::to_string(rank) + " is on none of the hosts");
}

size_t HostAgreement::max_carried_bytes() const {
  return lane_carries_ && hosts_.size() <= static_cast<size_t>(StreamAgreement::kMaxCarryingMembers)
             ? kMaxCarriedBytes
             : 0;
}

void HostAgreement::send_to(int rank, const AgreementMessage& message) const {
  try {
    send_(rank, encode(message));
  } catch (const std::exception&) {
    // The connection broke: the engine thread finds its closure and fails
    // the set.
  }
}

void HostAgreement::send_to_leaders(const AgreementMessage& message) const {
  for (size_t host = 1; host < hosts_.size(); ++host) send_to(leader_of(static_cast<int>(host)), message);
}

Agreement::Outcome HostAgreement::submit_carrying(uint32_t slot, std::vector<uint8_t> data, Reduction how) {
  if (slot >= rows()) throw Internal("a submission names cache slot " + std::to_string(slot));
  if (data.size() > max_carried_bytes()) data.clear();
  lane_.write_input(slot, data);
  if (leader_ && slot < reductions_.size()) {
    std::lock_guard<std::mutex> lock(mutex_);
    reductions_[slot] = how;
  }
  // The leader counts the host's instance before its bit can complete it.
  if (leader_) stream_->took_part(slot);
  const shm::FastLane::Outcome outcome = lane_.submit(slot);
  if (leader_ && outcome != shm::FastLane::Outcome::kWaiting) attend();
  switch (outcome) {
    case shm::FastLane::Outcome::kWaiting:
      return Outcome::kWaiting;
    case shm::FastLane::Outcome::kCompleted:
      return Outcome::kWaiting;  // appended once the other hosts' records are in
    case shm::FastLane::Outcome::kDiverted:
      return Outcome::kDiverted;
    case shm::FastLane::Outcome::kAppended:
      break;
  }
  throw Internal("a host's lane appended a row itself");
}

// The host's inputs of the op in `slot` reduced in set-rank order, or none
// unless every member carried one of the same size.
std::vector<uint8_t> HostAgreement::host_sum(uint32_t slot) const {
  std::vector<uint8_t> sum = lane_.input(slot, 0);
  if (sum.empty()) return {};
  for (size_t local = 1; local < locals_.size(); ++local) {
    const std::vector<uint8_t> input = lane_.input(slot, static_cast<int>(local));
    if (input.size() != sum.size()) return {};
    reduce(slot, sum, input);
  }
  return sum;
}

void HostAgreement::reduce(uint32_t slot, std::vector<uint8_t>& into, const std::vector<uint8_t>& from) const {
  Reduction how;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    how = reductions_.at(slot);
  }
  const size_t element = dtype_size(how.dtype);
  if (from.size() != into.size() || into.size() % element != 0)
    throw Internal("host agreement: carried inputs of " + std::to_string(into.size()) + " and " +
                   std::to_string(from.size()) + " bytes in cache slot " + std::to_string(slot));
  reduce_into(into.data(), from.data(), into.size() / element, how.dtype, how.op);
}

void HostAgreement::wait_for_entry(uint64_t index, const std::function<bool()>& give_up) const {
  if (!leader_) return lane_.wait_for_entry(index, give_up);
  // The leader's caller does the leader's work while it waits: a row its
  // host completed goes out from here, without waking the engine thread.
  lane_.wait_for_entry(index, [&] {
    if (lane_.leader_attention()) serve_host();
    return give_up();
  });
  // Rung while the entry came in: what rang it is still this caller's.
  if (lane_.leader_attention()) serve_host();
}

bool HostAgreement::look(const std::function<bool()>& ready, std::chrono::nanoseconds look) const {
  const bool found = lane_.look(ready, look);
  // A row completed after the last look rang the bell of a looker that
  // had stopped looking: this caller's still.
  if (lane_.leader_attention()) serve_host();
  return found;
}

// An engine that starts watching the log looks once more: an entry the
// leader appended just before rang nobody.
void HostAgreement::watch(uint32_t who, bool on) {
  lane_.watch(who, on);
  if (on && (who & kEngine) && lane_.entry_waiting()) wake_engine_();
}

void HostAgreement::serve_host() const {
  if (!leader_) return;
  // The rows the host completed go out as its records (each taken once:
  // the lane's marks are exchanged), outside attend_: the coordinator's
  // diversions take attend_ while the engine holds the stream's lock.
  for (uint32_t slot : lane_.take_completed()) stream_->submit_counted(slot, host_sum(slot));
  {
    std::lock_guard<std::mutex> attending(attend_);
    if (lane_.take_drain_request()) {
      std::vector<uint32_t> diverted;
      {
        std::lock_guard<std::mutex> lock(mutex_);
        diverted.assign(diverted_rows_.begin(), diverted_rows_.end());
      }
      for (uint32_t slot : diverted) hand_over(slot, lane_.divert(slot), 1);
    }
  }
  pump();
}

void HostAgreement::hand_over(uint32_t slot, const std::vector<int>& local_members, uint32_t round) const {
  if (local_members.empty()) return;
  if (rank_ == 0) {
    std::lock_guard<std::mutex> lock(mutex_);
    std::vector<int>& handed = handed_[slot];
    for (int local : local_members) handed.push_back(locals_[static_cast<size_t>(local)]);
    drain_request_ = true;
    wake_engine_();  // the coordinator's engine collects them
    return;
  }
  for (int local : local_members)
    send_to(0, AgreementMessage{Kind::kHanded, slot, round, locals_[static_cast<size_t>(local)], {}});
}

// Appends the entries the leaders agreed since the last call to the host's
// lane, each carried op's sum written first.
void HostAgreement::pump() const {
  std::lock_guard<std::mutex> lock(pump_);
  for (; auto entry = stream_->entry(pumped_); ++pumped_) {
    if (entry->response) {
      lane_.append_response();
    } else if (entry->carried) {
      const Carried& sums = *entry->carried;
      std::vector<uint8_t> total = sums.front();
      for (size_t host = 1; host < sums.size(); ++host) reduce(entry->slot, total, sums[host]);
      lane_.write_result(entry->slot, total);
      lane_.append_slot(entry->slot, true);
    } else {
      lane_.append_slot(entry->slot, false);
    }
    stream_->set_consumed(pumped_ + 1);
  }
}

std::optional<Agreement::Entry> HostAgreement::entry(uint64_t index) const {
  const std::optional<shm::FastLane::Entry> entry = lane_.entry(index);
  if (!entry) return std::nullopt;
  Entry out{entry->response, entry->slot, nullptr};
  if (entry->carried) out.carried = std::make_shared<const Carried>(Carried{lane_.result(entry->slot)});
  return out;
}

void HostAgreement::response_received() {
  if (!leader_) return;  // the leader appends it to the host's log
  stream_->response_received();
  pump();
}

void HostAgreement::append_response() {
  stream_->append_response();
  pump();
}

void HostAgreement::in_order(const std::function<void()>& publish) { stream_->in_order(publish); }

void HostAgreement::took_part(uint32_t slot) {
  if (leader_ && slot < rows()) stream_->took_part(slot);
}

void HostAgreement::divert_remote_rows(uint32_t slot, Remote& remote) const {
  remote.state = Remote::State::kDiverted;
  remote.acks = 0;
  send_to_leaders(AgreementMessage{Kind::kDivertHost, slot, ++remote.round, 0, {}});
}

// Called again and again while the slot stays diverted (to collect what
// landed in it): the other hosts' rows are diverted the first time, again
// for a new reason (divert_anew()), and again when a host's members came
// in part (bits, not a whole host's record) while the rows were being given
// back: the rest of those members' submissions must come to the
// negotiator too, not wait in a row given back.
std::vector<int> HostAgreement::divert(uint32_t slot) {
  if (rank_ != 0) throw Internal("host agreement: set rank " + std::to_string(rank_) + " diverted an op");
  std::vector<int> handed;
  // The stream's lock first (the engine may hold it already, publishing
  // responses), then attend_.
  stream_->in_order([&] { handed = divert_locked(slot); });
  return handed;
}

std::vector<int> HostAgreement::divert_locked(uint32_t slot) {
  std::lock_guard<std::mutex> attending(attend_);
  std::vector<int> handed;
  for (int host : stream_->divert(slot))
    handed.insert(handed.end(), hosts_[static_cast<size_t>(host)].begin(), hosts_[static_cast<size_t>(host)].end());
  {
    std::lock_guard<std::mutex> lock(mutex_);
    diverted_rows_.insert(slot);
  }
  const std::vector<int> bits = lane_.divert(slot);
  std::lock_guard<std::mutex> lock(mutex_);
  for (int local : bits) handed.push_back(locals_[static_cast<size_t>(local)]);
  // Only another host's members handed over one by one take its rows back:
  // this host's row stays diverted until the last step of the give-back
  // (try_undivert), so its members come as bits all along and strand
  // nobody; counting them would take the other rows back at every
  // instance, and the slot would never return.
  bool in_part = false;
  auto held = handed_.find(slot);
  if (held != handed_.end()) {
    for (int member : held->second) in_part |= host_of(member) != host_;
    handed.insert(handed.end(), held->second.begin(), held->second.end());
    handed_.erase(held);
  }
  auto remote = remote_.find(slot);
  if (remote == remote_.end()) divert_remote_rows(slot, remote_[slot]);
  else if (in_part && remote->second.state != Remote::State::kDiverted) divert_remote_rows(slot, remote->second);
  std::sort(handed.begin(), handed.end());
  handed.erase(std::unique(handed.begin(), handed.end()), handed.end());
  return handed;
}

void HostAgreement::divert_anew(uint32_t slot) {
  if (rank_ != 0) return;
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = remote_.find(slot);
  if (it != remote_.end() && it->second.state != Remote::State::kDiverted) divert_remote_rows(slot, it->second);
}

// Once a leader may have given its row back (it was asked), that row's
// members submit there, where rank 0 does not see them.
bool HostAgreement::partly_given_back(uint32_t slot) const {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = remote_.find(slot);
  return it != remote_.end() && it->second.state != Remote::State::kDiverted;
}

// In steps: the other hosts' leaders are asked to give their rows back
// (false until every one has acknowledged), then this host's row and the
// stream's own are given back.
bool HostAgreement::try_undivert(uint32_t slot) {
  if (rank_ != 0) throw Internal("host agreement: set rank " + std::to_string(rank_) + " gave an op back");
  std::lock_guard<std::mutex> attending(attend_);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (handed_.count(slot) != 0) return false;
    auto it = remote_.find(slot);
    if (it != remote_.end() && it->second.state == Remote::State::kDiverted) {
      it->second.state = Remote::State::kQuerying;
      it->second.acks = 0;
      send_to_leaders(AgreementMessage{Kind::kUndivertQuery, slot, ++it->second.round, 0, {}});
      return false;
    }
    if (it != remote_.end() && it->second.state == Remote::State::kQuerying) return false;
  }
  // A submission into a row given back reaches this diverted slot as a
  // host's record, which the stream hands over.
  if (!lane_.try_undivert(slot)) return false;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    diverted_rows_.erase(slot);
  }
  if (!stream_->try_undivert(slot)) return false;
  std::lock_guard<std::mutex> lock(mutex_);
  remote_.erase(slot);
  return true;
}

bool HostAgreement::drain_requested() const {
  if (stream_ && stream_->drain_requested()) return true;
  std::lock_guard<std::mutex> lock(mutex_);
  return drain_request_;
}

bool HostAgreement::take_drain_request() {
  bool drain = stream_->take_drain_request();
  drain = lane_.take_drain_request() || drain;
  std::lock_guard<std::mutex> lock(mutex_);
  return std::exchange(drain_request_, false) || drain;
}

Agreement::RowState HostAgreement::row_state(uint32_t slot) const {
  RowState state;
  if (slot >= rows()) return state;
  const shm::FastLane::RowState local = lane_.row_state(slot);
  for (int member : local.submitted) state.submitted.push_back(locals_[static_cast<size_t>(member)]);
  if (stream_) {
    const RowState hosts = stream_->row_state(slot);
    state.completions = hosts.completions;
    for (int host : hosts.submitted)
      state.submitted.insert(state.submitted.end(), hosts_[static_cast<size_t>(host)].begin(),
                             hosts_[static_cast<size_t>(host)].end());
    // Another host without its record may hold some of its members' bits.
    for (size_t host = 0; host < hosts_.size(); ++host)
      if (static_cast<int>(host) != host_ &&
          std::find(hosts.submitted.begin(), hosts.submitted.end(), static_cast<int>(host)) == hosts.submitted.end())
        state.unseen = true;
  } else {
    state.completions = local.completions;
  }
  std::sort(state.submitted.begin(), state.submitted.end());
  state.submitted.erase(std::unique(state.submitted.begin(), state.submitted.end()), state.submitted.end());
  return state;
}

void HostAgreement::received(int from, const std::vector<uint8_t>& bytes) {
  const AgreementMessage message = decode_agreement_message(bytes);
  if (!leader_)
    throw Internal("an agreement message from set rank " + std::to_string(from) + " reached set rank " +
                   std::to_string(rank_) + ", which leads no host");
  if (message.slot >= rows()) throw Internal("an agreement message names cache slot " + std::to_string(message.slot));
  if (rank_ == 0) {
    if (host_of(from) == 0)
      throw Internal("an agreement message from set rank " + std::to_string(from) + ", on the coordinator's host");
    const int host = host_of(from);
    if (leader_of(host) != from)
      throw Internal("an agreement message from set rank " + std::to_string(from) + ", which leads no host");
    on_leader_message(host, message, bytes);
  } else {
    if (from != 0)
      throw Internal("an agreement message from set rank " + std::to_string(from) + " reached set rank " +
                     std::to_string(rank_));
    on_coordinator_message(message, bytes);
  }
  pump();
}

// The coordinator: a message from the leader of `host`.
void HostAgreement::on_leader_message(int host, const AgreementMessage& message, const std::vector<uint8_t>& bytes) {
  switch (message.kind) {
    case Kind::kRecord:
    case Kind::kVoid:
      stream_->received(host, bytes);
      return;
    case Kind::kHanded: {
      const std::vector<int>& members = hosts_[static_cast<size_t>(host)];
      if (std::find(members.begin(), members.end(), message.member) == members.end())
        throw Internal("the leader of host " + std::to_string(host) + " handed over set rank " +
                       std::to_string(message.member) + ", not on its host");
      std::lock_guard<std::mutex> lock(mutex_);
      handed_[message.slot].push_back(message.member);
      drain_request_ = true;
      return;
    }
    case Kind::kUndivertAck: {
      std::lock_guard<std::mutex> lock(mutex_);
      auto it = remote_.find(message.slot);
      if (it == remote_.end() || it->second.state != Remote::State::kQuerying || it->second.round != message.instance)
        return;  // an answer to a query since overtaken by a diversion
      // Given back: the slot returns to the agreement at the coordinator's
      // next try_undivert() (after its next negotiated instance).
      if (++it->second.acks == static_cast<int>(hosts_.size()) - 1) it->second.state = Remote::State::kGivenBack;
      return;
    }
    case Kind::kDrain:
    case Kind::kVoidQuery:
    case Kind::kDivertHost:
    case Kind::kUndivertQuery:
      break;
  }
  throw Internal("the leader of host " + std::to_string(host) + " sent a coordinator's agreement message");
}

// A host's leader: the coordinator's stream.
void HostAgreement::on_coordinator_message(const AgreementMessage& message, const std::vector<uint8_t>& bytes) {
  switch (message.kind) {
    case Kind::kRecord:
    case Kind::kDrain:
    case Kind::kVoidQuery:
      stream_->received(0, bytes);
      return;
    case Kind::kDivertHost: {
      std::lock_guard<std::mutex> attending(attend_);
      {
        std::lock_guard<std::mutex> lock(mutex_);
        diverted_rows_.insert(message.slot);
      }
      hand_over(message.slot, lane_.divert(message.slot), message.instance);
      return;
    }
    case Kind::kUndivertQuery: {
      std::lock_guard<std::mutex> attending(attend_);
      // Every bit in the row is handed over before the acknowledgement; a
      // bit that lands after the row is given back is an ordinary
      // submission.
      do hand_over(message.slot, lane_.divert(message.slot), message.instance);
      while (!lane_.try_undivert(message.slot));
      {
        std::lock_guard<std::mutex> lock(mutex_);
        diverted_rows_.erase(message.slot);
      }
      send_to(0, AgreementMessage{Kind::kUndivertAck, message.slot, message.instance, rank_, {}});
      return;
    }
    case Kind::kVoid:
    case Kind::kHanded:
    case Kind::kUndivertAck:
      break;
  }
  throw Internal("the coordinator sent a host leader's agreement message");
}

}  // namespace hora::control
