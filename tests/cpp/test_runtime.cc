// Every collective through the Runtime, with ranks as threads over the local
// backend: 1 to 4 ranks, overlapping process sets, errors.
#include <gtest/gtest.h>

#include <atomic>
#include <exception>
#include <functional>
#include <numeric>
#include <thread>
#include <vector>

#include "hora/errors.h"
#include "hora/runtime.h"
#include "transport/backend.h"

namespace hora {
namespace {

using RankFn = std::function<void(Runtime&)>;

// Runs `fn` on `n` ranks as threads, each with its own Runtime over one
// shared in-memory store; rethrows the first failure.
void run_ranks(int n, const RankFn& fn, const std::vector<std::vector<int>>& initial_sets = {},
               bool stream_agreement = true) {
  auto store = make_hash_store();
  std::vector<std::exception_ptr> errors(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      try {
        RuntimeConfig config;
        config.rank = r;
        config.size = n;
        config.timeout = std::chrono::seconds(20);
        config.start_timeout = std::chrono::seconds(20);
        config.stream_agreement = stream_agreement;
        Runtime runtime(config, store, make_local_backend_factory(), initial_sets);
        fn(runtime);
      } catch (...) {
        errors[r] = std::current_exception();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
}

TensorView view(std::vector<float>& v) { return {v.data(), DataType::kFloat32, {static_cast<int64_t>(v.size())}}; }
TensorView view(std::vector<int64_t>& v) { return {v.data(), DataType::kInt64, {static_cast<int64_t>(v.size())}}; }

OpArgs args(OpType op, TensorView in, TensorView out = {}, std::string name = "") {
  OpArgs a;
  a.op = op;
  a.input = std::move(in);
  a.output = std::move(out);
  a.name = std::move(name);
  return a;
}

void wait(const std::shared_ptr<Work>& w) { w->wait(); }

class WorldSize : public ::testing::TestWithParam<int> {};

TEST_P(WorldSize, AllreduceSumAverageMinMax) {
  const int n = GetParam();
  run_ranks(n, [n](Runtime& rt) {
    std::vector<float> in = {float(rt.rank()), 1.0f, float(-rt.rank())}, out(3);
    OpArgs a = args(OpType::kAllreduce, view(in), view(out));
    wait(rt.enqueue(0, a));
    float ranks_sum = n * (n - 1) / 2.0f;
    EXPECT_EQ(out, (std::vector<float>{ranks_sum, float(n), -ranks_sum}));
    a.reduce_op = ReduceOp::kAverage;
    wait(rt.enqueue(0, a));
    EXPECT_FLOAT_EQ(out[0], ranks_sum / n);
    EXPECT_FLOAT_EQ(out[1], 1.0f);
    a.reduce_op = ReduceOp::kMax;
    wait(rt.enqueue(0, a));
    EXPECT_EQ(out[0], float(n - 1));
    a.reduce_op = ReduceOp::kMin;
    a.prescale = 2.0;
    a.postscale = 0.5;
    wait(rt.enqueue(0, a));
    EXPECT_EQ(out[2], float(-(n - 1)));
  });
}

TEST_P(WorldSize, AllgatherWithDifferentFirstDims) {
  const int n = GetParam();
  run_ranks(n, [n](Runtime& rt) {
    // Rank r contributes r+1 rows of 2 values, each equal to r.
    std::vector<int64_t> in(2 * (rt.rank() + 1), rt.rank());
    TensorView v{in.data(), DataType::kInt64, {rt.rank() + 1, 2}};
    auto work = rt.enqueue(0, args(OpType::kAllgather, v));
    work->wait();
    std::vector<int64_t> expected;
    for (int r = 0; r < n; ++r) expected.insert(expected.end(), 2 * (r + 1), r);
    ASSERT_EQ(work->output_shape(), (std::vector<int64_t>{n * (n + 1) / 2, 2}));
    auto* got = reinterpret_cast<const int64_t*>(work->output_data());
    EXPECT_EQ(std::vector<int64_t>(got, got + expected.size()), expected);
  });
}

TEST_P(WorldSize, BroadcastFromEveryRoot) {
  const int n = GetParam();
  run_ranks(n, [n](Runtime& rt) {
    for (int root = 0; root < n; ++root) {
      std::vector<float> in(4, float(rt.rank() * 10)), out(4);
      OpArgs a = args(OpType::kBroadcast, view(in), view(out));
      a.root = root;
      wait(rt.enqueue(0, a));
      EXPECT_EQ(out, std::vector<float>(4, float(root * 10)));
    }
  });
}

TEST_P(WorldSize, AlltoallWithUnevenSplits) {
  const int n = GetParam();
  run_ranks(n, [n](Runtime& rt) {
    // Rank r sends p+1 rows to member p, each row holding 100*r + p.
    std::vector<int64_t> in, splits;
    for (int p = 0; p < n; ++p) {
      splits.push_back(p + 1);
      in.insert(in.end(), p + 1, 100 * rt.rank() + p);
    }
    OpArgs a = args(OpType::kAlltoall, view(in));
    a.splits = splits;
    auto work = rt.enqueue(0, a);
    work->wait();
    std::vector<int64_t> expected;
    for (int s = 0; s < n; ++s) expected.insert(expected.end(), rt.rank() + 1, 100 * s + rt.rank());
    auto* got = reinterpret_cast<const int64_t*>(work->output_data());
    EXPECT_EQ(std::vector<int64_t>(got, got + work->output_bytes() / 8), expected);
    EXPECT_EQ(work->received_splits(), std::vector<int64_t>(n, rt.rank() + 1));
  });
}

TEST_P(WorldSize, ReducescatterGivesLowRanksTheExtraRows) {
  const int n = GetParam();
  run_ranks(n, [n](Runtime& rt) {
    const int64_t rows = n + 1;  // never divides evenly for n > 1
    std::vector<float> in(rows);
    std::iota(in.begin(), in.end(), 0.0f);
    int64_t mine = rows / n + (rt.rank() < rows % n ? 1 : 0);
    int64_t first = rt.rank() * (rows / n) + std::min<int64_t>(rt.rank(), rows % n);
    std::vector<float> out(mine);
    wait(rt.enqueue(0, args(OpType::kReducescatter, view(in), view(out))));
    for (int64_t i = 0; i < mine; ++i) EXPECT_EQ(out[i], float(n * (first + i)));
  });
}

TEST_P(WorldSize, BarrierAndManyFusedAllreduces) {
  const int n = GetParam();
  run_ranks(n, [n](Runtime& rt) {
    wait(rt.enqueue(0, args(OpType::kBarrier, {})));
    for (int step = 0; step < 3; ++step) {  // later steps hit the response cache
      std::vector<std::vector<float>> ins(20), outs(20);
      std::vector<std::shared_ptr<Work>> works;
      for (int i = 0; i < 20; ++i) {
        ins[i].assign(i + 1, float(i + step));
        outs[i].resize(i + 1);
        works.push_back(rt.enqueue(0, args(OpType::kAllreduce, view(ins[i]), view(outs[i]), "g" + std::to_string(i))));
      }
      for (int i = 0; i < 20; ++i) {
        works[i]->wait();
        EXPECT_EQ(outs[i], std::vector<float>(i + 1, float(n * (i + step))));
      }
    }
  });
}

INSTANTIATE_TEST_SUITE_P(Ranks, WorldSize, ::testing::Values(1, 2, 3, 4));

TEST(ProcessSets, OverlappingSetsRunInAnyOrder) {
  // Sets 1=[0,2], 2=[1,3], 3=[1,2,3]; ranks in two sets submit to both, in
  // opposite orders on different ranks.
  run_ranks(4, [](Runtime& rt) {
    std::vector<int32_t> mine;
    for (const ProcessSet& s : rt.process_sets())
      if (s.id != 0 && s.included()) mine.push_back(s.id);
    if (rt.rank() % 2) std::reverse(mine.begin(), mine.end());
    std::vector<std::vector<float>> ins, outs;
    ins.reserve(4);
    outs.reserve(4);
    std::vector<std::pair<int32_t, std::shared_ptr<Work>>> works;
    for (int32_t id : mine) {
      ins.push_back({float(rt.rank())});
      outs.push_back({0.0f});
      works.push_back({id, rt.enqueue(id, args(OpType::kAllreduce, view(ins.back()), view(outs.back())))});
    }
    for (size_t i = 0; i < works.size(); ++i) {
      works[i].second->wait();
      float expected = 0;
      for (int r : rt.process_set(works[i].first).ranks) expected += r;
      EXPECT_EQ(outs[i][0], expected) << "set " << works[i].first;
    }
  }, {{0, 2}, {1, 3}, {1, 2, 3}});
}

TEST(ProcessSets, MismatchedShapesFailOnEveryMemberNamingRanks) {
  run_ranks(3, [](Runtime& rt) {
    std::vector<float> in(rt.rank() == 1 ? 3 : 2, 1.0f), out(in.size());
    auto work = rt.enqueue(0, args(OpType::kAllreduce, view(in), view(out), "grad"));
    try {
      work->wait();
      ADD_FAILURE() << "expected a mismatch";
    } catch (const Mismatch& e) {
      std::string what = e.what();
      EXPECT_NE(what.find("'grad'"), std::string::npos) << what;
      EXPECT_NE(what.find("[2] on ranks 0, 2"), std::string::npos) << what;
      EXPECT_NE(what.find("[3] on rank 1"), std::string::npos) << what;
    }
    // The set still works afterwards.
    std::vector<float> ok(1, 1.0f), sum(1);
    wait(rt.enqueue(0, args(OpType::kAllreduce, view(ok), view(sum))));
    EXPECT_EQ(sum[0], 3.0f);
  });
}

// Repeated ops on a set without shared memory (ranks as threads: the
// stream agreement, or every op negotiated): small ones whose inputs the
// records carry, larger ones on the data plane, asynchronous ones run by
// the engine thread, and a mismatch of a cached op in the middle, which
// fails on every member and leaves the op agreed again afterwards.
void repeated_ops_with_a_mismatch(bool stream_agreement) {
  run_ranks(3, [](Runtime& rt) {
    const int me = rt.rank();
    for (int step = 0; step < 12; ++step) {
      std::vector<float> small(3, float(me + step)), small_out(3);
      std::vector<float> large(2000, float(me)), large_out(2000);
      OpArgs average = args(OpType::kAllreduce, view(small), view(small_out), "small");
      average.reduce_op = ReduceOp::kAverage;
      if (step == 6) {
        // Rank 2 sends 'small' with another shape: every member's fails.
        std::vector<float> odd(me == 2 ? 4 : 3, 1.0f), odd_out(odd.size());
        OpArgs mismatched = args(OpType::kAllreduce, view(odd), view(odd_out), "small");
        mismatched.reduce_op = ReduceOp::kAverage;
        EXPECT_THROW(wait(rt.enqueue(0, mismatched)), Mismatch) << "rank " << me;
        continue;
      }
      auto later = rt.enqueue(0, args(OpType::kAllreduce, view(large), view(large_out), "large"));
      average.caller_waits = step % 2 == 0;
      wait(rt.enqueue(0, average));
      wait(later);
      EXPECT_EQ(small_out, std::vector<float>(3, float(step) + 1.0f)) << "step " << step << ", rank " << me;
      EXPECT_EQ(large_out, std::vector<float>(2000, 3.0f)) << "step " << step << ", rank " << me;
    }
  }, {}, stream_agreement);
}

TEST(ProcessSets, RepeatedOpsAndAMismatchWithTheStreamAgreement) { repeated_ops_with_a_mismatch(true); }
TEST(ProcessSets, RepeatedOpsAndAMismatchWithEveryOpNegotiated) { repeated_ops_with_a_mismatch(false); }

TEST(ProcessSets, MembersOnlyCreationAndRemoval) {
  std::atomic<bool> outsider_done{false};
  run_ranks(3, [&](Runtime& rt) {
    if (rt.rank() == 2) {
      ProcessSet s = rt.add_process_set({0, 1});  // a non-member returns at once
      EXPECT_EQ(s.id, -1);
      outsider_done = true;
      return;
    }
    while (!outsider_done) std::this_thread::yield();  // members start after the outsider finished
    ProcessSet s = rt.add_process_set({1, 0});
    EXPECT_EQ(s.ranks, (std::vector<int>{0, 1}));
    EXPECT_GE(s.id, 1);
    std::vector<float> in(1, 2.0f), out(1);
    wait(rt.enqueue(s.id, args(OpType::kAllreduce, view(in), view(out))));
    EXPECT_EQ(out[0], 4.0f);
    EXPECT_TRUE(rt.remove_process_set(s.id));
    EXPECT_THROW(rt.enqueue(s.id, args(OpType::kAllreduce, view(in), view(out))), InvalidArgument);
    ProcessSet again = rt.add_process_set({0, 1});
    EXPECT_GT(again.id, s.id) << "ids are never reused";
    wait(rt.enqueue(again.id, args(OpType::kAllreduce, view(in), view(out))));
    EXPECT_EQ(out[0], 4.0f);
    EXPECT_FALSE(rt.remove_process_set(0));
  });
}

TEST(ProcessSets, InvalidArgumentsAreRefused) {
  run_ranks(2, [](Runtime& rt) {
    EXPECT_THROW(rt.add_process_set({-1}), InvalidArgument);
    EXPECT_THROW(rt.add_process_set({2}), InvalidArgument);
    EXPECT_THROW(rt.add_process_set({0, 0}), InvalidArgument);
    EXPECT_THROW(rt.add_process_set({}), InvalidArgument);
    std::vector<float> in(4), out(3);
    EXPECT_THROW(rt.enqueue(0, args(OpType::kAllreduce, view(in), view(out))), InvalidArgument);
    OpArgs bad_root = args(OpType::kBroadcast, view(in), view(in));
    bad_root.root = 5;
    EXPECT_THROW(rt.enqueue(0, bad_root), InvalidArgument);
    OpArgs bad_splits = args(OpType::kAlltoall, view(in));
    bad_splits.splits = {1, 1};
    EXPECT_THROW(rt.enqueue(0, bad_splits), InvalidArgument);
    bad_splits.splits = {4};
    EXPECT_THROW(rt.enqueue(0, bad_splits), InvalidArgument);
    EXPECT_THROW(rt.enqueue(7, args(OpType::kBarrier, {})), InvalidArgument);
  });
}

}  // namespace
}  // namespace hora
