// The FusionPlanner: which ready responses are packed into one fused
// allreduce, and in which order the planned responses come out.
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "coordinator/fusion_planner.h"
#include "coordinator/request.h"
#include "hora/types.h"

namespace hora {
namespace {

// Ready responses plus the requests behind their names.
class Plan {
 public:
  // An allreduce of `elements` elements of `dtype`.
  Request& allreduce(const std::string& name, int64_t elements, DataType dtype = DataType::kFloat32) {
    return add(name, OpType::kAllreduce, elements, dtype);
  }
  Request& add(const std::string& name, OpType op, int64_t elements, DataType dtype = DataType::kFloat32) {
    Request& q = requests_[name];
    q.name = name;
    q.op = op;
    q.dtype = dtype;
    q.shape = {elements};
    Response r;
    r.op = op;
    r.names = {name};
    r.cache = {0};
    r.slots = {-1};
    ready_.push_back(r);
    return q;
  }
  Response& last() { return ready_.back(); }

  std::vector<Response> run(size_t threshold) const {
    FusionPlanner planner(threshold);
    return planner.plan(ready_, [this](const std::string& name) -> const Request& { return requests_.at(name); });
  }

 private:
  std::map<std::string, Request> requests_;
  std::vector<Response> ready_;
};

using Names = std::vector<std::vector<std::string>>;

Names names_of(const std::vector<Response>& planned) {
  Names out;
  for (const Response& r : planned) out.push_back(r.names);
  return out;
}

TEST(FusionPlannerTest, EmptyInputPlansNothing) { EXPECT_TRUE(Plan().run(1024).empty()); }

TEST(FusionPlannerTest, SmallAllreducesFuseInOrderUpToThreshold) {
  Plan p;
  for (const char* name : {"a", "b", "c", "d", "e"}) p.allreduce(name, 10);  // 40 bytes each
  // 100 bytes hold two of them.
  std::vector<Response> planned = p.run(100);
  EXPECT_EQ(names_of(planned), (Names{{"a", "b"}, {"c", "d"}, {"e"}}));
  for (const Response& r : planned) {
    EXPECT_EQ(r.op, OpType::kAllreduce);
    EXPECT_EQ(r.cache.size(), r.names.size());
    EXPECT_EQ(r.slots.size(), r.names.size());
  }
  EXPECT_EQ(names_of(p.run(1 << 20)), (Names{{"a", "b", "c", "d", "e"}}));
}

TEST(FusionPlannerTest, ExactlyTheThresholdFuses) {
  Plan p;
  p.allreduce("a", 25);  // 100 bytes
  p.allreduce("b", 25);
  p.allreduce("c", 1);
  EXPECT_EQ(names_of(p.run(200)), (Names{{"a", "b"}, {"c"}}));
  EXPECT_EQ(names_of(p.run(199)), (Names{{"a", "c"}, {"b"}}));
}

TEST(FusionPlannerTest, ThresholdZeroFusesNothing) {
  Plan p;
  for (const char* name : {"a", "b", "c"}) p.allreduce(name, 1);
  EXPECT_EQ(names_of(p.run(0)), (Names{{"a"}, {"b"}, {"c"}}));
}

TEST(FusionPlannerTest, DifferentKindsDoNotFuse) {
  Plan p;
  p.allreduce("f32", 4);
  p.allreduce("i32", 4, DataType::kInt32);
  p.allreduce("avg", 4).reduce_op = ReduceOp::kAverage;
  p.allreduce("pre", 4).prescale = 0.5;
  p.allreduce("post", 4).postscale = 2.0;
  p.allreduce("f32.b", 4);
  p.allreduce("i32.b", 4, DataType::kInt32);
  p.allreduce("avg.b", 4).reduce_op = ReduceOp::kAverage;
  p.allreduce("f64", 4, DataType::kFloat64);
  EXPECT_EQ(names_of(p.run(1 << 20)),
            (Names{{"f32", "f32.b"}, {"i32", "i32.b"}, {"avg", "avg.b"}, {"pre"}, {"post"}, {"f64"}}));
}

TEST(FusionPlannerTest, AdasumFusesOnlyWithAdasum) {
  // Adasum combines each fused tensor with its own coefficients; a Sum packed
  // with it would be reduced by the wrong rule.
  Plan p;
  p.allreduce("sum", 4);
  p.allreduce("ada", 4).reduce_op = ReduceOp::kAdasum;
  p.allreduce("sum.b", 4);
  p.allreduce("ada.b", 4).reduce_op = ReduceOp::kAdasum;
  p.allreduce("avg", 4).reduce_op = ReduceOp::kAverage;
  p.allreduce("ada.f64", 4, DataType::kFloat64).reduce_op = ReduceOp::kAdasum;
  EXPECT_EQ(names_of(p.run(1 << 20)), (Names{{"sum", "sum.b"}, {"ada", "ada.b"}, {"avg"}, {"ada.f64"}}));
}

TEST(FusionPlannerTest, OpLargerThanThresholdStaysAlone) {
  Plan p;
  p.allreduce("small1", 4);   // 16 bytes
  p.allreduce("big", 1000);   // 4000 bytes
  p.allreduce("small2", 4);
  p.allreduce("big2", 1000);
  p.allreduce("small3", 4);
  EXPECT_EQ(names_of(p.run(100)), (Names{{"small1", "small2", "small3"}, {"big"}, {"big2"}}));

  Plan first;
  first.allreduce("big", 1000);
  first.allreduce("small", 1);
  EXPECT_EQ(names_of(first.run(100)), (Names{{"big"}, {"small"}}));
}

TEST(FusionPlannerTest, OtherResponsesKeepTheirRelativePositions) {
  Plan p;
  p.add("bcast", OpType::kBroadcast, 4);
  p.allreduce("a", 4);
  p.allreduce("bad", 4);
  p.last().error = "Mismatched allreduce 'bad' on process set 1: shape differs";
  p.add("gather", OpType::kAllgather, 4);
  p.allreduce("b", 4);
  p.add("rs", OpType::kReducescatter, 4);
  p.add("a2a", OpType::kAlltoall, 4);
  p.allreduce("bad2", 4);
  p.last().error = "Mismatched allreduce 'bad2' on process set 1: dtype differs";
  p.add("barrier", OpType::kBarrier, 0);
  p.allreduce("c", 4);
  std::vector<Response> planned = p.run(1 << 20);
  EXPECT_EQ(names_of(planned),
            (Names{{"bcast"}, {"a", "b", "c"}, {"bad"}, {"gather"}, {"rs"}, {"a2a"}, {"bad2"}, {"barrier"}}));
  EXPECT_EQ(planned[2].error, "Mismatched allreduce 'bad' on process set 1: shape differs");
  EXPECT_EQ(planned[6].error, "Mismatched allreduce 'bad2' on process set 1: dtype differs");
  EXPECT_EQ(planned[1].error, "");
  EXPECT_EQ(planned[4].op, OpType::kReducescatter);
}

TEST(FusionPlannerTest, SizesOfOtherResponsesAreKept) {
  Plan p;
  p.add("gather", OpType::kAllgather, 4);
  p.last().sizes = {1, 2, 3};
  p.allreduce("a", 4);
  std::vector<Response> planned = p.run(1 << 20);
  ASSERT_EQ(planned.size(), 2u);
  EXPECT_EQ(planned[0].sizes, (std::vector<int64_t>{1, 2, 3}));
}

TEST(FusionPlannerTest, CacheFlagsAndSlotsTravelWithTheirNames) {
  Plan p;
  p.allreduce("a", 4);
  p.last().cache = {1};
  p.allreduce("i", 4, DataType::kInt32);
  p.last().slots = {9};
  p.allreduce("b", 4);
  p.last().slots = {0};
  p.allreduce("j", 4, DataType::kInt32);
  p.last().cache = {1};
  p.allreduce("c", 4);
  p.last().slots = {12};
  std::vector<Response> planned = p.run(1 << 20);
  ASSERT_EQ(names_of(planned), (Names{{"a", "b", "c"}, {"i", "j"}}));
  EXPECT_EQ(planned[0].cache, (std::vector<uint8_t>{1, 0, 0}));
  EXPECT_EQ(planned[0].slots, (std::vector<int32_t>{-1, 0, 12}));
  EXPECT_EQ(planned[1].cache, (std::vector<uint8_t>{0, 1}));
  EXPECT_EQ(planned[1].slots, (std::vector<int32_t>{9, -1}));
}

TEST(FusionPlannerTest, EmptyTensorsFuse) {
  Plan p;
  p.allreduce("empty", 0);
  p.allreduce("a", 4);
  p.allreduce("empty2", 0);
  EXPECT_EQ(names_of(p.run(64)), (Names{{"empty", "a", "empty2"}}));
}

}  // namespace
}  // namespace hora
