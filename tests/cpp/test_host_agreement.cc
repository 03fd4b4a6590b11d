// HostAgreement: a set of two hosts with two members each (set ranks 0, 1
// on host 0; 2, 3 on host 1). Each host's lane is one segment mapped once
// per member in this process; the members' control messages go through
// per-link queues that the test delivers by hand, so every interleaving
// below is the one the test names.
#include <gtest/gtest.h>
#include <poll.h>
#include <unistd.h>

#include <cstring>
#include <deque>
#include <fstream>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "control/host_agreement.h"
#include "coordinator/wire.h"
#include "hora/errors.h"
#include "transport/shm/attachment.h"
#include "transport/shm/fast_lane.h"
#include "transport/shm/host_doorbells.h"
#include "transport/shm/segment.h"
#include "util/caller_waits.h"

namespace hora::control {
namespace {

using Kind = AgreementMessage::Kind;
using shm::FastLane;

constexpr int kRanks = 4;
const HostAgreement::Hosts kHosts{{0, 1}, {2, 3}};

std::vector<uint8_t> floats(std::vector<float> values) {
  std::vector<uint8_t> bytes(values.size() * sizeof(float));
  std::memcpy(bytes.data(), values.data(), bytes.size());
  return bytes;
}

float first_float(const std::vector<uint8_t>& bytes) {
  float value;
  std::memcpy(&value, bytes.data(), sizeof value);
  return value;
}

class TwoHosts : public ::testing::Test {
 protected:
  void SetUp() override {
    const shm::SegmentLayout layout = shm::plan_layout(2, 4096, 4096);
    for (int host = 0; host < 2; ++host) {
      const std::string name = shm::random_segment_name();
      segments_.push_back(std::make_unique<shm::Segment>(shm::Segment::create(name, layout)));
      segments_.push_back(std::make_unique<shm::Segment>(shm::Segment::open(name, 2, layout.total_bytes)));
      shm::unlink_segment(name);
    }
    for (int rank = 0; rank < kRanks; ++rank) {
      const shm::Segment& segment = *segments_[rank];
      std::vector<shm::Doorbell> bells;
      for (uint32_t r = 0; r < 2; ++r) {
        const uint64_t area = layout.member_offset(r);
        bells.emplace_back(segment.field_at<uint32_t>(area + shm::field::kBell),
                           segment.field_at<uint32_t>(area + shm::field::kSleepers));
      }
      bells_.push_back(std::make_unique<std::vector<shm::Doorbell>>(std::move(bells)));
      seats_.push_back(std::make_unique<shm::Seats>(shm::member_seats(segment, rank % 2)));
    }
    for (int rank = 0; rank < kRanks; ++rank) {
      const int leader = rank - rank % 2;
      lanes_.push_back(std::make_unique<FastLane>(*segments_[rank], rank % 2, 2, *bells_[rank], *seats_[rank],
                                                  std::chrono::microseconds(1), FastLane::Mode::kHost,
                                                  [this, leader](int member) { ++rings_[leader + member]; },
                                                  yield_look_));
    }
    for (int rank = 0; rank < kRanks; ++rank)
      members_.push_back(std::make_unique<HostAgreement>(
          *lanes_[rank], layout.carries(), kHosts, rank,
          [this, rank](int to, const std::vector<uint8_t>& bytes) {
            std::lock_guard<std::mutex> lock(links_mutex_);
            links_[rank][to].push_back(bytes);
          },
          [] {},
          std::chrono::microseconds(1)));
  }

