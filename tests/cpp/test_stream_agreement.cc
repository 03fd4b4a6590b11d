// StreamAgreement: members on several hosts agree on cached ops by records
// in the coordinator's stream. Each member's agreement is wired to the
// others through per-link queues that the test delivers by hand, so every
// interleaving below is the one the test names.
#include <gtest/gtest.h>

#include <deque>
#include <optional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "control/stream_agreement.h"
#include "coordinator/wire.h"
#include "hora/errors.h"

namespace hora::control {
namespace {

using Entry = Agreement::Entry;
using Kind = AgreementMessage::Kind;

// `n` members; links[from][to] holds what `from` sent `to`, in order.
class Members {
 public:
  explicit Members(int n) : links_(n, std::vector<std::deque<std::vector<uint8_t>>>(n)) {
    for (int rank = 0; rank < n; ++rank)
      members_.push_back(std::make_unique<StreamAgreement>(
          rank, n, [this, rank](int to, const std::vector<uint8_t>& bytes) { links_[rank][to].push_back(bytes); },
          [] {}, std::chrono::microseconds(1)));
  }

  StreamAgreement& operator[](int rank) { return *members_[rank]; }
  size_t waiting(int from, int to) const { return links_[from][to].size(); }
  Kind next_kind(int from, int to) const { return decode_agreement_message(links_[from][to].front()).kind; }
  // Delivers the oldest message from `from` to `to`.
  void deliver(int from, int to) {
    ASSERT_FALSE(links_[from][to].empty());
    std::vector<uint8_t> bytes = std::move(links_[from][to].front());
    links_[from][to].pop_front();
    members_[to]->received(from, bytes);
  }
  // Delivers everything, the coordinator's messages last in each round.
  void deliver_all() {
    for (bool any = true; any;) {
      any = false;
      for (int from = 0; from < static_cast<int>(links_.size()); ++from)
        for (int to = 0; to < static_cast<int>(links_.size()); ++to)
          while (!links_[from][to].empty()) {
            deliver(from, to);
            any = true;
          }
    }
  }
  // The slots of the log's entries from `from` on (a response as -1).
  std::vector<int> log(int rank, uint64_t from = 0) {
    std::vector<int> slots;
    for (uint64_t i = from; auto entry = members_[rank]->entry(i); ++i)
      slots.push_back(entry->response ? -1 : static_cast<int>(entry->slot));
    return slots;
  }

