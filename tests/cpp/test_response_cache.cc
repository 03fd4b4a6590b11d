// The ResponseCache: slots are handed out in insertion order, never reused or
// rewritten, and a lookup only matches a request equal in every field.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "coordinator/request.h"
#include "coordinator/response_cache.h"
#include "hora/errors.h"
#include "hora/types.h"

namespace hora {
namespace {

Request allreduce(std::string name, std::vector<int64_t> shape = {4}) {
  Request q;
  q.name = std::move(name);
  q.shape = std::move(shape);
  return q;
}

TEST(ResponseCacheTest, EmptyCacheFindsNothing) {
  ResponseCache cache(4);
  EXPECT_EQ(cache.size(), 0u);
  EXPECT_FALSE(cache.full());
  EXPECT_EQ(cache.lookup(allreduce("a")), -1);
  EXPECT_THROW(cache.request(0), Internal);
}

TEST(ResponseCacheTest, InsertHandsOutConsecutiveSlots) {
  ResponseCache cache(8);
  const std::vector<Request> requests = {allreduce("a"), allreduce("b", {2, 2}), allreduce("c", {})};
  for (size_t i = 0; i < requests.size(); ++i) EXPECT_EQ(cache.insert(requests[i]), static_cast<int32_t>(i));
  EXPECT_EQ(cache.size(), 3u);
  for (size_t i = 0; i < requests.size(); ++i) {
    EXPECT_EQ(cache.lookup(requests[i]), static_cast<int32_t>(i));
    EXPECT_EQ(cache.request(static_cast<uint32_t>(i)), requests[i]);
  }
}

TEST(ResponseCacheTest, LookupNeedsEveryFieldEqual) {
  ResponseCache cache(8);
  Request q = allreduce("a");
  q.prescale = 0.5;
  ASSERT_EQ(cache.insert(q), 0);
  std::vector<Request> variants(8, q);
  variants[0].shape = {5};
  variants[1].dtype = DataType::kFloat64;
  variants[2].reduce_op = ReduceOp::kMax;
  variants[3].prescale = 1.0;
  variants[4].postscale = 3.0;
  variants[5].op = OpType::kBroadcast;
  variants[6].root = 1;
  variants[7].name = "b";
  for (size_t i = 0; i < variants.size(); ++i) EXPECT_EQ(cache.lookup(variants[i]), -1) << "variant " << i;
  EXPECT_EQ(cache.lookup(q), 0);
}

TEST(ResponseCacheTest, ChangedRequestGetsANewSlotAndOldSlotsStay) {
  ResponseCache cache(8);
  Request v1 = allreduce("w", {4});
  Request v2 = allreduce("w", {8});
  ASSERT_EQ(cache.insert(allreduce("x")), 0);
  ASSERT_EQ(cache.insert(v1), 1);
  ASSERT_EQ(cache.insert(v2), 2);
  EXPECT_EQ(cache.lookup(v2), 2);
  EXPECT_EQ(cache.lookup(v1), -1) << "the name now maps to its newest request";
  EXPECT_EQ(cache.request(1), v1) << "slot 1 still means what it meant";
  EXPECT_EQ(cache.request(0), allreduce("x"));
}

TEST(ResponseCacheTest, SlotsAreStableAcrossManyInserts) {
  ResponseCache cache(1000);
  for (int i = 0; i < 1000; ++i) ASSERT_EQ(cache.insert(allreduce("t" + std::to_string(i), {i})), i);
  for (int i = 0; i < 1000; ++i) {
    Request q = allreduce("t" + std::to_string(i), {i});
    EXPECT_EQ(cache.lookup(q), i);
    EXPECT_EQ(cache.request(static_cast<uint32_t>(i)), q);
  }
}

TEST(ResponseCacheTest, FullCacheInsertsNothing) {
  ResponseCache cache(2);
  EXPECT_EQ(cache.insert(allreduce("a")), 0);
  EXPECT_FALSE(cache.full());
  EXPECT_EQ(cache.insert(allreduce("b")), 1);
  EXPECT_TRUE(cache.full());
  EXPECT_EQ(cache.insert(allreduce("c")), -1);
  EXPECT_EQ(cache.insert(allreduce("a", {9})), -1);
  EXPECT_EQ(cache.size(), 2u);
  EXPECT_EQ(cache.lookup(allreduce("c")), -1);
  EXPECT_EQ(cache.lookup(allreduce("a")), 0) << "a refused insert does not disturb the name's slot";
  EXPECT_EQ(cache.lookup(allreduce("b")), 1);
  EXPECT_THROW(cache.request(2), Internal);
}

TEST(ResponseCacheTest, CapacityZeroIsAlwaysFull) {
  ResponseCache cache(0);
  EXPECT_TRUE(cache.full());
  EXPECT_EQ(cache.insert(allreduce("a")), -1);
  EXPECT_EQ(cache.size(), 0u);
  EXPECT_EQ(cache.lookup(allreduce("a")), -1);
}

TEST(ResponseCacheTest, UnfilledSlotErrorNamesTheSlot) {
  ResponseCache cache(4);
  cache.insert(allreduce("a"));
  try {
    cache.request(3);
    FAIL() << "expected hora::Internal";
  } catch (const Internal& e) {
    EXPECT_NE(std::string(e.what()).find("slot 3"), std::string::npos) << e.what();
  }
}

TEST(ResponseCacheTest, OnlyOpsEqualOnEveryMemberAreCacheable) {
  EXPECT_TRUE(ResponseCache::cacheable(OpType::kAllreduce));
  EXPECT_TRUE(ResponseCache::cacheable(OpType::kBroadcast));
  EXPECT_TRUE(ResponseCache::cacheable(OpType::kReducescatter));
  EXPECT_TRUE(ResponseCache::cacheable(OpType::kBarrier));
  EXPECT_FALSE(ResponseCache::cacheable(OpType::kAllgather));
  EXPECT_FALSE(ResponseCache::cacheable(OpType::kAlltoall));
}

}  // namespace
}  // namespace hora
