// Process sets as fault domains, through the Runtime with ranks as threads
// over the local, Gloo and shared-memory backends: a rank that leaves, or never
// submits, fails the sets that contain it on every surviving member with a
// PeerFailure naming the set and the missing ranks; other sets keep working;
// stalls are reported; stopping never waits for a set that cannot finish.
//
// A rank "dies" here by shutting its Runtime down, which closes its
// connections the way a killed process's are closed. Timing assertions are
// only "before the timeout"; measured times are in benchmarks/.
#include <gtest/gtest.h>

#include <atomic>
#include <barrier>
#include <chrono>
#include <exception>
#include <functional>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include "hora/errors.h"
#include "hora/runtime.h"
#include "planner/transport_planner.h"
#include "transport/backend.h"

namespace hora {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;
using RankFn = std::function<void(Runtime&)>;

// Added to a timeout in "fails before the timeout" checks: the verdict
// takes a census window or two, and sanitizer builds are slow.
constexpr milliseconds kSlack{20'000};

std::unique_ptr<TransportPlanner> make_factory(const std::string& kind) {
  if (kind == "shm") return make_transport_planner(make_local_backend_factory(), {ShmOptions{}});
  if (kind == "tcp") return make_transport_planner(make_tcp_backend_factory(TcpOptions{}));
  return make_transport_planner(kind == "gloo" ? make_gloo_backend_factory("127.0.0.1") : make_local_backend_factory());
}

// Runs `fn` on `n` ranks as threads, each with its own Runtime (configured
// by `configure`) over one shared in-memory store; rethrows the first
// failure.
void run_ranks(const std::string& kind, int n, const RankFn& fn, const std::vector<std::vector<int>>& initial_sets,
               const std::function<void(RuntimeConfig&)>& configure = {}) {
  auto store = make_hash_store();
  std::vector<std::exception_ptr> errors(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      try {
        RuntimeConfig config;
        config.rank = r;
        config.size = n;
        config.timeout = milliseconds(60'000);
        config.start_timeout = milliseconds(60'000);
        if (configure) configure(config);
        Runtime runtime(config, store, make_factory(kind), initial_sets);
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

OpArgs allreduce_args(std::vector<float>& in, std::vector<float>& out, std::string name = "") {
  OpArgs a;
  a.op = OpType::kAllreduce;
  a.input = view(in);
  a.output = view(out);
  a.name = std::move(name);
  return a;
}

// The sum over set `id` of one float per member.
float sum_over(Runtime& rt, int32_t id, float mine, const std::string& name = "") {
  std::vector<float> in{mine}, out(1);
  rt.enqueue(id, allreduce_args(in, out, name))->wait();
  return out[0];
}

// What a PeerFailure from set `id` says (fails the test on anything else).
std::string peer_failure(Runtime& rt, int32_t id, const std::string& name = "") {
  std::vector<float> in{1.0f}, out(1);
  try {
    rt.enqueue(id, allreduce_args(in, out, name))->wait();
  } catch (const PeerFailure& e) {
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "rank " << rt.rank() << ": expected PeerFailure, got: " << e.what();
    return "";
  }
  ADD_FAILURE() << "rank " << rt.rank() << ": the op on set " << id << " succeeded";
  return "";
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

class FaultDomains : public ::testing::TestWithParam<std::string> {};

// Sets A=[0,1] (id 1) and B=[2,3] (id 2); rank 1 goes after a few steps
// without a goodbye (as a rank that dies: its connections just close).
TEST_P(FaultDomains, DepartedRankFailsItsSetsOnEverySurvivorAndOtherSetsKeepWorking) {
  std::barrier<> before_leaving(4), survivors(3);
  run_ranks(GetParam(), 4, [&](Runtime& rt) {
    const int me = rt.rank();
    const int32_t mine = me < 2 ? 1 : 2;
    for (int step = 0; step < 3; ++step) EXPECT_EQ(sum_over(rt, mine, 1.0f), 2.0f);
    before_leaving.arrive_and_wait();
    if (me == 1) {
      rt.shutdown(/*goodbye=*/false);
      return;
    }
    const auto start = Clock::now();
    if (me == 0) {
      const std::string a = peer_failure(rt, 1);
      EXPECT_TRUE(contains(a, "process set 1 [0, 1] is broken; missing global rank(s) [1]")) << a;
      // A broken set can be removed, and a new one made over the survivors.
      EXPECT_TRUE(rt.remove_process_set(1));
    } else {
      // B is untouched: its results are exact, step after step.
      for (int step = 0; step < 20; ++step) EXPECT_EQ(sum_over(rt, 2, float(me + step)), float(5 + 2 * step));
    }
    // The global set contains rank 1: it fails on every survivor, whichever
    // member saw the departure, naming the set and the rank.
    const std::string world = peer_failure(rt, 0);
    EXPECT_TRUE(contains(world, "process set 0 [0, 1, 2, 3] is broken; missing global rank(s) [1]")) << world;
    EXPECT_LT(Clock::now() - start, rt.config().timeout);
    // Ranks 2 and 3 gave the global set up (on Gloo: shut its connections
    // down); B, which shares their processes and transport, still works.
    if (me >= 2)
      for (int step = 0; step < 5; ++step) EXPECT_EQ(sum_over(rt, 2, float(me)), 5.0f);
    survivors.arrive_and_wait();
    ProcessSet rest = rt.add_process_set({0, 2, 3});
    EXPECT_EQ(sum_over(rt, rest.id, 1.0f), 3.0f);
  }, {{0, 1}, {2, 3}});
}

// The coordinator of a set leaves: its members see the closed connection.
TEST_P(FaultDomains, DepartedCoordinatorFailsTheSetOnItsMembers) {
  std::barrier<> ready(3);
  run_ranks(GetParam(), 3, [&](Runtime& rt) {
    EXPECT_EQ(sum_over(rt, 0, 1.0f), 3.0f);
    ready.arrive_and_wait();
    if (rt.rank() == 0) return rt.shutdown(/*goodbye=*/false);
    const std::string message = peer_failure(rt, 0);
    EXPECT_TRUE(contains(message, "process set 0 [0, 1, 2] is broken; missing global rank(s) [0]")) << message;
    EXPECT_TRUE(contains(message, "coordinator")) << message;
  }, {});
}

// Rank 1 stays alive but never submits 'x': after the op timeout the op
// fails on the members that submitted it, and the set is broken for rank 1
// too.
TEST_P(FaultDomains, OpTimeoutFailsAnOpThatAMemberNeverSubmitsOnEveryMember) {
  std::promise<void> failed;
  auto others_failed = failed.get_future().share();
  std::atomic<int> failures{0};
  run_ranks(GetParam(), 3, [&](Runtime& rt) {
    const int32_t set = 1;
    EXPECT_EQ(sum_over(rt, set, 1.0f), 3.0f);
    if (rt.rank() == 1) {
      others_failed.wait();
      const std::string late = peer_failure(rt, set, "late");
      EXPECT_TRUE(contains(late, "process set 1 [0, 1, 2] is broken; missing global rank(s) [1]")) << late;
      return;
    }
    const auto start = Clock::now();
    const std::string message = peer_failure(rt, set, "x");
    EXPECT_TRUE(contains(message, "process set 1 [0, 1, 2] is broken; missing global rank(s) [1]")) << message;
    EXPECT_TRUE(contains(message, "did not submit 'x' within 2 s (HORA_OP_TIMEOUT_SECONDS)")) << message;
    EXPECT_LT(Clock::now() - start, rt.config().timeout + kSlack);
    if (++failures == 2) failed.set_value();
  }, {{0, 1, 2}}, [](RuntimeConfig& c) { c.timeout = milliseconds(2000); });
}

// The same for an op the set has run before (on shared memory it is agreed
// in the fast lane, where the coordinator starts its clock on the op up to
// an inspection later than the members that wait): a member that gives up
// waiting first and reports it gets the coordinator's verdict naming rank
// 1, not a census, which rank 1 (alive, answering) would pass.
TEST_P(FaultDomains, AMemberThatGivesUpOnARepeatedOpGetsTheCoordinatorsVerdict) {
  std::promise<void> failed;
  auto others_failed = failed.get_future().share();
  std::atomic<int> failures{0};
  run_ranks(GetParam(), 3, [&](Runtime& rt) {
    const int32_t set = 1;
    for (int step = 0; step < 3; ++step) EXPECT_EQ(sum_over(rt, set, 1.0f, "x"), 3.0f);
    if (rt.rank() == 1) return others_failed.wait();
    const auto start = Clock::now();
    const std::string message = peer_failure(rt, set, "x");
    EXPECT_TRUE(contains(message, "process set 1 [0, 1, 2] is broken; missing global rank(s) [1]")) << message;
    EXPECT_TRUE(contains(message, "did not submit 'x' within 2 s (HORA_OP_TIMEOUT_SECONDS)")) << message;
    EXPECT_LT(Clock::now() - start, rt.config().timeout + kSlack);
    if (++failures == 2) failed.set_value();
  }, {{0, 1, 2}}, [](RuntimeConfig& c) { c.timeout = milliseconds(2000); });
}

TEST_P(FaultDomains, StallShutdownTimeFailsTheOpNamingTheMissingRank) {
  std::promise<void> failed;
  auto rank0_failed = failed.get_future().share();
  run_ranks(GetParam(), 2, [&](Runtime& rt) {
    if (rt.rank() == 1) {
      rank0_failed.wait();
      EXPECT_TRUE(contains(peer_failure(rt, 0, "other"), "missing global rank(s) [1]"));
      return;
    }
    const std::string message = peer_failure(rt, 0, "lonely");
    EXPECT_TRUE(contains(message, "process set 0 [0, 1] is broken; missing global rank(s) [1]")) << message;
    EXPECT_TRUE(contains(message, "'lonely' within 0.5 s (HOROVOD_STALL_SHUTDOWN_TIME_SECONDS)")) << message;
    failed.set_value();
  }, {}, [](RuntimeConfig& c) { c.stall_shutdown_time = milliseconds(500); });
}

TEST_P(FaultDomains, StallWarningNamesTheTensorAndTheRankThatHasNotSubmittedIt) {
  ::testing::internal::CaptureStderr();
  run_ranks(GetParam(), 2, [&](Runtime& rt) {
    if (rt.rank() == 1) std::this_thread::sleep_for(milliseconds(900));
    EXPECT_EQ(sum_over(rt, 0, 1.0f, "slow.grad"), 2.0f);  // late, but it completes
  }, {}, [](RuntimeConfig& c) { c.stall_warning_time = milliseconds(200); });
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_TRUE(contains(err, "hora: WARNING: process set 0 [0, 1]")) << err;
  EXPECT_TRUE(contains(err, "global rank 1 has not submitted 'slow.grad'")) << err;
}

// Rank 1 never creates set 1, so rank 0's engine for it never connects:
// shutting down must not wait for the connection timeout, and the op queued
// on the set fails with the shutdown.
TEST_P(FaultDomains, ShutdownDoesNotWaitForASetThatNeverConnects) {
  auto store = make_hash_store();
  std::promise<void> rank0_done;
  auto done = rank0_done.get_future().share();
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      RuntimeConfig config;
      config.rank = r;
      config.size = 2;
      config.timeout = milliseconds(60'000);
      const std::vector<std::vector<int>> sets = r == 0 ? std::vector<std::vector<int>>{{0, 1}}
                                                        : std::vector<std::vector<int>>{};
      Runtime rt(config, store, make_factory(GetParam()), sets);
      if (r == 1) return done.wait();
      std::vector<float> in{1.0f}, out(1);
      auto work = rt.enqueue(1, allreduce_args(in, out));
      const auto start = Clock::now();
      rt.shutdown();
      EXPECT_LT(Clock::now() - start, config.timeout);
      EXPECT_THROW(work->wait(), InvalidArgument);
      rank0_done.set_value();
    });
  }
  for (auto& t : threads) t.join();
}

// Rank 1 shuts down cleanly (a goodbye): set A closes for rank 0 instead of
// breaking. Its next op fails naming the rank that left, and A's counters
// do not call it broken; the global set closes the same way.
TEST_P(FaultDomains, ARankThatShutsDownClosesItsSetsForTheOthersWithoutBreakingThem) {
  std::barrier<> used(2), left(2);
  run_ranks(GetParam(), 2, [&](Runtime& rt) {
    EXPECT_EQ(sum_over(rt, 1, 1.0f), 2.0f);
    used.arrive_and_wait();
    if (rt.rank() == 1) {
      rt.shutdown();
      left.arrive_and_wait();
      return;
    }
    left.arrive_and_wait();
    std::this_thread::sleep_for(milliseconds(300));  // the goodbye arrives while nothing waits here
    EXPECT_FALSE(rt.metrics(1).broken) << "a set a member left cleanly counts as broken";
    const std::string message = peer_failure(rt, 1);
    EXPECT_EQ(message, "process set 1 [0, 1] is closed: global rank 1 left it (it shut hora down or removed the set)");
    EXPECT_FALSE(rt.metrics(1).broken);
  }, {{0, 1}});
}

INSTANTIATE_TEST_SUITE_P(Backends, FaultDomains, ::testing::Values("local", "gloo", "tcp", "shm"),
                         [](const auto& info) { return std::string(info.param); });

}  // namespace
}  // namespace hora
