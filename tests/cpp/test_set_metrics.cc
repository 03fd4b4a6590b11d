// Per-set counters against known traffic: N allreduces of B bytes count N
// ops and N*B bytes on every member; other kinds, mismatches and cache hits
// are counted where they happen; the coordinator names the slowest member.
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "hora/errors.h"
#include "hora/runtime.h"
#include "ranks_as_threads.h"

namespace hora {
namespace {

using test_support::run_ranks;

TensorView view(std::vector<float>& v) { return {v.data(), DataType::kFloat32, {static_cast<int64_t>(v.size())}}; }

OpArgs op_args(OpType op, std::vector<float>& in, std::vector<float>& out, const std::string& name) {
  OpArgs a;
  a.op = op;
  a.input = view(in);
  if (!out.empty()) a.output = view(out);
  a.name = name;
  return a;
}

TEST(SetMetrics, CountOpsAndBytesExactlyOnEveryMember) {
  static constexpr int kSteps = 7;
  run_ranks(3, [](Runtime& rt) {
    std::vector<float> grad(10, 1.0f), out(10), token(3, 2.0f);
    for (int step = 0; step < kSteps; ++step) rt.enqueue(0, op_args(OpType::kAllreduce, grad, out, "grad"))->wait();
    std::vector<float> none;
    for (int step = 0; step < 2; ++step) rt.enqueue(0, op_args(OpType::kAllgather, token, none, "token"))->wait();
    rt.enqueue(0, op_args(OpType::kBarrier, none, none, "sync"))->wait();
    const SetMetrics m = rt.metrics(0);
    EXPECT_EQ(m.ops.at("allreduce"), kSteps);
    EXPECT_EQ(m.bytes.at("allreduce"), kSteps * 10 * 4);
    EXPECT_EQ(m.ops.at("allgather"), 2);
    EXPECT_EQ(m.bytes.at("allgather"), 2 * 3 * 4);
    EXPECT_EQ(m.ops.at("barrier"), 1);
    EXPECT_EQ(m.responses, kSteps + 3);
    EXPECT_EQ(m.tensors, kSteps + 3);
    // The first "grad" is negotiated in full, the rest hit the response
    // cache; allgathers are never cached (their sizes vary), the barrier
    // was looked up once.
    EXPECT_EQ(m.cache_lookups, kSteps + 1);
    EXPECT_EQ(m.cache_hits, kSteps - 1);
    // The members agree on the repeats among themselves (the stream
    // agreement), not through the coordinator.
    EXPECT_EQ(m.fast_path_hits, kSteps - 1);
    EXPECT_GT(m.negotiation_seconds, 0.0);
    EXPECT_GT(m.transport_seconds, 0.0);
    EXPECT_EQ(m.errors, 0);
    EXPECT_FALSE(m.broken);
    // Nobody leaves (which breaks the set for the others) before all have
    // read their counters.
    rt.enqueue(0, op_args(OpType::kBarrier, none, none, "end"))->wait();
  });
}

TEST(SetMetrics, TheCoordinatorNamesTheSlowestMember) {
  run_ranks(3, [](Runtime& rt) {
    std::vector<float> x(4, 1.0f), out(4);
    for (int step = 0; step < 3; ++step) {
      if (rt.rank() == 2) std::this_thread::sleep_for(std::chrono::milliseconds(30));
      rt.enqueue(0, op_args(OpType::kAllreduce, x, out, "x" + std::to_string(step)))->wait();
    }
    const SetMetrics m = rt.metrics(0);
    if (rt.rank() == 0) {
      EXPECT_EQ(m.slowest_member, (std::map<int, int64_t>{{2, 3}}));
      EXPECT_GT(m.wait_for_slowest_seconds, 0.05);
    } else {
      EXPECT_TRUE(m.slowest_member.empty());
    }
  });
}

TEST(SetMetrics, AMismatchCountsAsAnError) {
  run_ranks(2, [](Runtime& rt) {
    std::vector<float> x(rt.rank() == 0 ? 4 : 5, 1.0f), out(x.size());
    EXPECT_THROW(rt.enqueue(0, op_args(OpType::kAllreduce, x, out, "x"))->wait(), Mismatch);
    const SetMetrics m = rt.metrics(0);
    EXPECT_EQ(m.errors, 1);
    EXPECT_EQ(m.ops.count("allreduce"), 0u);
  });
}

// After a mismatch of a repeated op the members agree on its repeats
// among themselves again, within a few instances.
TEST(SetMetrics, RepeatsAfterAMismatchTakeTheFastPathAgain) {
  static constexpr int kSteps = 20, kMismatch = 6, kInstancesToGiveBack = 4;
  run_ranks(3, [](Runtime& rt) {
    int64_t fast_after_mismatch = 0;
    for (int step = 0; step < kSteps; ++step) {
      if (step == kMismatch + 1) fast_after_mismatch = rt.metrics(0).fast_path_hits;
      std::vector<float> x(step == kMismatch && rt.rank() == 2 ? 5 : 4, 1.0f), out(x.size());
      if (step == kMismatch) {
        EXPECT_THROW(rt.enqueue(0, op_args(OpType::kAllreduce, x, out, "x"))->wait(), Mismatch);
        continue;
      }
      rt.enqueue(0, op_args(OpType::kAllreduce, x, out, "x"))->wait();
      EXPECT_EQ(out[0], 3.0f) << "step " << step;
    }
    const SetMetrics m = rt.metrics(0);
    EXPECT_EQ(m.errors, 1);
    EXPECT_GE(m.fast_path_hits - fast_after_mismatch, kSteps - kMismatch - 1 - kInstancesToGiveBack)
        << "rank " << rt.rank();
  });
}

TEST(SetMetrics, EachSetCountsItsOwnAndANonMemberAsksInVain) {
  run_ranks(
      3,
      [](Runtime& rt) {
        std::vector<float> x(2, 1.0f), out(2);
        if (rt.rank() < 2) {
          for (int i = 0; i < 4; ++i) rt.enqueue(1, op_args(OpType::kAllreduce, x, out, "a"))->wait();
          EXPECT_EQ(rt.metrics(1).ops.at("allreduce"), 4);
        } else {
          try {
            rt.metrics(1);
            ADD_FAILURE() << "metrics of a set this rank is not in";
          } catch (const InvalidArgument& e) {
            EXPECT_NE(std::string(e.what()).find("process set 1 is not a live set this rank (global rank 2)"),
                      std::string::npos)
                << e.what();
          }
        }
        EXPECT_TRUE(rt.metrics(0).ops.empty());
      },
      {{0, 1}});
}

}  // namespace
}  // namespace hora