  HostAgreement& operator[](int rank) { return *members_[rank]; }
  size_t waiting(int from, int to) const {
    std::lock_guard<std::mutex> lock(links_mutex_);
    return links_[from][to].size();
  }
  size_t sent_by(int from) const {
    std::lock_guard<std::mutex> lock(links_mutex_);
    size_t n = 0;
    for (int to = 0; to < kRanks; ++to) n += links_[from][to].size();
    return n;
  }
  AgreementMessage next(int from, int to) const {
    std::lock_guard<std::mutex> lock(links_mutex_);
    return decode_agreement_message(links_[from][to].front());
  }
  // Delivers the oldest message from `from` to `to` (an empty one is a
  // response: the member's engine learns of it from the control plane).
  void deliver(int from, int to) {
    std::vector<uint8_t> bytes;
    {
      std::lock_guard<std::mutex> lock(links_mutex_);
      ASSERT_FALSE(links_[from][to].empty()) << from << " -> " << to;
      bytes = std::move(links_[from][to].front());
      links_[from][to].pop_front();
    }
    if (bytes.empty()) members_[to]->response_received();
    else members_[to]->received(from, bytes);
  }
  // The leaders attend to their lanes and everything is delivered, until
  // nothing moves.
  void settle() {
    for (bool any = true; any;) {
      any = false;
      members_[0]->attend();
      members_[2]->attend();
      for (int from = 0; from < kRanks; ++from)
        for (int to = 0; to < kRanks; ++to)
          while (waiting(from, to) != 0) {
            deliver(from, to);
            any = true;
          }
    }
  }
  // The coordinator publishes a response: its contents go to every member
  // in its stream, and its entry into the log.
  void respond() {
    members_[0]->in_order([&] {
      std::lock_guard<std::mutex> lock(links_mutex_);
      for (int to = 1; to < kRanks; ++to) links_[0][to].push_back({});
      members_[0]->append_response();
    });
  }
  // The slots of the log's entries (a response as -1).
  std::vector<int> log(int rank) const {
    std::vector<int> slots;
    for (uint64_t i = 0; auto entry = members_[rank]->entry(i); ++i)
      slots.push_back(entry->response ? -1 : static_cast<int>(entry->slot));
    return slots;
  }
  std::vector<int> divert(uint32_t slot) { return members_[0]->divert(slot); }

