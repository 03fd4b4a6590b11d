#include "control/stream_agreement.h"

#include <algorithm>
#include <string>
#include <utility>

#include "hora/errors.h"

namespace hora::control {

using Kind = AgreementMessage::Kind;

namespace {

constexpr auto kLongestSleep = std::chrono::milliseconds(100);
// Own records remembered per slot, to answer a void query (the coordinator
// asks about an instance at most one or two behind this member's last).
constexpr size_t kRecordedKept = 8;

}  // namespace

StreamAgreement::StreamAgreement(int rank, int size, Send send, std::function<void()> wake_engine,
                                 std::chrono::nanoseconds spin)
    : rank_(rank), size_(size), send_(std::move(send)), wake_engine_(std::move(wake_engine)), spin_(spin) {
  if (size < 2 || rank < 0 || rank >= size)
    throw Internal("stream agreement: rank " + std::to_string(rank) + " of " + std::to_string(size));
  rows_.resize(kRows);
}

StreamAgreement::Row& StreamAgreement::row(uint32_t slot, const char* what) {
  if (slot >= kRows)
    throw Internal(std::string(what) + " names cache slot " + std::to_string(slot) + ", beyond the agreement's " +
                   std::to_string(kRows));
  Row& r = rows_[slot];
  if (r.records.empty()) r.records.resize(size_);
  return r;
}

StreamAgreement::Place* StreamAgreement::open_place(uint32_t slot, uint32_t instance) {
  for (Place& place : places_)
    if (!place.response && !place.void_ && place.slot == slot && (instance == 0 || place.instance == instance))
      return &place;
  return nullptr;
}

// Adds a record of `instance`; records of instances before `floor` (this
// member's own count: those instances ended here) are stale and go.
void StreamAgreement::keep(std::deque<Record>& records, Record record, uint32_t floor) {
  while (!records.empty() && records.front().instance < floor) records.pop_front();
  if (record.instance >= floor) records.push_back(std::move(record));
}

bool StreamAgreement::holds(const std::deque<Record>& records, uint32_t instance) {
  return std::any_of(records.begin(), records.end(), [&](const Record& r) { return r.instance == instance; });
}

// The place's entry once every member's record of its instance is here
// (using them up), with every member's input where all carried one of the
// same size. Older records are stale (their instances ended) and go.
std::optional<Agreement::Entry> StreamAgreement::complete(Place& place) {
  Row& r = rows_[place.slot];
  for (int member = 1; member < size_; ++member) {
    std::deque<Record>& records = r.records[member];
    while (!records.empty() && records.front().instance < place.instance) records.pop_front();
    if (records.empty() || records.front().instance != place.instance) return std::nullopt;
  }
  Entry entry{false, place.slot, nullptr};
  auto carried = std::make_shared<Carried>();
  carried->push_back(std::move(place.data));
  for (int member = 1; member < size_; ++member) {
    carried->push_back(std::move(r.records[member].front().data));
    r.records[member].pop_front();
  }
  const size_t bytes = carried->front().size();
  if (bytes > 0 && std::all_of(carried->begin(), carried->end(), [&](const auto& d) { return d.size() == bytes; }))
    entry.carried = std::move(carried);
  ++r.completions;
  return entry;
}

// Moves the settled head of the places into the log: responses, completed
// ops; void places drop out. Wakes sleeping drivers when the log grew.
void StreamAgreement::settle() {
  const uint64_t before = settled_.load();
  while (!places_.empty()) {
    Place& place = places_.front();
    if (place.response) {
      entries_.push_back(Entry{true, 0, nullptr});
    } else if (!place.void_) {
      std::optional<Entry> entry = complete(place);
      if (!entry) break;
      entries_.push_back(std::move(*entry));
    }
    places_.pop_front();
  }
  settled_ = base_ + entries_.size();
  if (settled_.load() != before && sleepers_.load() > 0) appended_.notify_all();
}

void StreamAgreement::send_to(int to, const AgreementMessage& message) {
  try {
    send_(to, encode(message));
  } catch (const std::exception&) {
    // The connection broke: the engine thread finds its closure and fails
    // the set.
  }
}

void StreamAgreement::send_all(const AgreementMessage& message, int except) {
  const std::vector<uint8_t> bytes = encode(message);
  for (int member = 1; member < size_; ++member) {
    if (member == except) continue;
    try {
      send_(member, bytes);
    } catch (const std::exception&) {
    }
  }
}

// Each member reduces the carried inputs itself (the executor does, knowing
// the op): `how` is not needed here.
Agreement::Outcome StreamAgreement::submit_carrying(uint32_t slot, std::vector<uint8_t> data, Reduction) {
  return submit_instance(slot, false, std::move(data));
}

Agreement::Outcome StreamAgreement::submit_counted(uint32_t slot, std::vector<uint8_t> data) {
  return submit_instance(slot, true, std::move(data));
}

Agreement::Outcome StreamAgreement::submit_instance(uint32_t slot, bool counted, std::vector<uint8_t> data) {
  if (data.size() > max_carried_bytes()) data.clear();
  std::lock_guard<std::recursive_mutex> stream(stream_);
  std::unique_lock<std::mutex> lock(mutex_);
  Row& r = row(slot, "a submission");
  if (counted && r.instances == 0) throw Internal("a counted submission of cache slot " + std::to_string(slot) + " before any count");
  const uint32_t instance = counted ? r.instances : ++r.instances;
  const uint64_t before = settled_.load();
  if (rank_ == 0 && r.diverted) {
    r.handed.push_back(0);
    drain_request_ = true;
    lock.unlock();
    wake_engine_();
    return Outcome::kDiverted;
  }
  AgreementMessage record{Kind::kRecord, slot, instance, rank_, data};
  if (rank_ == 0) {
    places_.push_back(Place{false, slot, instance, false, std::move(data)});
  } else {
    keep(r.records[rank_], Record{instance, std::move(data)}, instance);
    r.recorded.push_back(instance);
    if (r.recorded.size() > kRecordedKept) r.recorded.pop_front();
  }
  settle();
  const bool appended = settled_.load() != before;
  const bool engine_watches = (watchers_.load() & kEngine) != 0;
  lock.unlock();
  if (rank_ == 0) send_all(record, -1);
  else send_to(0, record);
  if (appended && engine_watches) wake_engine_();
  return appended ? Outcome::kAppended : Outcome::kWaiting;
}

std::optional<Agreement::Entry> StreamAgreement::entry(uint64_t index) const {
  std::lock_guard<std::mutex> lock(mutex_);
  if (index < base_ || index - base_ >= entries_.size()) return std::nullopt;
  return entries_[index - base_];
}

void StreamAgreement::set_consumed(uint64_t next) {
  std::lock_guard<std::mutex> lock(mutex_);
  consumed_ = next;
  while (base_ < consumed_ && !entries_.empty()) {
    entries_.pop_front();
    ++base_;
  }
}

bool StreamAgreement::entry_waiting() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return settled_.load() > consumed_;
}

