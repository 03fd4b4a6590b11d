// The Negotiator: when ops become ready, in which order, which mismatches it
// reports (by global rank), and how it fills and uses the response cache.
// Process set 7 with global ranks {1, 3, 5}: set rank r is global rank 2r+1,
// so an error that named set ranks instead of global ones would show.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <string>
#include <vector>

#include "coordinator/negotiator.h"
#include "coordinator/request.h"
#include "coordinator/response_cache.h"
#include "hora/errors.h"
#include "hora/types.h"

namespace hora {
namespace {

constexpr int kSetId = 7;
constexpr int kMembers = 3;

NegotiatorOptions options(size_t fusion_threshold = 64 << 20, size_t cache_capacity = 1024) {
  NegotiatorOptions o;
  o.process_set_id = kSetId;
  o.global_ranks = {1, 3, 5};
  o.fusion_threshold = fusion_threshold;
  o.cache_capacity = cache_capacity;
  return o;
}

Request allreduce(std::string name, std::vector<int64_t> shape = {4}, DataType dtype = DataType::kFloat32) {
  Request q;
  q.name = std::move(name);
  q.op = OpType::kAllreduce;
  q.dtype = dtype;
  q.shape = std::move(shape);
  return q;
}

Request with_op(Request q, OpType op) {
  q.op = op;
  return q;
}

void submit_all(Negotiator& n, const Request& q) {
  for (int r = 0; r < n.size(); ++r) n.submit(r, q);
}

std::vector<std::string> names_of(const std::vector<Response>& responses) {
  std::vector<std::string> names;
  for (const Response& r : responses) names.insert(names.end(), r.names.begin(), r.names.end());
  return names;
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

TEST(NegotiatorTest, ReadyOnlyOnceEveryMemberSubmittedInAnyOrder) {
  std::array<int, kMembers> order = {0, 1, 2};
  do {
    Negotiator n(options());
    Request q = allreduce("loss");
    for (int i = 0; i < kMembers; ++i) {
      EXPECT_TRUE(n.ready().empty()) << "ready after " << i << " of " << kMembers << " members";
      n.submit(order[i], q);
    }
    std::vector<Response> ready = n.ready();
    ASSERT_EQ(ready.size(), 1u);
    EXPECT_EQ(ready[0].op, OpType::kAllreduce);
    EXPECT_EQ(ready[0].names, std::vector<std::string>{"loss"});
    EXPECT_EQ(ready[0].error, "");
    EXPECT_TRUE(ready[0].sizes.empty());
    EXPECT_TRUE(n.ready().empty()) << "an op is returned once";
    EXPECT_TRUE(n.pending().empty());
  } while (std::next_permutation(order.begin(), order.end()));
}

TEST(NegotiatorTest, ReadyOrderIsCompletionOrder) {
  Negotiator n(options(/*fusion_threshold=*/0));
  // Rank 0 submits a, b, c; rank 1 submits c, b, a; rank 2 submits b, c, a.
  // Completion: b (rank 2's first), then c, then a.
  for (const char* name : {"a", "b", "c"}) n.submit(0, allreduce(name));
  for (const char* name : {"c", "b", "a"}) n.submit(1, allreduce(name));
  for (const char* name : {"b", "c", "a"}) n.submit(2, allreduce(name));
  EXPECT_EQ(names_of(n.ready()), (std::vector<std::string>{"b", "c", "a"}));
}

TEST(NegotiatorTest, MembersSubmittingInDifferentOrdersGetOneOrder) {
  // Each member submits the same 6 ops in its own order, interleaved one at a
  // time, with ready() polled after every submission as the engine does.
  const std::vector<std::vector<int>> orders = {{0, 1, 2, 3, 4, 5}, {5, 4, 3, 2, 1, 0}, {2, 0, 4, 1, 5, 3}};
  Negotiator n(options(/*fusion_threshold=*/0));
  std::vector<std::string> executed;
  std::vector<std::string> completed;
  std::array<int, 6> count{};
  for (int step = 0; step < 6; ++step) {
    for (int r = 0; r < kMembers; ++r) {
      int op = orders[r][step];
      n.submit(r, allreduce("op" + std::to_string(op)));
      if (++count[op] == kMembers) completed.push_back("op" + std::to_string(op));
      for (const std::string& name : names_of(n.ready())) executed.push_back(name);
    }
  }
  EXPECT_EQ(executed, completed);
  std::vector<std::string> sorted = executed;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_EQ(sorted, (std::vector<std::string>{"op0", "op1", "op2", "op3", "op4", "op5"}));
}

// Submits `base` from set ranks 0 and 2 (global 1 and 5) and `odd` from set
// rank 1 (global 3); returns the single response.
Response negotiate_mismatch(const Request& base, const Request& odd) {
  Negotiator n(options());
  n.submit(0, base);
  n.submit(1, odd);
  n.submit(2, base);
  std::vector<Response> ready = n.ready();
  EXPECT_EQ(ready.size(), 1u);
  EXPECT_EQ(n.cache().size(), 0u) << "failed ops are not cached";
  return ready.empty() ? Response{} : ready.front();
}

void expect_mismatch(const Response& response, const std::string& name, const std::string& field,
                     const std::string& majority_value, const std::string& odd_value) {
  const std::string& e = response.error;
  ASSERT_FALSE(e.empty()) << field << " mismatch not reported";
  EXPECT_EQ(response.names, std::vector<std::string>{name});
  EXPECT_EQ(response.cache, std::vector<uint8_t>{0});
  EXPECT_EQ(response.slots, std::vector<int32_t>{-1});
  EXPECT_TRUE(contains(e, "'" + name + "'")) << e;
  EXPECT_TRUE(contains(e, "process set " + std::to_string(kSetId))) << e;
  EXPECT_TRUE(contains(e, field + " differs")) << e;
  EXPECT_TRUE(contains(e, majority_value + " on ranks 1, 5")) << e;
  EXPECT_TRUE(contains(e, odd_value + " on rank 3")) << e;
  EXPECT_FALSE(contains(e, "ranks 0, 2")) << "names set ranks, not global ranks: " << e;
}

TEST(NegotiatorTest, DtypeMismatch) {
  Response r = negotiate_mismatch(allreduce("w"), allreduce("w", {4}, DataType::kInt32));
  expect_mismatch(r, "w", "dtype", "float32", "int32");
  EXPECT_TRUE(contains(r.error, "allreduce")) << r.error;
}

TEST(NegotiatorTest, ShapeMismatch) {
  expect_mismatch(negotiate_mismatch(allreduce("w", {4, 2}), allreduce("w", {4, 3})), "w", "shape", "[4, 2]",
                  "[4, 3]");
  Request b = with_op(allreduce("b", {8}), OpType::kBroadcast);
  b.root = 0;
  Request odd = b;
  odd.shape = {9};
  expect_mismatch(negotiate_mismatch(b, odd), "b", "shape", "[8]", "[9]");
}

TEST(NegotiatorTest, ReduceOpMismatch) {
  Request odd = allreduce("w");
  odd.reduce_op = ReduceOp::kMax;
  expect_mismatch(negotiate_mismatch(allreduce("w"), odd), "w", "reduce op", "Sum", "Max");
  Request rs = with_op(allreduce("rs", {6}), OpType::kReducescatter);
  Request rs_odd = rs;
  rs_odd.reduce_op = ReduceOp::kAverage;
  expect_mismatch(negotiate_mismatch(rs, rs_odd), "rs", "reduce op", "Sum", "Average");
}

TEST(NegotiatorTest, ScaleFactorMismatch) {
  Request odd = allreduce("w");
  odd.prescale = 0.5;
  expect_mismatch(negotiate_mismatch(allreduce("w"), odd), "w", "prescale factor", "1", "0.5");
  odd = allreduce("w");
  odd.postscale = 0.25;
  expect_mismatch(negotiate_mismatch(allreduce("w"), odd), "w", "postscale factor", "1", "0.25");
}

TEST(NegotiatorTest, RootMismatchNamesGlobalRanks) {
  Request b = with_op(allreduce("params"), OpType::kBroadcast);
  b.root = 0;  // global rank 1
  Request odd = b;
  odd.root = 2;  // global rank 5
  Response r = negotiate_mismatch(b, odd);
  expect_mismatch(r, "params", "root rank", "1", "5");
  EXPECT_TRUE(contains(r.error, "broadcast")) << r.error;
  odd.root = 3;  // outside the set
  expect_mismatch(negotiate_mismatch(b, odd), "params", "root rank", "1", "invalid");
}

TEST(NegotiatorTest, OpTypeMismatch) {
  Response r = negotiate_mismatch(allreduce("x"), with_op(allreduce("x"), OpType::kAllgather));
  expect_mismatch(r, "x", "op", "allreduce", "allgather");
  EXPECT_EQ(r.op, OpType::kAllreduce) << "the response takes set rank 0's op";
}

TEST(NegotiatorTest, AllgatherTrailingDimsMismatch) {
  Request base = with_op(allreduce("g", {2, 3, 4}), OpType::kAllgather);
  Request odd = with_op(allreduce("g", {2, 3, 5}), OpType::kAllgather);
  expect_mismatch(negotiate_mismatch(base, odd), "g", "shape after the first dimension", "[3, 4]", "[3, 5]");
}

TEST(NegotiatorTest, AlltoallSplitsCountMismatch) {
  Request base = with_op(allreduce("t", {6, 2}), OpType::kAlltoall);
  base.splits = {2, 2, 2};
  Request odd = base;
  odd.splits = {3, 3};
  expect_mismatch(negotiate_mismatch(base, odd), "t", "number of splits", "one per member", "2");
}

TEST(NegotiatorTest, SeveralDifferingFieldsAreAllNamed) {
  Request odd = allreduce("w", {5}, DataType::kFloat64);
  odd.prescale = 2;
  const std::string e = negotiate_mismatch(allreduce("w"), odd).error;
  EXPECT_TRUE(contains(e, "dtype differs")) << e;
  EXPECT_TRUE(contains(e, "shape differs")) << e;
  EXPECT_TRUE(contains(e, "prescale factor differs")) << e;
}

TEST(NegotiatorTest, AllgatherCarriesFirstDimsPerMember) {
  Negotiator n(options());
  const std::vector<int64_t> first = {2, 5, 0};
  for (int r = 0; r < kMembers; ++r) n.submit(r, with_op(allreduce("g", {first[r], 3}), OpType::kAllgather));
  std::vector<Response> ready = n.ready();
  ASSERT_EQ(ready.size(), 1u);
  EXPECT_EQ(ready[0].op, OpType::kAllgather);
  EXPECT_EQ(ready[0].error, "");
  EXPECT_EQ(ready[0].sizes, first);
}

TEST(NegotiatorTest, AlltoallCarriesSplitsMatrix) {
  Negotiator n(options());
  const std::vector<std::vector<int64_t>> splits = {{1, 2, 3}, {4, 5, 6}, {0, 0, 7}};
  for (int r = 0; r < kMembers; ++r) {
    Request q = with_op(allreduce("t", {0, 2}), OpType::kAlltoall);
    for (int64_t s : splits[r]) q.shape[0] += s;
    q.splits = splits[r];
    n.submit(r, q);
  }
  std::vector<Response> ready = n.ready();
  ASSERT_EQ(ready.size(), 1u);
  EXPECT_EQ(ready[0].error, "");
  // Row-major [sender * n + receiver].
  EXPECT_EQ(ready[0].sizes, (std::vector<int64_t>{1, 2, 3, 4, 5, 6, 0, 0, 7}));
}

TEST(NegotiatorTest, PendingListsSubmittedAndMissingGlobalRanks) {
  Negotiator n(options());
  n.submit(0, allreduce("a"));
  n.submit(2, allreduce("a"));
  n.submit(1, allreduce("b"));
  n.submit(0, allreduce("c"));
  n.submit(1, allreduce("c"));
  n.submit(2, allreduce("c"));
  std::vector<PendingOp> pending = n.pending();
  std::sort(pending.begin(), pending.end(), [](const PendingOp& x, const PendingOp& y) { return x.name < y.name; });
  ASSERT_EQ(pending.size(), 2u) << "'c' is complete, not pending";
  EXPECT_EQ(pending[0].name, "a");
  EXPECT_EQ(pending[0].submitted, (std::vector<int>{1, 5}));
  EXPECT_EQ(pending[0].missing, (std::vector<int>{3}));
  EXPECT_EQ(pending[1].name, "b");
  EXPECT_EQ(pending[1].submitted, (std::vector<int>{3}));
  EXPECT_EQ(pending[1].missing, (std::vector<int>{1, 5}));
  EXPECT_EQ(names_of(n.ready()), std::vector<std::string>{"c"});
  EXPECT_EQ(n.pending().size(), 2u);
}

TEST(NegotiatorTest, SameNameTwiceFromOneRankThrows) {
  Negotiator n(options());
  n.submit(1, allreduce("w"));
  try {
    n.submit(1, allreduce("w"));
    FAIL() << "expected hora::Internal";
  } catch (const Internal& e) {
    EXPECT_TRUE(contains(e.what(), "'w'")) << e.what();
    EXPECT_TRUE(contains(e.what(), "rank 3")) << e.what();
  }
  // The first submission is still pending and can complete.
  n.submit(0, allreduce("w"));
  n.submit(2, allreduce("w"));
  EXPECT_EQ(names_of(n.ready()), std::vector<std::string>{"w"});
  // Once negotiated, the name may be used again.
  submit_all(n, allreduce("w"));
  EXPECT_EQ(names_of(n.ready()), std::vector<std::string>{"w"});
}

TEST(NegotiatorTest, RankOutsideTheSetThrows) {
  Negotiator n(options());
  EXPECT_THROW(n.submit(3, allreduce("w")), Internal);
  EXPECT_THROW(n.submit(-1, allreduce("w")), Internal);
}

TEST(NegotiatorTest, FirstNegotiationFillsTheCache) {
  Negotiator n(options());
  Request q = allreduce("grad");
  submit_all(n, q);
  std::vector<Response> ready = n.ready();
  ASSERT_EQ(ready.size(), 1u);
  EXPECT_EQ(ready[0].cache, std::vector<uint8_t>{1});
  EXPECT_EQ(ready[0].slots, std::vector<int32_t>{-1});
  EXPECT_EQ(n.cache().size(), 1u);
  EXPECT_EQ(n.cache().lookup(q), 0);
  EXPECT_EQ(n.cache().request(0), q);
}

TEST(NegotiatorTest, LaterRoundViaCacheIsSentAsSlot) {
  Negotiator n(options());
  Request other = allreduce("other", {2}, DataType::kInt64);
  Request q = allreduce("grad");
  submit_all(n, other);
  submit_all(n, q);
  n.ready();
  const int32_t slot = n.cache().lookup(q);
  ASSERT_GE(slot, 0);
  for (int step = 0; step < 3; ++step) {
    for (int r = kMembers - 1; r >= 0; --r) n.submit_cached(r, static_cast<uint32_t>(slot));
    std::vector<Response> ready = n.ready();
    ASSERT_EQ(ready.size(), 1u);
    EXPECT_EQ(ready[0].names, std::vector<std::string>{"grad"});
    EXPECT_EQ(ready[0].slots, std::vector<int32_t>{slot});
    EXPECT_EQ(ready[0].cache, std::vector<uint8_t>{0}) << "not stored twice";
    EXPECT_EQ(ready[0].error, "");
    EXPECT_EQ(n.cache().size(), 2u);
  }
}

TEST(NegotiatorTest, MixedCachedAndFullSubmissionIsSentByName) {
  Negotiator n(options());
  Request q = allreduce("grad");
  submit_all(n, q);
  n.ready();
  n.submit_cached(0, 0);
  n.submit(1, q);
  n.submit_cached(2, 0);
  std::vector<Response> ready = n.ready();
  ASSERT_EQ(ready.size(), 1u);
  EXPECT_EQ(ready[0].slots, std::vector<int32_t>{-1});
  EXPECT_EQ(ready[0].cache, std::vector<uint8_t>{0});
  EXPECT_EQ(n.cache().size(), 1u);
}

TEST(NegotiatorTest, ChangedRequestUnderCachedNameIsCachedAgain) {
  Negotiator n(options());
  submit_all(n, allreduce("grad", {4}));
  n.ready();
  Request bigger = allreduce("grad", {8});
  submit_all(n, bigger);
  std::vector<Response> ready = n.ready();
  ASSERT_EQ(ready.size(), 1u);
  EXPECT_EQ(ready[0].cache, std::vector<uint8_t>{1});
  EXPECT_EQ(n.cache().lookup(bigger), 1);
  EXPECT_EQ(n.cache().request(0).shape, std::vector<int64_t>{4}) << "slots are never rewritten";
}

TEST(NegotiatorTest, CacheableOpsOtherThanAllreduceAreCached) {
  Negotiator n(options());
  Request b = with_op(allreduce("b"), OpType::kBroadcast);
  b.root = 1;
  submit_all(n, b);
  std::vector<Response> ready = n.ready();
  ASSERT_EQ(ready.size(), 1u);
  EXPECT_EQ(ready[0].cache, std::vector<uint8_t>{1});
  EXPECT_EQ(n.cache().lookup(b), 0);
}

TEST(NegotiatorTest, AllgatherAndAlltoallAreNeverCached) {
  Negotiator n(options());
  Request g = with_op(allreduce("g", {2, 2}), OpType::kAllgather);
  Request t = with_op(allreduce("t", {3}), OpType::kAlltoall);
  t.splits = {1, 1, 1};
  for (int step = 0; step < 2; ++step) {
    submit_all(n, g);
    submit_all(n, t);
    std::vector<Response> ready = n.ready();
    ASSERT_EQ(ready.size(), 2u);
    for (const Response& r : ready) {
      EXPECT_EQ(r.cache, std::vector<uint8_t>{0}) << r.names[0];
      EXPECT_EQ(r.slots, std::vector<int32_t>{-1}) << r.names[0];
    }
  }
  EXPECT_EQ(n.cache().size(), 0u);
}

TEST(NegotiatorTest, CapacityZeroCachesNothing) {
  Negotiator n(options(64 << 20, /*cache_capacity=*/0));
  for (int step = 0; step < 2; ++step) {
    submit_all(n, allreduce("grad"));
    std::vector<Response> ready = n.ready();
    ASSERT_EQ(ready.size(), 1u);
    EXPECT_EQ(ready[0].cache, std::vector<uint8_t>{0});
  }
  EXPECT_EQ(n.cache().size(), 0u);
  EXPECT_THROW(n.submit_cached(0, 0), Internal);
}

TEST(NegotiatorTest, FullCacheStopsCaching) {
  Negotiator n(options(/*fusion_threshold=*/0, /*cache_capacity=*/2));
  for (const char* name : {"a", "b", "c"}) submit_all(n, allreduce(name));
  std::vector<Response> ready = n.ready();
  ASSERT_EQ(ready.size(), 3u);
  EXPECT_EQ(ready[0].cache, std::vector<uint8_t>{1});
  EXPECT_EQ(ready[1].cache, std::vector<uint8_t>{1});
  EXPECT_EQ(ready[2].cache, std::vector<uint8_t>{0});
  EXPECT_EQ(n.cache().size(), 2u);
}

TEST(NegotiatorTest, SubmitCachedWithUnfilledSlotThrows) {
  Negotiator n(options());
  EXPECT_THROW(n.submit_cached(0, 0), Internal);
  submit_all(n, allreduce("grad"));
  n.ready();
  EXPECT_NO_THROW(n.submit_cached(0, 0));
  EXPECT_THROW(n.submit_cached(1, 1), Internal);
  EXPECT_THROW(n.submit_cached(1, 1000000), Internal);
}

TEST(NegotiatorTest, SmallAllreducesAreFused) {
  Negotiator n(options(/*fusion_threshold=*/1024));
  for (const char* name : {"a", "b", "c"}) submit_all(n, allreduce(name));
  std::vector<Response> ready = n.ready();
  ASSERT_EQ(ready.size(), 1u);
  EXPECT_EQ(ready[0].names, (std::vector<std::string>{"a", "b", "c"}));
  EXPECT_EQ(ready[0].cache, (std::vector<uint8_t>{1, 1, 1}));
  EXPECT_EQ(ready[0].slots, (std::vector<int32_t>{-1, -1, -1}));
}

// A member fills its cache from the response stream, in stream order, from
// the cache flags. After fusion reorders responses, its slots must still mean
// what the coordinator's slots mean, or a later cached submission would name
// the wrong op.
TEST(NegotiatorTest, CacheSlotsFollowTheResponseStreamOrder) {
  Negotiator n(options(/*fusion_threshold=*/1024));
  const std::vector<Request> requests = {allreduce("a"), allreduce("i", {4}, DataType::kInt32), allreduce("b"),
                                         with_op(allreduce("x"), OpType::kBarrier), allreduce("j", {2}, DataType::kInt32),
                                         allreduce("c")};
  for (const Request& q : requests) submit_all(n, q);
  std::vector<Response> ready = n.ready();
  ASSERT_EQ(names_of(ready), (std::vector<std::string>{"a", "b", "c", "i", "j", "x"}));

  ResponseCache member(1024);
  for (const Response& r : ready) {
    for (size_t i = 0; i < r.names.size(); ++i) {
      if (!r.cache[i]) continue;
      auto q = std::find_if(requests.begin(), requests.end(), [&](const Request& x) { return x.name == r.names[i]; });
      member.insert(*q);
    }
  }
  ASSERT_EQ(member.size(), n.cache().size());
  for (const Request& q : requests) EXPECT_EQ(member.lookup(q), n.cache().lookup(q)) << q.name;

  // Every member now sends the slots it knows; the coordinator resolves them
  // to the same ops.
  for (const Request& q : requests)
    for (int r = 0; r < kMembers; ++r) n.submit_cached(r, static_cast<uint32_t>(member.lookup(q)));
  std::vector<Response> again = n.ready();
  std::vector<std::string> names = names_of(again);
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{"a", "b", "c", "i", "j", "x"}));
  for (const Response& r : again) {
    for (size_t i = 0; i < r.names.size(); ++i) {
      auto q = std::find_if(requests.begin(), requests.end(), [&](const Request& x) { return x.name == r.names[i]; });
      ASSERT_NE(q, requests.end()) << r.names[i];
      EXPECT_EQ(r.slots[i], member.lookup(*q)) << r.names[i];
    }
  }
}

}  // namespace
}  // namespace hora