  std::vector<std::unique_ptr<shm::Segment>> segments_;  // by set rank: its view of its host's segment
  std::chrono::nanoseconds yield_look_{};  // the lanes' (set before SetUp)
  std::vector<std::unique_ptr<std::vector<shm::Doorbell>>> bells_;
  std::vector<std::unique_ptr<shm::Seats>> seats_;
  std::vector<std::unique_ptr<FastLane>> lanes_;
  std::vector<std::unique_ptr<HostAgreement>> members_;
  mutable std::mutex links_mutex_;  // a test's own thread may send (a leader's waiting caller)
  std::deque<std::vector<uint8_t>> links_[kRanks][kRanks];
  int rings_[kRanks] = {};
};

TEST_F(TwoHosts, ACachedOpCrossesBetweenTheHostsOnceEachWayAndOnlyBetweenTheLeaders) {
  (*this)[1].submit(3);
  (*this)[3].submit(3);
  (*this)[0].submit(3);  // completes host 0: its place goes to host 1's leader
  (*this)[2].submit(3);  // completes host 1: its record goes to the coordinator
  EXPECT_EQ(sent_by(1) + sent_by(3), 0u) << "the other members send nothing";
  ASSERT_EQ(waiting(0, 2), 1u);
  ASSERT_EQ(waiting(2, 0), 1u);
  EXPECT_EQ(sent_by(0) + sent_by(2), 2u);
  EXPECT_EQ(next(0, 2).kind, Kind::kRecord);
  EXPECT_EQ(next(2, 0).kind, Kind::kRecord);
  // Host 1 runs the op as soon as the coordinator's place arrives: no
  // answer to wait for.
  deliver(0, 2);
  EXPECT_EQ(log(2), (std::vector<int>{3}));
  EXPECT_EQ(log(3), (std::vector<int>{3}));
  EXPECT_TRUE(log(0).empty());
  deliver(2, 0);
  for (int rank = 0; rank < kRanks; ++rank) EXPECT_EQ(log(rank), (std::vector<int>{3})) << "rank " << rank;
  EXPECT_EQ(sent_by(0) + sent_by(2), 0u) << "nothing more is sent";
}

TEST_F(TwoHosts, EveryMemberGetsTheSameSumOfTheCarriedInputs) {
  // Float sums that round: each host's inputs in set-rank order, then the
  // hosts' sums in host order give (1e8 + 1) + (-1e8 + 1) = 0 in float32,
  // where every input in set-rank order would give 1.
  const float inputs[kRanks] = {1e8f, 1.0f, -1e8f, 1.0f};
  for (int rank : {3, 0, 2, 1}) (*this)[rank].submit_carrying(9, floats({inputs[rank], 0.5f * rank}));
  settle();
  for (int rank = 0; rank < kRanks; ++rank) {
    auto entry = (*this)[rank].entry(0);
    ASSERT_TRUE(entry.has_value());
    ASSERT_TRUE(entry->carried) << "rank " << rank;
    ASSERT_EQ(entry->carried->size(), 1u) << "the sum alone";
    const std::vector<uint8_t>& sum = entry->carried->front();
    ASSERT_EQ(sum.size(), 2 * sizeof(float));
    EXPECT_EQ(first_float(sum), 0.0f) << "rank " << rank;
    float second;
    std::memcpy(&second, sum.data() + sizeof(float), sizeof second);
    EXPECT_EQ(second, 3.0f) << "rank " << rank;
  }
}

TEST_F(TwoHosts, AnOpRunsOnTheDataPlaneUnlessEveryMemberCarriedItsInput) {
  (*this)[0].submit_carrying(2, floats({1.0f}));
  (*this)[1].submit(2);
  (*this)[2].submit_carrying(2, floats({1.0f}));
  (*this)[3].submit_carrying(2, floats({1.0f}));
  settle();
  for (int rank = 0; rank < kRanks; ++rank) {
    auto entry = (*this)[rank].entry(0);
    ASSERT_TRUE(entry.has_value());
    EXPECT_FALSE(entry->carried) << "rank " << rank;
  }
  // Beyond the carried rows nothing is carried either.
  for (int rank = 0; rank < kRanks; ++rank) (*this)[rank].submit_carrying(shm::kCarriedRows, floats({1.0f}));
  settle();
  for (int rank = 0; rank < kRanks; ++rank) {
    auto entry = (*this)[rank].entry(1);
    ASSERT_TRUE(entry.has_value());
    EXPECT_EQ(entry->slot, shm::kCarriedRows);
    EXPECT_FALSE(entry->carried) << "rank " << rank;
  }
}

TEST_F(TwoHosts, AnotherMemberCompletingItsHostsRowRingsTheLeader) {
  (*this)[0].submit(5);
  EXPECT_EQ(rings_[0], 0);
  (*this)[1].submit(5);
  EXPECT_EQ(rings_[0], 1) << "member 1 completed host 0's row";
  EXPECT_EQ(sent_by(0), 0u) << "the leader has not attended yet";
  (*this)[0].attend();
  EXPECT_EQ(waiting(0, 2), 1u) << "host 0's place";
  (*this)[2].submit(5);
  (*this)[3].submit(5);
  EXPECT_EQ(rings_[2], 1);
  settle();
  for (int rank = 0; rank < kRanks; ++rank) EXPECT_EQ(log(rank), (std::vector<int>{5})) << "rank " << rank;
}

TEST_F(TwoHosts, MembersSubmittingInDifferentOrdersRunTheCoordinatorsOrder) {
  (*this)[3].submit(1);
  (*this)[3].submit(0);
  (*this)[1].submit(1);
  (*this)[2].submit(0);
  (*this)[1].submit(0);
  (*this)[0].submit(0);
  (*this)[2].submit(1);
  (*this)[0].submit(1);
  settle();
  for (int rank = 0; rank < kRanks; ++rank) EXPECT_EQ(log(rank), (std::vector<int>{0, 1})) << "rank " << rank;
}

TEST_F(TwoHosts, EveryInstanceRunsOnceAndResponsesKeepTheirPlace) {
  for (int rank = 0; rank < kRanks; ++rank) (*this)[rank].submit(4);
  (*this)[0].attend();  // member 1 completed host 0's row: the op's place
  respond();
  settle();
  for (int rank = 0; rank < kRanks; ++rank) (*this)[rank].submit(4);
  settle();
  for (int rank = 0; rank < kRanks; ++rank) EXPECT_EQ(log(rank), (std::vector<int>{4, -1, 4})) << "rank " << rank;
  EXPECT_EQ((*this)[0].row_state(4).completions, 2u);
}

TEST_F(TwoHosts, ADiversionHandsOverTheBitsInEveryHostsRow) {
  (*this)[0].submit(7);
  (*this)[2].submit(7);  // members 1 and 3 will send requests instead
  EXPECT_EQ(divert(7), (std::vector<int>{0}));
  ASSERT_EQ(waiting(0, 2), 1u);
  EXPECT_EQ(next(0, 2).kind, Kind::kDivertHost);
  deliver(0, 2);
  ASSERT_EQ(waiting(2, 0), 1u);
  EXPECT_EQ(next(2, 0).kind, Kind::kHanded);
  EXPECT_EQ(next(2, 0).member, 2);
  EXPECT_FALSE((*this)[0].drain_requested());
  deliver(2, 0);
  EXPECT_TRUE((*this)[0].drain_requested()) << "a member handed over did not ask for the coordinator's loop";
  EXPECT_TRUE((*this)[0].take_drain_request());
  EXPECT_FALSE((*this)[0].drain_requested());
  EXPECT_EQ(divert(7), (std::vector<int>{2}));
  // Bits that land in the diverted rows later are handed over too, each
  // by its host's leader.
  EXPECT_EQ((*this)[3].submit(7), Agreement::Outcome::kDiverted);
  EXPECT_EQ(rings_[2], 1);
  (*this)[2].attend();
  deliver(2, 0);
  EXPECT_TRUE((*this)[0].take_drain_request());
  EXPECT_EQ(divert(7), (std::vector<int>{3}));
  EXPECT_EQ((*this)[1].submit(7), Agreement::Outcome::kDiverted);
  (*this)[0].attend();
  EXPECT_TRUE((*this)[0].take_drain_request());
  EXPECT_EQ(divert(7), (std::vector<int>{1}));
  EXPECT_EQ(sent_by(0), 0u) << "the other host's row is diverted already";
  for (int rank = 0; rank < kRanks; ++rank) EXPECT_TRUE(log(rank).empty());
}

TEST_F(TwoHosts, ASlotIsGivenBackOnceEveryLeaderHasGivenBackItsRow) {
  (*this)[2].submit(6);
  divert(6);
  deliver(0, 2);  // kDivertHost
  deliver(2, 0);  // member 2 handed
  ASSERT_TRUE((*this)[0].take_drain_request());
  EXPECT_EQ(divert(6), (std::vector<int>{2}));
  EXPECT_FALSE((*this)[0].try_undivert(6)) << "host 1's row is not given back yet";
  ASSERT_EQ(waiting(0, 2), 1u);
  EXPECT_EQ(next(0, 2).kind, Kind::kUndivertQuery);
  EXPECT_FALSE((*this)[0].try_undivert(6)) << "still waiting for the answer";
  EXPECT_EQ(waiting(0, 2), 1u) << "asked once";
  deliver(0, 2);
  ASSERT_EQ(waiting(2, 0), 1u);
  EXPECT_EQ(next(2, 0).kind, Kind::kUndivertAck);
  deliver(2, 0);
  // Collecting what landed in the slot meanwhile does not take the rows
  // back again; the next try gives the slot back.
  EXPECT_EQ(divert(6), std::vector<int>{});
  EXPECT_EQ(waiting(0, 2), 0u);
  EXPECT_TRUE((*this)[0].try_undivert(6));
  // The slot is agreed through the lanes again.
  // The negotiated instance: the coordinator took part with a request,
  // host 1's leader through the submission it counted.
  (*this)[0].took_part(6);
  for (int rank = 0; rank < kRanks; ++rank) (*this)[rank].submit(6);
  settle();
  for (int rank = 0; rank < kRanks; ++rank) EXPECT_EQ(log(rank), (std::vector<int>{6})) << "rank " << rank;
}

// A new reason to divert (a mismatch, a join) while the other hosts' rows
// are given back, or being given back, takes them back again.
TEST_F(TwoHosts, ANewDiversionTakesBackRowsAlreadyGivenBack) {
  divert(12);
  deliver(0, 2);  // kDivertHost
  EXPECT_FALSE((*this)[0].try_undivert(12));
  deliver(0, 2);  // kUndivertQuery
  deliver(2, 0);  // kUndivertAck
  (*this)[2].submit(12);  // lands in host 1's row, given back: an ordinary submission
  EXPECT_EQ(waiting(2, 0), 0u);
  (*this)[0].divert_anew(12);
  ASSERT_EQ(waiting(0, 2), 1u);
  EXPECT_EQ(next(0, 2).kind, Kind::kDivertHost);
  deliver(0, 2);
  ASSERT_EQ(waiting(2, 0), 1u);
  EXPECT_EQ(next(2, 0).kind, Kind::kHanded);
  deliver(2, 0);
  EXPECT_EQ(divert(12), (std::vector<int>{2}));
  EXPECT_FALSE((*this)[0].try_undivert(12)) << "asked again";
  EXPECT_EQ(next(0, 2).kind, Kind::kUndivertQuery);
}

TEST_F(TwoHosts, ABitThatLandsBeforeTheRowIsGivenBackIsHandedBeforeTheAnswer) {
  divert(8);
  deliver(0, 2);  // kDivertHost: nothing to hand over
  EXPECT_EQ(waiting(2, 0), 0u);
  EXPECT_FALSE((*this)[0].try_undivert(8));
  // Member 3 submits into the diverted row; its leader has not attended
  // when the query comes.
  EXPECT_EQ((*this)[3].submit(8), Agreement::Outcome::kDiverted);
  deliver(0, 2);
  ASSERT_EQ(waiting(2, 0), 2u);
  EXPECT_EQ(next(2, 0).kind, Kind::kHanded);
  EXPECT_EQ(next(2, 0).member, 3);
  deliver(2, 0);
  EXPECT_EQ(next(2, 0).kind, Kind::kUndivertAck);
  deliver(2, 0);
  EXPECT_TRUE((*this)[0].take_drain_request());
  EXPECT_FALSE((*this)[0].try_undivert(8)) << "member 3's submission is not negotiated yet";
  EXPECT_EQ(divert(8), (std::vector<int>{3}));
  // Member 3 came in part: member 2's submission of the same instance must
  // reach the negotiator too, not wait in a row given back.
  ASSERT_EQ(waiting(0, 2), 1u);
  EXPECT_EQ(next(0, 2).kind, Kind::kDivertHost);
  EXPECT_EQ((*this)[2].submit(8), Agreement::Outcome::kWaiting) << "the row is given back until the divert arrives";
  deliver(0, 2);
  ASSERT_EQ(waiting(2, 0), 1u);
  EXPECT_EQ(next(2, 0).member, 2);
  deliver(2, 0);
  EXPECT_EQ(divert(8), (std::vector<int>{2}));
}

TEST_F(TwoHosts, APlaceAlreadyGivenIsVoidedByTheLeaderOfAHostThatCannotComplete) {
  (*this)[0].submit(10);
  (*this)[1].submit(10);  // host 0 complete: the place is given
  (*this)[0].attend();
  (*this)[2].submit(10);  // member 3 sends a request instead
  EXPECT_EQ(divert(10), std::vector<int>{}) << "the place may still complete";
  // In the coordinator's stream: the place, the void query, the divert.
  ASSERT_EQ(waiting(0, 2), 3u);
  EXPECT_EQ(next(0, 2).kind, Kind::kRecord);
  deliver(0, 2);
  EXPECT_EQ(next(0, 2).kind, Kind::kVoidQuery);
  deliver(0, 2);
  EXPECT_EQ(next(0, 2).kind, Kind::kDivertHost);
  deliver(0, 2);
  ASSERT_EQ(waiting(2, 0), 2u);
  EXPECT_EQ(next(2, 0).kind, Kind::kVoid);
  deliver(2, 0);
  EXPECT_EQ(next(2, 0).kind, Kind::kHanded);
  deliver(2, 0);
  EXPECT_TRUE((*this)[0].take_drain_request());
  EXPECT_EQ(divert(10), (std::vector<int>{0, 1, 2}));
  for (int rank = 0; rank < kRanks; ++rank) EXPECT_TRUE(log(rank).empty()) << "rank " << rank;
}

TEST_F(TwoHosts, AHostWhoseRowCompletedAfterItsLeaderAnsweredVoidIsHandedOverWhole) {
  (*this)[0].submit(11);
  (*this)[1].submit(11);
  (*this)[0].attend();
  (*this)[2].submit(11);
  EXPECT_EQ(divert(11), std::vector<int>{});
  deliver(0, 2);  // the place
  deliver(0, 2);  // the void query: host 1 has sent no record
  (*this)[3].submit(11);  // completes host 1's row; its leader has not attended
  deliver(0, 2);  // kDivertHost: the row was reset by its completion, no bits
  (*this)[2].attend();  // the host's record of that instance goes out after its void answer
  ASSERT_EQ(waiting(2, 0), 2u);
  EXPECT_EQ(next(2, 0).kind, Kind::kVoid);
  deliver(2, 0);
  EXPECT_EQ(next(2, 0).kind, Kind::kRecord);
  deliver(2, 0);
  EXPECT_TRUE((*this)[0].take_drain_request());
  EXPECT_EQ(divert(11), (std::vector<int>{0, 1, 2, 3}));
  for (int rank = 0; rank < kRanks; ++rank) EXPECT_TRUE(log(rank).empty()) << "rank " << rank;
}

TEST_F(TwoHosts, MessagesFromTheWrongMemberAreRefusedByName) {
  const std::vector<uint8_t> record = encode(AgreementMessage{Kind::kRecord, 1, 1, 0, {}});
  try {
    (*this)[3].received(0, record);
    FAIL() << "a member that leads no host took an agreement message";
  } catch (const Internal& e) {
    EXPECT_NE(std::string(e.what()).find("leads no host"), std::string::npos) << e.what();
  }
  EXPECT_THROW((*this)[0].received(3, record), Internal) << "set rank 3 leads no host";
  EXPECT_THROW((*this)[0].received(1, record), Internal) << "set rank 1 is on the coordinator's host";
  try {
    (*this)[0].received(2, encode(AgreementMessage{Kind::kHanded, 1, 1, 1, {}}));
    FAIL() << "host 1's leader handed over a member of host 0";
  } catch (const Internal& e) {
    EXPECT_NE(std::string(e.what()).find("not on its host"), std::string::npos) << e.what();
  }
  EXPECT_THROW((*this)[0].received(2, encode(AgreementMessage{Kind::kDivertHost, 1, 1, 0, {}})), Internal);
  EXPECT_THROW((*this)[2].received(0, encode(AgreementMessage{Kind::kHanded, 1, 1, 2, {}})), Internal);
  EXPECT_THROW((*this)[2].received(0, encode(AgreementMessage{Kind::kRecord, shm::kLaneRows, 1, 0, {}})), Internal);
}

bool readable(int fd) {
  pollfd p{fd, POLLIN, 0};
  return poll(&p, 1, 0) == 1 && (p.revents & POLLIN);
}

// The wake-ups between a host's members: a member rung finds its socket
// readable until it clears it; ringing a member that has not bound its
// socket yet, or has left, does nothing (and raises no signal).
// Where the machine's ranks outnumber its cores, the leader's caller that
// waits for an entry looks, yielding between looks (ShmTuning::yield_look):
// the member completing its host's row rings the caller's bell instead of
// waking the leader's engine, and the caller sends its host's record itself.
// A thread's scheduler state: 'R' running or runnable, 'S' asleep, ...
char thread_state(pid_t tid) {
  std::ifstream stat("/proc/self/task/" + std::to_string(tid) + "/stat");
  std::string line;
  std::getline(stat, line);
  const size_t name_end = line.rfind(')');
  return name_end == std::string::npos || name_end + 2 >= line.size() ? '?' : line[name_end + 2];
}

// Gives a waiting caller up and joins it, however the test ends.
struct GiveUpOnExit {
  std::atomic<bool>& flag;
  std::thread& thread;
  ~GiveUpOnExit() {
    flag.store(true);
    if (thread.joinable()) thread.join();
  }
};

class TwoHostsLooking : public TwoHosts {
 protected:
  void SetUp() override {
    yield_look_ = std::chrono::seconds(30);
    TwoHosts::SetUp();
  }
  // Member 1 completes host 0's row of `slot` while the leader's caller
  // looks: the caller sends the host's record, and no engine is woken.
  void complete_host_0_beside_its_looking_leader(uint32_t slot, shm::Clock::time_point deadline) {
    (*this)[1].submit(slot);
    while (waiting(0, 2) == 0 && shm::Clock::now() < deadline) std::this_thread::yield();
    ASSERT_EQ(waiting(0, 2), 1u) << "the looking caller did not send its host's record";
    EXPECT_EQ(rings_[0], 0) << "the leader's engine was woken beside its looking caller";
  }
  // Host 0's leader's count of sleepers and lookers on its lane bell.
  std::atomic_ref<uint32_t> leaders_lane_sleepers() const {
    const shm::SegmentLayout& layout = segments_[0]->layout();
    return std::atomic_ref<uint32_t>(
        *segments_[0]->field_at<uint32_t>(layout.member_offset(0) + shm::field::kLaneSleepers));
  }
};

TEST_F(TwoHostsLooking, TheLeadersLookingCallerSendsItsHostsRecordAndNoEngineIsWoken) {
  (*this)[0].submit(5);
  std::atomic<bool> give_up{false};
  std::atomic<bool> found{false};
  std::atomic<pid_t> caller_tid{0};
  std::thread caller([&] {
    caller_tid.store(gettid());
    const CallerWaiting waiting;
    (*this)[0].wait_for_entry(0, [&] { return give_up.load(); });
    found.store((*this)[0].entry(0).has_value());
  });
  const GiveUpOnExit on_exit{give_up, caller};
  const auto deadline = shm::Clock::now() + std::chrono::seconds(20);
  const std::atomic_ref<uint32_t> lane_sleepers = leaders_lane_sleepers();
  while (lane_sleepers.load() == 0 && shm::Clock::now() < deadline) std::this_thread::yield();
  ASSERT_NE(lane_sleepers.load(), 0u) << "the leader's caller never looked";
  for (int sample = 0; sample < 20; ++sample) {
    EXPECT_EQ(thread_state(caller_tid.load()), 'R') << "the caller slept instead of looking";
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }

  ASSERT_NO_FATAL_FAILURE(complete_host_0_beside_its_looking_leader(5, deadline));

  (*this)[2].submit(5);
  (*this)[3].submit(5);
  EXPECT_EQ(rings_[2], 1) << "host 1's leader has no looking caller: its engine is woken";
  (*this)[2].attend();
  deliver(2, 0);
  caller.join();
  EXPECT_TRUE(found.load());
  EXPECT_FALSE(give_up.load()) << "the caller returned only when given up";
  settle();
  for (int rank = 0; rank < kRanks; ++rank) EXPECT_EQ(log(rank), (std::vector<int>{5})) << "rank " << rank;
}

// Where the lane's callers look for their log (a crowded machine), the
// leader's caller looks for the other hosts' records itself for as long
// (ProgressEngine::look reads its connection between looks): counted as a
// looker on its lane bell, so the member that completes the host's row
// wakes no engine, and the caller sends its host's record and takes the
// other host's. A member's caller does not look (its log comes through the
// lane); neither leader relays between two hosts.
TEST_F(TwoHostsLooking, TheLeadersCallerReadsTheOtherHostsRecordsAsALookerOfItsLane) {
  EXPECT_EQ((*this)[0].look_spin(), yield_look_);
  EXPECT_EQ((*this)[2].look_spin(), yield_look_);
  EXPECT_EQ((*this)[1].look_spin(), std::chrono::nanoseconds(0));
  EXPECT_FALSE((*this)[0].relays());
  EXPECT_FALSE((*this)[2].relays());

  (*this)[0].submit(5);
  std::atomic<bool> give_up{false};
  std::atomic<bool> found{false};
  std::thread caller([&] {
    const CallerWaiting caller_waits;
    // As ProgressEngine::look: the leader's own work, then its connection.
    found.store((*this)[0].look(
        [&] {
          (*this)[0].attend();
          if (waiting(2, 0) != 0) deliver(2, 0);
          return (*this)[0].has_entry(0) || give_up.load();
        },
        std::chrono::seconds(20)));
  });
  const GiveUpOnExit on_exit{give_up, caller};
  const auto deadline = shm::Clock::now() + std::chrono::seconds(20);
  const std::atomic_ref<uint32_t> lane_sleepers = leaders_lane_sleepers();
  while (lane_sleepers.load() == 0 && shm::Clock::now() < deadline) std::this_thread::yield();
  ASSERT_NE(lane_sleepers.load(), 0u) << "the leader's caller does not count as a looker";

  ASSERT_NO_FATAL_FAILURE(complete_host_0_beside_its_looking_leader(5, deadline));

  (*this)[2].submit(5);
  (*this)[3].submit(5);
  (*this)[2].attend();
  caller.join();
  EXPECT_TRUE(found.load()) << "the caller did not find its entry in the other host's record";
  EXPECT_FALSE(give_up.load());
  settle();
  for (int rank = 0; rank < kRanks; ++rank) EXPECT_EQ(log(rank), (std::vector<int>{5})) << "rank " << rank;
}

// A row that completes as the leader's caller stops looking rang a bell
// nobody looks at any more, and woke no engine: the caller serves it on its
// way out of the look.
TEST_F(TwoHosts, ARowCompletedAtTheEndOfTheLeadersLookIsServedByItsCaller) {
  (*this)[0].submit(9);
  const bool found = (*this)[0].look(
      [&] {
        (*this)[1].submit(9);  // completes host 0's row while the caller counts as a looker
        return true;
      },
      std::chrono::seconds(1));
  EXPECT_TRUE(found);
  EXPECT_EQ(rings_[0], 0) << "the looker's bell was not the one rung";
  EXPECT_EQ(waiting(0, 2), 1u) << "host 0's record did not go out: the completed row waits for nobody";
  (*this)[2].submit(9);
  (*this)[3].submit(9);
  settle();
  for (int rank = 0; rank < kRanks; ++rank) EXPECT_EQ(log(rank), (std::vector<int>{9})) << "rank " << rank;
}

// Without the lane's look (cores enough for every rank), the leader looks
// as long as the leaders' stream says.
TEST_F(TwoHosts, WithoutTheLanesLookTheLeaderLooksAsTheLeadersStreamSays) {
  EXPECT_EQ((*this)[0].look_spin(), std::chrono::microseconds(1));
  EXPECT_EQ((*this)[1].look_spin(), std::chrono::nanoseconds(0));
}

TEST(HostDoorbells, ARungMemberFindsItsSocketReadableUntilItClearsIt) {
  const shm::SegmentLayout layout = shm::plan_layout(2, 4096, 4096);
  const std::string name = shm::random_segment_name();
  shm::Segment first = shm::Segment::create(name, layout);
  shm::Segment second = shm::Segment::open(name, 2, layout.total_bytes);
  shm::unlink_segment(name);
  shm::HostDoorbells zero(first, 0, 2);
  zero.ring(1);  // member 1 has no socket yet: nothing waits for it later
  {
    shm::HostDoorbells one(second, 1, 2);
    EXPECT_FALSE(readable(one.fd()));
    EXPECT_EQ(access(("/dev/shm/" + one.name()).c_str(), F_OK), -1) << "no file: the abstract namespace";
    zero.ring(1);
    zero.ring(1);
    EXPECT_TRUE(readable(one.fd()));
    one.clear();
    EXPECT_FALSE(readable(one.fd())) << "both wake-ups were read";
    one.ring(0);
    EXPECT_TRUE(readable(zero.fd()));
    zero.clear();
    zero.ring(5);  // no such member
    zero.ring(-1);
  }
  zero.ring(1);  // member 1 has left: no signal, no error
  EXPECT_FALSE(readable(zero.fd()));
}

}  // namespace
}  // namespace hora::control