void StreamAgreement::watch(uint32_t who, bool on) {
  if (on) watchers_.fetch_or(who);
  else watchers_.fetch_and(~who);
}

// Looks for the entry for spin_ (Agreement::look: yielding now and then,
// the peer this rank waits for may share its core), then sleeps until it is
// appended.
void StreamAgreement::wait_for_entry(uint64_t index, const std::function<bool()>& give_up) const {
  look([&] { return settled_.load() > index || give_up(); }, spin_);
  std::unique_lock<std::mutex> lock(mutex_);
  sleepers_.fetch_add(1);
  appended_.wait_for(lock, kLongestSleep, [&] { return settled_.load() > index || give_up(); });
  sleepers_.fetch_sub(1);
}

void StreamAgreement::wake_drivers() const {
  std::lock_guard<std::mutex> lock(mutex_);
  appended_.notify_all();
}

void StreamAgreement::response_received() {
  std::lock_guard<std::mutex> lock(mutex_);
  places_.push_back(Place{true, 0, 0, false, {}});
  settle();
}

void StreamAgreement::append_response() {
  std::lock_guard<std::recursive_mutex> stream(stream_);
  std::lock_guard<std::mutex> lock(mutex_);
  places_.push_back(Place{true, 0, 0, false, {}});
  settle();
}

