// Join through the Runtime, with ranks as threads over the local and the
// Gloo backends: members that run out of data join, the others keep
// running allreduces to which the joined members contribute zeros (as in
// Horovod), other ops fail clearly while a member has joined, and join
// returns the last rank to join on every member.
#include <gtest/gtest.h>

#include <barrier>
#include <cstring>
#include <functional>
#include <latch>
#include <mutex>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "hora/errors.h"
#include "hora/runtime.h"
#include "transport/backend.h"

namespace hora {
namespace {

using RankFn = std::function<void(Runtime&)>;

std::unique_ptr<BackendFactory> make_factory(const std::string& kind) {
  return kind == "gloo" ? make_gloo_backend_factory("127.0.0.1") : make_local_backend_factory();
}

// Runs `fn` on `n` ranks as threads, each with its own Runtime over one
// shared in-memory store; an exception on any rank fails the test.
void run_ranks(const std::string& kind, int n, const RankFn& fn, const std::vector<std::vector<int>>& sets = {},
               std::chrono::milliseconds timeout = std::chrono::seconds(30)) {
  auto store = make_hash_store();
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      try {
        RuntimeConfig config;
        config.rank = r;
        config.size = n;
        config.timeout = timeout;
        config.start_timeout = std::chrono::seconds(30);
        Runtime runtime(config, store, make_factory(kind), sets);
        fn(runtime);
      } catch (const std::exception& e) {
        ADD_FAILURE() << kind << " rank " << r << ": " << e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
}

template <typename T>
TensorView view(std::vector<T>& v, DataType dtype) {
  return {v.data(), dtype, {static_cast<int64_t>(v.size())}};
}
TensorView view(std::vector<float>& v) { return view(v, DataType::kFloat32); }

OpArgs op(OpType type, TensorView in, TensorView out = {}, std::string name = "") {
  OpArgs a;
  a.op = type;
  a.input = std::move(in);
  a.output = std::move(out);
  a.name = std::move(name);
  return a;
}

std::shared_ptr<Work> join(Runtime& rt, int32_t set) { return rt.enqueue(set, op(OpType::kJoin, {})); }

// Waits for a join and returns its output: the rank that joined last.
int32_t last_joined(const std::shared_ptr<Work>& work) {
  work->wait();
  EXPECT_EQ(work->output_shape(), std::vector<int64_t>{1});
  EXPECT_EQ(work->output_bytes(), sizeof(int32_t));
  int32_t rank = -1;
  std::memcpy(&rank, work->output_data(), sizeof rank);
  return rank;
}

float sum_over(Runtime& rt, int32_t set, float mine, const std::string& name = "") {
  std::vector<float> in{mine}, out(1);
  rt.enqueue(set, op(OpType::kAllreduce, view(in), view(out), name))->wait();
  return out[0];
}

// The Mismatch text `work` fails with (fails the test otherwise).
std::string mismatch(const std::shared_ptr<Work>& work) {
  try {
    work->wait();
  } catch (const Mismatch& e) {
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "expected a Mismatch, got: " << e.what();
    return "";
  }
  ADD_FAILURE() << "the op succeeded";
  return "";
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

class JoinParamTest : public ::testing::TestWithParam<std::tuple<std::string, int>> {};

// Rank r runs r+1 steps, then joins: at step s the ranks below s have
// joined and contribute zeros. Every step fuses two Sum allreduces and runs
// an Average (divided by the full set size, as Horovod's tests expect), an
// int64 Sum and an allreduce named after the step; names repeat across
// steps, so later steps come through the response cache.
TEST_P(JoinParamTest, UnevenAllreducesThenJoin) {
  const auto [kind, n] = GetParam();
  run_ranks(kind, n, [n = n](Runtime& rt) {
    const int me = rt.rank();
    for (int step = 0; step <= me; ++step) {
      std::vector<float> a(5, float(me + 1)), a_out(5), b(17, float(me + 1)), b_out(17);
      std::vector<float> avg(3, float(me + 1)), avg_out(3), x{float(me + 1)}, x_out(1);
      std::vector<int64_t> i(2, int64_t{1} << (me + 2)), i_out(2);
      OpArgs average = op(OpType::kAllreduce, view(avg), view(avg_out), "avg");
      average.reduce_op = ReduceOp::kAverage;
      std::vector<std::shared_ptr<Work>> works = {
          rt.enqueue(0, op(OpType::kAllreduce, view(a), view(a_out), "a")),
          rt.enqueue(0, op(OpType::kAllreduce, view(b), view(b_out), "b")), rt.enqueue(0, average),
          rt.enqueue(0, op(OpType::kAllreduce, view(i, DataType::kInt64), view(i_out, DataType::kInt64), "i")),
          rt.enqueue(0, op(OpType::kAllreduce, view(x), view(x_out), "x" + std::to_string(step)))};
      for (auto& w : works) w->wait();
      float active = 0;
      int64_t active_bits = 0;
      for (int r = step; r < n; ++r) {
        active += float(r + 1);
        active_bits += int64_t{1} << (r + 2);
      }
      EXPECT_EQ(a_out, std::vector<float>(5, active)) << "step " << step;
      EXPECT_EQ(b_out, std::vector<float>(17, active)) << "step " << step;
      for (float v : avg_out) EXPECT_FLOAT_EQ(v, active / float(n)) << "step " << step;
      EXPECT_EQ(i_out, std::vector<int64_t>(2, active_bits)) << "step " << step;
      EXPECT_EQ(x_out[0], active) << "step " << step;
    }
    EXPECT_EQ(last_joined(join(rt, 0)), n - 1) << "rank " << me;
    // Every member, joined ones included, filled its response cache from
    // the same responses, so cache slots still mean the same op everywhere:
    // the names again, by everyone, then a new op cached and repeated.
    const float all = float(n * (n + 1) / 2);
    for (int step = 0; step < n; ++step) EXPECT_EQ(sum_over(rt, 0, float(me + 1), "x" + std::to_string(step)), all);
    for (int round = 0; round < 2; ++round) EXPECT_EQ(sum_over(rt, 0, float(me + 1), "after"), all);
  });
}

INSTANTIATE_TEST_SUITE_P(Backends, JoinParamTest,
                         ::testing::Combine(::testing::Values("local", "gloo"), ::testing::Values(2, 4)),
                         [](const auto& info) {
                           return std::get<0>(info.param) + "_" + std::to_string(std::get<1>(info.param));
                         });

TEST(Join, JoinedMemberContributesZerosWhateverTheReduction) {
  run_ranks("local", 2, [](Runtime& rt) {
    if (rt.rank() == 0) {
      EXPECT_EQ(last_joined(join(rt, 0)), 1);
      // The unnamed ops it stood in for count as its own: its next unnamed
      // op gets the name rank 1's gets.
      EXPECT_EQ(sum_over(rt, 0, 1.0f), 2.0f);
      return;
    }
    auto reduce = [&](ReduceOp reduce_op, std::vector<float> in) {
      std::vector<float> out(in.size());
      OpArgs a = op(OpType::kAllreduce, view(in), view(out));
      a.reduce_op = reduce_op;
      rt.enqueue(0, a)->wait();
      return out;
    };
    EXPECT_EQ(reduce(ReduceOp::kMax, {-3, 2}), (std::vector<float>{0, 2}));
    EXPECT_EQ(reduce(ReduceOp::kMin, {5, -1}), (std::vector<float>{0, -1}));
    EXPECT_EQ(reduce(ReduceOp::kProduct, {7}), (std::vector<float>{0}));
    EXPECT_EQ(reduce(ReduceOp::kAdasum, {-3, 2}), (std::vector<float>{-3, 2})) << "a zero vector leaves Adasum alone";
    EXPECT_EQ(last_joined(join(rt, 0)), 1);
    EXPECT_EQ(sum_over(rt, 0, 1.0f), 2.0f);
  });
}

// As in Horovod, only allreduce and barrier run while a member has joined;
// the others fail on the members that submitted them, naming the joined
// rank, and the set keeps working.
TEST(Join, OtherOpsFailWhileAMemberHasJoined) {
  std::mutex mutex;
  std::vector<int32_t> returned;
  run_ranks("local", 3, [&](Runtime& rt) {
    const int me = rt.rank();
    int32_t last = -1;
    if (me == 1) {
      last = last_joined(join(rt, 0));
    } else {
      std::vector<float> in(4, float(me)), out(4), rows(2, 1.0f), part(me == 0 ? 1 : 0);  // 2 rows over 3
      for (int root : {0, 1}) {  // a joined non-root, then a joined root
        OpArgs bcast = op(OpType::kBroadcast, view(in), view(out), "bcast" + std::to_string(root));
        bcast.root = root;
        const std::string e = mismatch(rt.enqueue(0, bcast));
        EXPECT_TRUE(contains(e, "broadcast 'bcast" + std::to_string(root) + "'")) << e;
        EXPECT_TRUE(contains(e, "global rank(s) [1] called join()")) << e;
      }
      EXPECT_TRUE(contains(mismatch(rt.enqueue(0, op(OpType::kAllgather, view(in), {}, "gather"))), "[1]"));
      OpArgs a2a = op(OpType::kAlltoall, view(in), {}, "a2a");
      a2a.splits = {2, 1, 1};
      EXPECT_TRUE(contains(mismatch(rt.enqueue(0, a2a)), "alltoall 'a2a'"));
      EXPECT_TRUE(
          contains(mismatch(rt.enqueue(0, op(OpType::kReducescatter, view(rows), view(part), "rs"))), "join()"));
      rt.enqueue(0, op(OpType::kBarrier, {}))->wait();
      EXPECT_EQ(sum_over(rt, 0, float(me + 1)), 4.0f);
      last = last_joined(join(rt, 0));
      EXPECT_NE(last, 1) << "rank 1 joined first";
    }
    std::lock_guard<std::mutex> lock(mutex);
    returned.push_back(last);
  });
  ASSERT_EQ(returned.size(), 3u);
  for (int32_t r : returned) EXPECT_EQ(r, returned.front()) << "join returned different ranks";
}

// Horovod's tests call join repeatedly: each round starts from a normal set.
TEST(Join, RoundsOfJoinOnTheSameSet) {
  std::mutex mutex;
  std::vector<std::vector<int32_t>> returned(3);
  run_ranks("local", 4, [&](Runtime& rt) {
    const int me = rt.rank();
    for (int round = 0; round < 3; ++round) {
      const int first = round;  // joins at once; the others run one allreduce first
      if (me != first) EXPECT_EQ(sum_over(rt, 0, float(me + 1), "grad"), float(10 - (first + 1)));
      int32_t last = last_joined(join(rt, 0));
      EXPECT_NE(last, first);
      std::lock_guard<std::mutex> lock(mutex);
      returned[round].push_back(last);
    }
    EXPECT_EQ(sum_over(rt, 0, float(me + 1), "grad"), 10.0f) << "after the rounds nobody is joined";
  });
  for (const auto& round : returned) {
    ASSERT_EQ(round.size(), 4u);
    for (int32_t r : round) EXPECT_EQ(r, round.front());
  }
}

// Join is per process set: rank 0 joins set 1 = [0, 1] and keeps working
// in the global set meanwhile; set 2 = [2, 3] is not touched.
TEST(Join, JoinOnOneSetWhileOtherSetsRun) {
  run_ranks("local", 4, [](Runtime& rt) {
    const int me = rt.rank();
    std::shared_ptr<Work> joined = me == 0 ? join(rt, 1) : nullptr;
    for (int step = 0; step < 3; ++step) EXPECT_EQ(sum_over(rt, 0, float(me), "world"), 6.0f);
    if (me == 1) {
      for (int step = 0; step < 2; ++step) EXPECT_EQ(sum_over(rt, 1, 5.0f, "pair"), 5.0f);
      joined = join(rt, 1);
    }
    if (me >= 2)
      for (int step = 0; step < 3; ++step) EXPECT_EQ(sum_over(rt, 2, float(me), "pair"), 5.0f);
    if (joined) {
      EXPECT_EQ(last_joined(joined), 1);
    }
    EXPECT_EQ(sum_over(rt, 0, 1.0f), 4.0f);
  }, {{0, 1}, {2, 3}});
}

TEST(Join, JoinedMemberMaySubmitNothingUntilJoinReturns) {
  std::latch refused(1);  // rank 1 joins only after rank 0's refused submissions
  run_ranks("local", 2, [&](Runtime& rt) {
    std::vector<float> in{1.0f}, out(1);
    if (rt.rank() == 0) {
      auto joined = join(rt, 0);
      try {
        rt.enqueue(0, op(OpType::kAllreduce, view(in), view(out), "late"));
        ADD_FAILURE() << "an allreduce after join was accepted";
      } catch (const InvalidArgument& e) {
        EXPECT_TRUE(contains(e.what(), "called join() on process set 0")) << e.what();
        EXPECT_TRUE(contains(e.what(), "allreduce 'late'")) << e.what();
      }
      EXPECT_THROW(join(rt, 0), InvalidArgument);
      refused.count_down();
      EXPECT_EQ(last_joined(joined), 1);
    } else {
      refused.wait();
      EXPECT_EQ(sum_over(rt, 0, 2.0f), 2.0f);
      EXPECT_EQ(last_joined(join(rt, 0)), 1);
    }
    EXPECT_EQ(sum_over(rt, 0, 1.0f, "late"), 2.0f) << "the set is usable after join returned";
  });
}

// A member may stay joined far longer than the op timeout while the others
// work (or, here, sleep): a join waits for members, not for an op.
TEST(Join, LongJoinIsNotAStall) {
  run_ranks("local", 2, [](Runtime& rt) {
    if (rt.rank() == 1) {
      EXPECT_EQ(last_joined(join(rt, 0)), 0);
      return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2000));
    EXPECT_EQ(sum_over(rt, 0, 1.0f), 1.0f);
    EXPECT_EQ(last_joined(join(rt, 0)), 0);
  }, {}, std::chrono::milliseconds(300));
}

TEST(Join, SingleMemberJoinReturnsItself) {
  run_ranks("local", 1, [](Runtime& rt) { EXPECT_EQ(last_joined(join(rt, 0)), 0); });
}

// A joined member that dies (goes without a goodbye) still breaks the set
// (docs/fault_tolerance.md).
TEST(Join, JoinedMemberThatDiesBreaksTheSet) {
  std::barrier<> joined_and_used(3), gone(3);
  run_ranks("local", 3, [&](Runtime& rt) {
    if (rt.rank() == 2) {
      auto joined = join(rt, 0);
      joined_and_used.arrive_and_wait();
      rt.shutdown(/*goodbye=*/false);
      EXPECT_THROW(joined->wait(), InvalidArgument);
      gone.arrive_and_wait();
      return;
    }
    EXPECT_EQ(sum_over(rt, 0, 1.0f, "step"), 2.0f);  // rank 2 took part with zeros
    joined_and_used.arrive_and_wait();
    gone.arrive_and_wait();
    std::vector<float> in{1.0f}, out(1);
    try {
      rt.enqueue(0, op(OpType::kAllreduce, view(in), view(out), "after"))->wait();
      ADD_FAILURE() << "the set survived the death of a joined member";
    } catch (const PeerFailure& e) {
      EXPECT_TRUE(contains(e.what(), "missing global rank(s) [2]")) << e.what();
    }
  });
}

}  // namespace
}  // namespace hora
