// The Negotiator's join state: joined members are not waited for, the
// responses describe what they take part in, only allreduce and barrier run
// while a member has joined, and the join response names the last rank to
// join; stall reports never name joined members. Process set 7 with global
// ranks {1, 3, 5}, as in test_negotiator.cc.
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <vector>

#include "coordinator/negotiator.h"
#include "coordinator/request.h"
#include "coordinator/stall_inspector.h"
#include "hora/errors.h"

namespace hora {
namespace {

NegotiatorOptions options(size_t fusion_threshold = 64 << 20) {
  NegotiatorOptions o;
  o.process_set_id = 7;
  o.global_ranks = {1, 3, 5};
  o.fusion_threshold = fusion_threshold;
  return o;
}

Request make(std::string name, OpType op = OpType::kAllreduce, std::vector<int64_t> shape = {4}) {
  Request q;
  q.name = std::move(name);
  q.op = op;
  q.shape = std::move(shape);
  return q;
}

Request join_request() { return make("", OpType::kJoin, {}); }

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

TEST(NegotiatorJoinTest, JoinedMemberIsNotWaitedForAndGetsTheRequests) {
  Negotiator n(options());
  n.submit(1, join_request());
  EXPECT_TRUE(n.joined(1));
  EXPECT_TRUE(n.ready().empty()) << "one member joined: nothing to do yet";
  Request q = make("grad");
  q.reduce_op = ReduceOp::kAverage;
  q.prescale = 0.5;
  n.submit(0, q);
  EXPECT_TRUE(n.ready().empty());
  n.submit(2, q);
  std::vector<Response> ready = n.ready();
  ASSERT_EQ(ready.size(), 1u);
  EXPECT_EQ(ready[0].names, std::vector<std::string>{"grad"});
  EXPECT_EQ(ready[0].error, "");
  EXPECT_EQ(ready[0].slots, std::vector<int32_t>{-1});
  EXPECT_EQ(ready[0].requests, std::vector<Request>{q}) << "the joined member builds its zeros from these";
  EXPECT_TRUE(n.pending().empty());
}

TEST(NegotiatorJoinTest, OpsWaitingOnlyForTheJoinerRunWhenItJoins) {
  Negotiator n(options());
  n.submit(0, make("b"));
  n.submit(2, make("b"));
  n.submit(0, make("a"));
  n.submit(2, make("a"));
  n.submit(0, make("c"));  // still waits for set rank 2
  EXPECT_TRUE(n.ready().empty());
  n.submit(1, join_request());
  std::vector<Response> ready = n.ready();
  ASSERT_EQ(ready.size(), 1u) << "a and b are fused";
  EXPECT_EQ(ready[0].names, (std::vector<std::string>{"a", "b"}));
  ASSERT_EQ(ready[0].requests.size(), 2u);
  EXPECT_EQ(ready[0].requests[0].name, "a");
  EXPECT_EQ(ready[0].requests[1].name, "b");
  std::vector<PendingOp> pending = n.pending();
  ASSERT_EQ(pending.size(), 1u);
  EXPECT_EQ(pending[0].name, "c");
  EXPECT_EQ(pending[0].missing, std::vector<int>{5}) << "joined global rank 3 is not missing";
}

TEST(NegotiatorJoinTest, JoinResponseComesLastAndNamesTheLastRank) {
  Negotiator n(options());
  n.submit(2, join_request());  // global rank 5, alone in its round
  EXPECT_TRUE(n.ready().empty());
  n.submit(0, make("x"));
  n.submit(1, make("x"));
  n.submit(1, join_request());  // global 3 and 1 join in one round: the highest counts
  n.submit(0, join_request());
  std::vector<Response> ready = n.ready();
  ASSERT_EQ(ready.size(), 2u);
  EXPECT_EQ(ready[0].names, std::vector<std::string>{"x"});
  EXPECT_EQ(ready[1].op, OpType::kJoin);
  EXPECT_EQ(ready[1].names, std::vector<std::string>{kJoinName});
  EXPECT_EQ(ready[1].sizes, std::vector<int64_t>{3});
  EXPECT_EQ(ready[1].error, "");
  // The set is back to normal: every member is waited for again.
  for (int r = 0; r < 3; ++r) EXPECT_FALSE(n.joined(r));
  n.submit(0, make("y"));
  n.submit(1, make("y"));
  EXPECT_TRUE(n.ready().empty());
  n.submit(2, make("y"));
  EXPECT_EQ(n.ready().size(), 1u);
  // A second round names its own last rank.
  n.submit(1, join_request());
  n.ready();
  n.submit(2, join_request());
  n.ready();
  n.submit(0, join_request());
  ready = n.ready();
  ASSERT_EQ(ready.size(), 1u);
  EXPECT_EQ(ready[0].sizes, std::vector<int64_t>{1});
}

TEST(NegotiatorJoinTest, OnlyAllreduceAndBarrierRunWhileAMemberHasJoined) {
  Negotiator n(options());
  n.submit(0, join_request());  // global rank 1, the coordinator itself
  Request bcast = make("bcast", OpType::kBroadcast);
  bcast.root = 1;
  Request a2a = make("a2a", OpType::kAlltoall, {3});
  a2a.splits = {1, 1, 1};
  for (const Request& q : {make("gather", OpType::kAllgather), bcast, a2a, make("rs", OpType::kReducescatter)}) {
    n.submit(1, q);
    n.submit(2, q);
    std::vector<Response> ready = n.ready();
    ASSERT_EQ(ready.size(), 1u) << q.name;
    const std::string& e = ready[0].error;
    EXPECT_EQ(ready[0].op, q.op);
    EXPECT_TRUE(contains(e, std::string(op_type_name(q.op)) + " '" + q.name + "' on process set 7")) << e;
    EXPECT_TRUE(contains(e, "global rank(s) [1] called join()")) << e;
    EXPECT_TRUE(ready[0].requests.empty()) << "nothing to take part in";
    EXPECT_EQ(ready[0].cache, std::vector<uint8_t>{0});
  }
  Request barrier = make("wait", OpType::kBarrier, {});
  n.submit(1, barrier);
  n.submit(2, barrier);
  std::vector<Response> ready = n.ready();
  ASSERT_EQ(ready.size(), 1u);
  EXPECT_EQ(ready[0].op, OpType::kBarrier);
  EXPECT_EQ(ready[0].error, "");
  EXPECT_EQ(ready[0].requests, std::vector<Request>{barrier});
}

TEST(NegotiatorJoinTest, MismatchAmongActiveMembersIsStillReported) {
  Negotiator n(options());
  n.submit(1, join_request());
  n.submit(0, make("w", OpType::kAllreduce, {4}));
  n.submit(2, make("w", OpType::kAllreduce, {5}));
  std::vector<Response> ready = n.ready();
  ASSERT_EQ(ready.size(), 1u);
  EXPECT_TRUE(contains(ready[0].error, "shape differs: [4] on rank 1; [5] on rank 5")) << ready[0].error;
  EXPECT_TRUE(ready[0].requests.empty());
}

TEST(NegotiatorJoinTest, JoinedMembersOwnEarlierSubmissionCounts) {
  Negotiator n(options());
  n.submit(1, make("a"));
  n.submit(1, join_request());
  n.submit(0, make("a"));
  EXPECT_TRUE(n.ready().empty()) << "set rank 2 has neither submitted nor joined";
  n.submit(2, make("a"));
  std::vector<Response> ready = n.ready();
  ASSERT_EQ(ready.size(), 1u);
  EXPECT_TRUE(ready[0].requests.empty()) << "every member submitted it";
}

// Ops that only joined members submitted wait for the next round.
TEST(NegotiatorJoinTest, OpOfJoinedMembersOnlyOutlivesTheJoin) {
  Negotiator n(options());
  n.submit(0, make("a"));
  n.submit(0, join_request());
  n.submit(1, join_request());
  n.submit(2, join_request());
  std::vector<Response> ready = n.ready();
  ASSERT_EQ(ready.size(), 1u);
  EXPECT_EQ(ready[0].op, OpType::kJoin);
  std::vector<PendingOp> pending = n.pending();
  ASSERT_EQ(pending.size(), 1u);
  EXPECT_EQ(pending[0].missing, (std::vector<int>{3, 5}));
  n.submit(1, make("a"));
  n.submit(2, make("a"));
  EXPECT_EQ(n.ready().size(), 1u);
}

// A cached op while a member has joined goes out by name with its request,
// so the joined member can take part and fill its cache as the others do;
// after the join it is sent as a slot again.
TEST(NegotiatorJoinTest, CachedOpWhileAMemberHasJoined) {
  Negotiator n(options());
  const Request q = make("grad");
  for (int r = 0; r < 3; ++r) n.submit(r, q);
  ASSERT_EQ(n.ready().size(), 1u);
  ASSERT_EQ(n.cache().lookup(q), 0);
  n.submit(2, join_request());
  n.submit_cached(0, 0);
  n.submit_cached(1, 0);
  const Request fresh = make("fresh");
  n.submit(0, fresh);
  n.submit(1, fresh);
  std::vector<Response> ready = n.ready();
  ASSERT_EQ(ready.size(), 1u);
  EXPECT_EQ(ready[0].names, (std::vector<std::string>{"grad", "fresh"}));
  EXPECT_EQ(ready[0].slots, (std::vector<int32_t>{-1, -1}));
  EXPECT_EQ(ready[0].cache, (std::vector<uint8_t>{0, 1})) << "fresh enters every member's cache";
  EXPECT_EQ(ready[0].requests, (std::vector<Request>{q, fresh}));
  EXPECT_EQ(n.cache().lookup(fresh), 1);
  n.submit(0, join_request());
  n.submit(1, join_request());
  ASSERT_EQ(n.ready().back().op, OpType::kJoin);
  for (int r = 0; r < 3; ++r) n.submit_cached(r, 1);
  ready = n.ready();
  ASSERT_EQ(ready.size(), 1u);
  EXPECT_EQ(ready[0].slots, std::vector<int32_t>{1});
  EXPECT_TRUE(ready[0].requests.empty());
}

TEST(NegotiatorJoinTest, JoinedMemberSubmittingOrJoiningTwiceThrows) {
  Negotiator n(options());
  n.submit(1, join_request());
  try {
    n.submit(1, make("late"));
    FAIL() << "expected hora::Internal";
  } catch (const Internal& e) {
    EXPECT_TRUE(contains(e.what(), "rank 3 submitted 'late' after it joined process set 7")) << e.what();
  }
  EXPECT_THROW(n.submit(1, join_request()), Internal);
  EXPECT_TRUE(n.pending().empty());
}

// The stall inspector reads who is missing from pending(): a joined member
// is never named, nor counted in the failure's missing ranks.
TEST(NegotiatorJoinTest, StallReportsNeverNameJoinedMembers) {
  Negotiator n(options());
  const auto start = StallInspector::Clock::time_point() + std::chrono::hours(1);
  StallInspector inspector(7, {1, 3, 5}, {std::chrono::milliseconds(1000), std::chrono::milliseconds(0),
                                          std::chrono::milliseconds(5000)});
  n.submit(1, join_request());
  n.submit(0, make("grad"));
  inspector.submitted("grad", start);
  auto pending = [&] { return n.pending(); };
  StallReport warning = inspector.inspect(start + std::chrono::seconds(2), pending);
  EXPECT_TRUE(contains(warning.warning, "global rank 5 has not submitted 'grad'")) << warning.warning;
  EXPECT_FALSE(contains(warning.warning, "global rank 3")) << warning.warning;
  StallReport expired = inspector.inspect(start + std::chrono::seconds(6), pending);
  ASSERT_TRUE(expired.failure);
  EXPECT_EQ(expired.failure->missing, std::vector<int>{5});
}

TEST(NegotiatorJoinTest, SingleMemberSetJoinsAtOnce) {
  NegotiatorOptions o;
  o.global_ranks = {4};
  Negotiator n(o);
  n.submit(0, join_request());
  std::vector<Response> ready = n.ready();
  ASSERT_EQ(ready.size(), 1u);
  EXPECT_EQ(ready[0].sizes, std::vector<int64_t>{4});
}

}  // namespace
}  // namespace hora