void StreamAgreement::in_order(const std::function<void()>& publish) {
  std::lock_guard<std::recursive_mutex> stream(stream_);
  publish();
}

void StreamAgreement::took_part(uint32_t slot) {
  if (slot >= kRows) return;
  std::lock_guard<std::mutex> lock(mutex_);
  ++row(slot, "a request").instances;
}

void StreamAgreement::received(int from, const std::vector<uint8_t>& bytes) {
  AgreementMessage message = decode_agreement_message(bytes);
  std::lock_guard<std::recursive_mutex> stream(stream_);
  if (rank_ == 0) {
    if (from < 1 || from >= size_) throw Internal("an agreement message from set rank " + std::to_string(from));
    on_member(from, std::move(message));
  } else {
    if (from != 0)
      throw Internal("an agreement message from set rank " + std::to_string(from) + " reached set rank " +
                     std::to_string(rank_));
    on_coordinator(std::move(message));
  }
}

// A member: the coordinator's stream.
void StreamAgreement::on_coordinator(AgreementMessage message) {
  std::lock_guard<std::mutex> lock(mutex_);
  Row& r = row(message.slot, "the coordinator's agreement message");
  switch (message.kind) {
    case Kind::kRecord:
      if (message.member < 0 || message.member >= size_ || message.member == rank_)
        throw Internal("the coordinator relayed a record of set rank " + std::to_string(message.member));
      if (message.member == 0)
        places_.push_back(Place{false, message.slot, message.instance, false, std::move(message.data)});
      else keep(r.records[message.member], Record{message.instance, std::move(message.data)}, r.instances);
      break;
    case Kind::kDrain:
      if (Place* place = open_place(message.slot, message.instance)) place->void_ = true;
      break;
    case Kind::kVoidQuery: {
      // This member's record of that instance is on its way: the place
      // completes. Otherwise it never comes through the agreement.
      if (std::find(r.recorded.begin(), r.recorded.end(), message.instance) != r.recorded.end()) break;
      if (Place* place = open_place(message.slot, message.instance)) place->void_ = true;
      send_to(0, AgreementMessage{Kind::kVoid, message.slot, message.instance, rank_, {}});
      break;
    }
    case Kind::kVoid:
      throw Internal("the coordinator sent a member's void answer");
    case Kind::kDivertHost:
    case Kind::kHanded:
    case Kind::kUndivertQuery:
    case Kind::kUndivertAck:
      throw Internal("the coordinator sent a host's lane message to a set without one");
  }
  settle();
}

