// Op names on one rank and one process set are unique while the ops are in
// flight: a second op of the same name is refused at once on the rank that
// submitted it, and neither the first op nor the set suffers.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "hora/errors.h"
#include "ranks_as_threads.h"

namespace hora {
namespace {

using test_support::run_ranks;

OpArgs allreduce(std::vector<float>& in, std::vector<float>& out, const std::string& name) {
  OpArgs a;
  a.op = OpType::kAllreduce;
  a.name = name;
  a.input = {in.data(), DataType::kFloat32, {static_cast<int64_t>(in.size())}};
  a.output = {out.data(), DataType::kFloat32, {static_cast<int64_t>(out.size())}};
  return a;
}

void wait_for(const std::atomic<bool>& flag) {
  while (!flag) std::this_thread::sleep_for(std::chrono::milliseconds(1));
}

// Expects enqueue to throw InvalidArgument naming the op and the set.
void expect_duplicate(Runtime& rt, int32_t set_id, OpArgs args) {
  try {
    rt.enqueue(set_id, args);
    ADD_FAILURE() << "a second '" << args.name << "' was accepted";
  } catch (const InvalidArgument& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("'" + args.name + "'"), std::string::npos) << what;
    EXPECT_NE(what.find("process set " + std::to_string(set_id)), std::string::npos) << what;
  }
}

TEST(DuplicateNames, SecondOpInFlightIsRefusedAndTheFirstCompletes) {
  std::atomic<bool> refused{false};
  run_ranks(2, [&](Runtime& rt) {
    std::vector<float> in = {float(rt.rank() + 1)}, out(1);
    if (rt.rank() == 0) {
      // Rank 1 holds its "x" back, so rank 0's stays in flight.
      auto first = rt.enqueue(0, allreduce(in, out, "x"));
      std::vector<float> other(1);
      expect_duplicate(rt, 0, allreduce(in, other, "x"));
      refused = true;
      first->wait();
    } else {
      wait_for(refused);
      rt.enqueue(0, allreduce(in, out, "x"))->wait();
    }
    EXPECT_EQ(out[0], 3.0f);
    // Later ops run, and the name is free again once its op completed.
    rt.enqueue(0, allreduce(in, out, "x"))->wait();
    EXPECT_EQ(out[0], 3.0f);
    rt.enqueue(0, allreduce(in, out, "y"))->wait();
    EXPECT_EQ(out[0], 3.0f);
  });
}

TEST(DuplicateNames, SameNameOnAnotherSetIsAnotherOp) {
  run_ranks(2, [](Runtime& rt) {
    std::vector<float> in = {1.0f}, world(1), pair(1);
    auto a = rt.enqueue(0, allreduce(in, world, "x"));
    auto b = rt.enqueue(1, allreduce(in, pair, "x"));
    a->wait();
    b->wait();
    EXPECT_EQ(world[0], 2.0f);
    EXPECT_EQ(pair[0], 2.0f);
  }, {{0, 1}});
}

TEST(DuplicateNames, AFailedOpFreesItsName) {
  run_ranks(2, [](Runtime& rt) {
    std::vector<float> in(rt.rank() == 0 ? 2 : 3, 1.0f), out(in.size());
    EXPECT_THROW(rt.enqueue(0, allreduce(in, out, "m"))->wait(), Mismatch);
    std::vector<float> same(2, 1.0f), sum(2);
    rt.enqueue(0, allreduce(same, sum, "m"))->wait();
    EXPECT_EQ(sum, std::vector<float>(2, 2.0f));
  });
}

TEST(DuplicateNames, AnOpStaysClaimedWhileManyOthersComeAndGo) {
  // Hundreds of distinct names pass while "held" waits on rank 0: clearing
  // out completed names must keep the one still in flight.
  std::atomic<bool> done{false};
  run_ranks(2, [&](Runtime& rt) {
    std::vector<float> in = {1.0f}, held(1), out(1);
    std::shared_ptr<Work> first;
    if (rt.rank() == 0) first = rt.enqueue(0, allreduce(in, held, "held"));
    for (int i = 0; i < 300; ++i) rt.enqueue(0, allreduce(in, out, "step." + std::to_string(i)))->wait();
    EXPECT_EQ(out[0], 2.0f);
    if (rt.rank() == 0) {
      EXPECT_FALSE(first->ready());
      expect_duplicate(rt, 0, allreduce(in, out, "held"));
      done = true;
      first->wait();
    } else {
      wait_for(done);
      rt.enqueue(0, allreduce(in, held, "held"))->wait();
    }
    EXPECT_EQ(held[0], 2.0f);
  });
}

// Horovod's own tests submit a name twice in a row and expect the second
// call to fail, however quickly the first op finished: a name is free again
// only once this rank has seen its op finish (wait, or a ready() that said
// true) or has submitted another op since it finished.
TEST(DuplicateNames, ANameIsHeldUntilThisRankSawItsOpFinish) {
  std::atomic<bool> first_submitted{false};
  run_ranks(2, [&](Runtime& rt) {
    std::vector<float> in = {1.0f}, out(1), out2(1), y(1), again(1), z(1);
    if (rt.rank() == 0) {
      auto first = rt.enqueue(0, allreduce(in, out, "x"));
      first_submitted = true;
      rt.enqueue(0, allreduce(in, y, "y"))->wait();
      first->wait();
      rt.enqueue(0, allreduce(in, again, "x"))->wait();
      rt.enqueue(0, allreduce(in, z, "w"))->wait();
      rt.enqueue(0, allreduce(in, z, "w"))->wait();
      return;
    }
    wait_for(first_submitted);
    auto first = rt.enqueue(0, allreduce(in, out, "x"));
    // Wait for "x" to finish the way code that tracks an op on the caller's
    // behalf does (finished() marks nothing), then as if the handle had been
    // dropped: the caller itself never saw the op finish.
    while (!first->finished()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    EXPECT_EQ(out[0], 2.0f);
    expect_duplicate(rt, 0, allreduce(in, out2, "x"));
    rt.enqueue(0, allreduce(in, y, "y"))->wait();   // another op since "x" finished: the name is free
    rt.enqueue(0, allreduce(in, again, "x"))->wait();
    EXPECT_EQ(again[0], 2.0f);
    rt.enqueue(0, allreduce(in, z, "w"))->wait();  // waited for: the name is free at once
    rt.enqueue(0, allreduce(in, z, "w"))->wait();
    EXPECT_EQ(z[0], 2.0f);
  });
}

}  // namespace
}  // namespace hora