 private:
  std::vector<std::vector<std::deque<std::vector<uint8_t>>>> links_;
  std::vector<std::unique_ptr<StreamAgreement>> members_;
};

TEST(StreamAgreement, ACachedOpCostsOneMessageToEachMemberAndNoRoundTrip) {
  Members set(2);
  EXPECT_EQ(set[1].submit(3), Agreement::Outcome::kWaiting);
  EXPECT_EQ(set[0].submit(3), Agreement::Outcome::kWaiting);
  ASSERT_EQ(set.waiting(0, 1), 1u);
  ASSERT_EQ(set.waiting(1, 0), 1u);
  // The coordinator's record reaches member 1 before member 1's reaches
  // the coordinator: member 1 runs the op without waiting for an answer.
  set.deliver(0, 1);
  EXPECT_EQ(set.log(1), (std::vector<int>{3}));
  EXPECT_TRUE(set.log(0).empty());
  set.deliver(1, 0);
  EXPECT_EQ(set.log(0), (std::vector<int>{3}));
  EXPECT_EQ(set.waiting(0, 1) + set.waiting(1, 0), 0u) << "nothing more is sent";
}

TEST(StreamAgreement, MembersSubmittingInDifferentOrdersRunTheCoordinatorsOrder) {
  Members set(3);
  set[1].submit(1);
  set[1].submit(0);
  set[2].submit(1);
  set[0].submit(0);
  set[2].submit(0);
  set[0].submit(1);
  set.deliver_all();
  for (int rank = 0; rank < 3; ++rank) EXPECT_EQ(set.log(rank), (std::vector<int>{0, 1})) << "rank " << rank;
}

TEST(StreamAgreement, AThirdMemberLearnsTheOthersRecordsFromTheCoordinatorsStream) {
  Members set(3);
  set[0].submit(5);
  set[1].submit(5);
  set[2].submit(5);
  set.deliver(0, 2);
  set.deliver(1, 0);  // relayed to member 2 by the coordinator
  EXPECT_TRUE(set.log(2).empty()) << "member 1's record has not been relayed yet";
  set.deliver(0, 2);
  EXPECT_EQ(set.log(2), (std::vector<int>{5}));
}

// Only a coordinator with members to relay to needs its engine thread to
// read records while its caller computes (ProgressEngine::look keeps the
// set lent otherwise).
TEST(StreamAgreement, OnlyTheCoordinatorOfMoreThanTwoMembersRelays) {
  Members pair(2), three(3);
  EXPECT_FALSE(pair[0].relays());
  EXPECT_FALSE(pair[1].relays());
  EXPECT_TRUE(three[0].relays());
  EXPECT_FALSE(three[1].relays());
  EXPECT_FALSE(three[2].relays());
}

TEST(StreamAgreement, EveryInstanceRunsOnce) {
  Members set(2);
  for (int step = 0; step < 3; ++step) {
    set[0].submit(2);
    set[1].submit(2);
    set.deliver_all();
  }
  EXPECT_EQ(set.log(0), (std::vector<int>{2, 2, 2}));
  EXPECT_EQ(set.log(1), (std::vector<int>{2, 2, 2}));
  EXPECT_EQ(set[0].row_state(2).completions, 3u);
}

TEST(StreamAgreement, ResponsesKeepTheirPlaceAmongTheCachedOps) {
  Members set(2);
  set[0].submit(0);
  set[0].in_order([&] {
    // A response's contents and its entry (the control plane carries the
    // contents, so the member's engine calls response_received()).
    set[0].append_response();
  });
  set[0].submit(1);
  set[1].submit(1);
  set[1].submit(0);
  set.deliver(1, 0);
  set.deliver(1, 0);
  set.deliver(0, 1);  // place of slot 0
  set[1].response_received();
  set.deliver(0, 1);  // place of slot 1
  EXPECT_EQ(set.log(0), (std::vector<int>{0, -1, 1}));
  EXPECT_EQ(set.log(1), (std::vector<int>{0, -1, 1}));
}

TEST(StreamAgreement, ADivertedOpWithoutAPlaceHandsItsRecordsToTheCoordinator) {
  Members set(3);
  set[1].submit(4);
  set[2].submit(4);
  set.deliver_all();
  EXPECT_EQ(set[0].row_state(4).submitted, (std::vector<int>{1, 2}));
  EXPECT_EQ(set[0].divert(4), (std::vector<int>{1, 2}));
  EXPECT_TRUE(set[0].row_state(4).submitted.empty());
  // The coordinator's own submission is negotiated too.
  EXPECT_EQ(set[0].submit(4), Agreement::Outcome::kDiverted);
  EXPECT_TRUE(set[0].take_drain_request());
  EXPECT_EQ(set[0].divert(4), (std::vector<int>{0}));
  set.deliver_all();
  EXPECT_TRUE(set.log(1).empty());
  // A record that lands while the op is diverted goes to the coordinator
  // too, and asks for its loop (a caller that read it runs the loop:
  // ProgressEngine::look); once nothing is held the op returns to the
  // agreement.
  EXPECT_FALSE(set[0].drain_requested());
  set[1].submit(4);
  set.deliver_all();
  EXPECT_TRUE(set[0].drain_requested()) << "a record of a diverted op did not ask for the coordinator's loop";
  EXPECT_FALSE(set[0].try_undivert(4));
  EXPECT_TRUE(set[0].take_drain_request());
  EXPECT_FALSE(set[0].drain_requested());
  EXPECT_EQ(set[0].divert(4), (std::vector<int>{1}));
  EXPECT_TRUE(set[0].try_undivert(4));
  set[0].took_part(4);  // the negotiated instance 2
  set[2].took_part(4);
  set[0].submit(4);
  set[1].submit(4);
  set[2].submit(4);
  set.deliver_all();
  for (int rank = 0; rank < 3; ++rank) EXPECT_EQ(set.log(rank), (std::vector<int>{4})) << "rank " << rank;
}

// The coordinator gave the op its place, then must negotiate it (a member
// sent a request of the same name that differs): the member that will not
// submit it answers the void query, and the place is void everywhere.
TEST(StreamAgreement, APlaceIsVoidedOnlyOnceAMemberSaysItWillNotComplete) {
  Members set(3);
  set[0].submit(6);
  set[1].submit(6);
  set.deliver_all();
  EXPECT_EQ(set[0].row_state(6).submitted, (std::vector<int>{0, 1}));
  set[2].took_part(6);  // member 2 sent the op as a request instead
  EXPECT_TRUE(set[0].divert(6).empty()) << "the place may still complete";
  ASSERT_EQ(set.waiting(0, 2), 1u);
  EXPECT_EQ(set.next_kind(0, 2), Kind::kVoidQuery);
  EXPECT_EQ(set.waiting(0, 1), 0u) << "only members whose record is missing are asked";
  set.deliver(0, 2);
  EXPECT_EQ(set.next_kind(2, 0), Kind::kVoid);
  set.deliver(2, 0);
  EXPECT_TRUE(set[0].take_drain_request());
  EXPECT_EQ(set[0].divert(6), (std::vector<int>{0, 1}));
  set.deliver_all();
  for (int rank = 0; rank < 3; ++rank) EXPECT_TRUE(set.log(rank).empty()) << "rank " << rank;
  // The next instance is agreed again by everyone, numbered alike.
  EXPECT_TRUE(set[0].try_undivert(6));
  for (int rank = 0; rank < 3; ++rank) set[rank].submit(6);
  set.deliver_all();
  for (int rank = 0; rank < 3; ++rank) EXPECT_EQ(set.log(rank), (std::vector<int>{6})) << "rank " << rank;
}

TEST(StreamAgreement, AMemberWhoseRecordIsOnItsWayIgnoresTheVoidQuery) {
  Members set(2);
  set[0].submit(7);
  set.deliver_all();
  EXPECT_TRUE(set[0].divert(7).empty());
  set[1].submit(7);  // crosses the query
  set.deliver(0, 1);
  EXPECT_EQ(set.log(1), (std::vector<int>{7}));
  EXPECT_EQ(set.waiting(1, 0), 1u) << "only its record, no void answer";
  set.deliver(1, 0);
  EXPECT_EQ(set.log(0), (std::vector<int>{7}));
  EXPECT_FALSE(set[0].take_drain_request());
}

TEST(StreamAgreement, RecordsCarryEveryMembersInputOfASmallAllreduce) {
  Members set(3);
  ASSERT_EQ(set[0].max_carried_bytes(), kMaxCarriedBytes);
  set[2].submit_carrying(1, {3, 3});
  set[0].submit_carrying(1, {1, 1});
  set[1].submit_carrying(1, {2, 2});
  set.deliver_all();
  for (int rank = 0; rank < 3; ++rank) {
    std::optional<Entry> entry = set[rank].entry(0);
    ASSERT_TRUE(entry && entry->carried) << "rank " << rank;
    EXPECT_EQ(*entry->carried, (Agreement::Carried{{1, 1}, {2, 2}, {3, 3}})) << "in set-rank order, rank " << rank;
  }
  // One member without its input: nobody reduces carried inputs.
  set[0].submit_carrying(1, {1, 1});
  set[1].submit(1);
  set[2].submit_carrying(1, {3, 3});
  set.deliver_all();
  for (int rank = 0; rank < 3; ++rank) {
    std::optional<Entry> entry = set[rank].entry(1);
    ASSERT_TRUE(entry) << "rank " << rank;
    EXPECT_FALSE(entry->carried) << "rank " << rank;
  }
  EXPECT_TRUE(set[0].entry(0)) << "entries stay until consumed";
  set[0].set_consumed(2);
  EXPECT_FALSE(set[0].entry(0));
  EXPECT_FALSE(set[0].entry_waiting());
}

TEST(StreamAgreement, LargeSetsCarryNoInput) {
  Members set(StreamAgreement::kMaxCarryingMembers + 1);
  EXPECT_EQ(set[0].max_carried_bytes(), 0u);
  EXPECT_NE(Members(StreamAgreement::kMaxCarryingMembers)[0].max_carried_bytes(), 0u);
}

TEST(StreamAgreement, BadMessagesAreRefusedByName) {
  Members set(2);
  const auto refusal = [&](int from, int to, const AgreementMessage& message) {
    try {
      set[to].received(from, encode(message));
    } catch (const Internal& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  EXPECT_NE(refusal(1, 0, {Kind::kRecord, 5000, 1, 1}).find("slot 5000"), std::string::npos);
  EXPECT_NE(refusal(1, 0, {Kind::kDrain, 0, 1, 0}).find("coordinator's agreement message"), std::string::npos);
  EXPECT_NE(refusal(0, 1, {Kind::kRecord, 0, 1, 1}).find("set rank 1"), std::string::npos);
  EXPECT_NE(refusal(0, 1, {Kind::kVoid, 0, 1, 0}).find("void"), std::string::npos);
  EXPECT_THROW(set[0].received(1, std::vector<uint8_t>{1, 2, 3}), Internal);
  AgreementMessage carrying{Kind::kVoid, 0, 1, 1, {1}};
  EXPECT_NE(refusal(1, 0, carrying).find("only a record carries data"), std::string::npos);
  EXPECT_THROW(set[0].submit(StreamAgreement::kRows), Internal);
}

}  // namespace
}  // namespace hora::control