// The coordinator: a member's record or void answer.
void StreamAgreement::on_member(int from, AgreementMessage message) {
  if (message.kind == Kind::kRecord) {
    if (message.slot >= kRows) row(message.slot, "an agreement message");  // throws
    if (message.data.size() > max_carried_bytes())
      throw Internal("set rank " + std::to_string(from) + " carried " + std::to_string(message.data.size()) +
                     " bytes, more than this set's " + std::to_string(max_carried_bytes()));
    message.member = from;
    send_all(message, from);
  }
  std::lock_guard<std::mutex> lock(mutex_);
  Row& r = row(message.slot, "an agreement message");
  switch (message.kind) {
    case Kind::kRecord: {
      if (r.diverted && !open_place(message.slot, message.instance)) {
        r.handed.push_back(from);
        drain_request_ = true;
        return;
      }
      r.records[from].push_back(Record{message.instance, std::move(message.data)});
      break;
    }
    case Kind::kVoid: {
      Place* place = open_place(message.slot, message.instance);
      if (!place || holds(r.records[from], message.instance)) return;
      // The place cannot complete: void it everywhere and hand over the
      // submissions it held.
      place->void_ = true;
      r.handed.push_back(0);
      for (int member = 1; member < size_; ++member) {
        std::deque<Record>& held = r.records[member];
        auto it = std::find_if(held.begin(), held.end(), [&](const Record& k) { return k.instance == message.instance; });
        if (it == held.end()) continue;
        held.erase(it);
        r.handed.push_back(member);
      }
      r.querying = 0;
      drain_request_ = true;
      send_all(AgreementMessage{Kind::kDrain, message.slot, message.instance, 0, {}}, -1);
      break;
    }
    case Kind::kDrain:
    case Kind::kVoidQuery:
      throw Internal("set rank " + std::to_string(from) + " sent a coordinator's agreement message");
    case Kind::kDivertHost:
    case Kind::kHanded:
    case Kind::kUndivertQuery:
    case Kind::kUndivertAck:
      throw Internal("set rank " + std::to_string(from) + " sent a host's lane message to a set without one");
  }
  settle();
}

std::vector<int> StreamAgreement::divert(uint32_t slot) {
  std::lock_guard<std::recursive_mutex> stream(stream_);
  std::lock_guard<std::mutex> lock(mutex_);
  Row& r = row(slot, "a diversion");
  r.diverted = true;
  std::vector<int> handed = std::move(r.handed);
  r.handed.clear();
  const Place* place = open_place(slot, 0);
  // Records of an instance without a place here are the coordinator's to
  // negotiate; a place's own wait for it.
  for (int member = 1; member < size_; ++member) {
    std::deque<Record>& records = r.records[member];
    for (auto it = records.begin(); it != records.end();) {
      if (place && it->instance == place->instance) {
        ++it;
        continue;
      }
      handed.push_back(member);
      it = records.erase(it);
    }
  }
  if (place && r.querying != place->instance) {
    r.querying = place->instance;
    for (int member = 1; member < size_; ++member)
      if (!holds(r.records[member], place->instance))
        send_to(member, AgreementMessage{Kind::kVoidQuery, slot, place->instance, 0, {}});
  }
  std::sort(handed.begin(), handed.end());
  handed.erase(std::unique(handed.begin(), handed.end()), handed.end());
  return handed;
}

bool StreamAgreement::try_undivert(uint32_t slot) {
  std::lock_guard<std::mutex> lock(mutex_);
  Row& r = row(slot, "a diversion");
  if (!r.handed.empty() || open_place(slot, 0)) return false;
  for (int member = 1; member < size_; ++member)
    if (!r.records[member].empty()) return false;
  r.diverted = false;
  r.querying = 0;
  return true;
}

bool StreamAgreement::drain_requested() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return drain_request_;
}

bool StreamAgreement::take_drain_request() {
  std::lock_guard<std::mutex> lock(mutex_);
  return std::exchange(drain_request_, false);
}

Agreement::RowState StreamAgreement::row_state(uint32_t slot) const {
  std::lock_guard<std::mutex> lock(mutex_);
  RowState state;
  if (slot >= kRows || rows_[slot].records.empty()) return state;
  const Row& r = rows_[slot];
  state.completions = r.completions;
  bool placed = false;
  for (const Place& place : places_) placed |= !place.response && !place.void_ && place.slot == slot;
  if (r.diverted && !placed) return state;
  if (placed) state.submitted.push_back(0);
  for (int member = 1; member < size_; ++member)
    if (!r.records[member].empty()) state.submitted.push_back(member);
  return state;
}

}  // namespace hora::control
