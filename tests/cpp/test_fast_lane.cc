// The fast lane (src/transport/shm/fast_lane.h): its table and log on one
// segment seen by two members in this process, then through the Runtime
// with ranks as processes — cached ops agreed without the coordinator, in
// every order, mixed with negotiated ones, a mismatch, a join and a stall.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <thread>

#include "hora/errors.h"
#include "hora/runtime.h"
#include "ranks_as_processes.h"
#include "planner/transport_planner.h"
#include "transport/backend.h"
#include "transport/shm/fast_lane.h"
#include "transport/shm/segment.h"
#include "transport/shm/shm_backend.h"

namespace hora {
namespace {

using shm::FastLane;
using std::chrono::milliseconds;
using test_support::require;
using test_support::run_processes;

// Two members' views of one fresh segment (mapped twice in this process).
class TwoLanes : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string name = shm::random_segment_name();
    const shm::SegmentLayout layout = shm::plan_layout(2, 4096, 4096);
    first_ = shm::Segment::create(name, layout);
    second_ = shm::Segment::open(name, 2, layout.total_bytes);
    shm::unlink_segment(name);
    for (const shm::Segment* segment : {&first_, &second_}) {
      std::vector<shm::Doorbell> bells;
      for (uint32_t r = 0; r < 2; ++r) {
        const uint64_t area = layout.member_offset(r);
        bells.emplace_back(segment->field_at<uint32_t>(area + shm::field::kBell),
                           segment->field_at<uint32_t>(area + shm::field::kSleepers));
      }
      bells_.push_back(std::move(bells));
    }
    seats_ = {shm::member_seats(first_, 0), shm::member_seats(second_, 1)};
    lanes_.emplace_back(first_, 0, 2, bells_[0], seats_[0], std::chrono::microseconds(5));
    lanes_.emplace_back(second_, 1, 2, bells_[1], seats_[1], std::chrono::microseconds(5));
  }

  shm::Segment first_, second_;
  std::vector<std::vector<shm::Doorbell>> bells_;
  std::vector<shm::Seats> seats_;
  std::vector<FastLane> lanes_;
};

TEST_F(TwoLanes, TheLastSubmitterAppendsTheOpForEveryone) {
  EXPECT_EQ(lanes_[0].submit(7), FastLane::Outcome::kWaiting);
  EXPECT_FALSE(lanes_[1].entry(0).has_value());
  EXPECT_EQ(lanes_[1].row_state(7).submitted, std::vector<int>{0});
  EXPECT_EQ(lanes_[1].submit(7), FastLane::Outcome::kAppended);
  for (FastLane& lane : lanes_) {
    ASSERT_TRUE(lane.entry(0).has_value());
    EXPECT_FALSE(lane.entry(0)->response);
    EXPECT_EQ(lane.entry(0)->slot, 7u);
    EXPECT_FALSE(lane.entry(1).has_value());
  }
  EXPECT_TRUE(lanes_[0].row_state(7).submitted.empty());
  EXPECT_EQ(lanes_[0].row_state(7).completions, 1u);
  // The same op again, submitted the other way round.
  EXPECT_EQ(lanes_[1].submit(7), FastLane::Outcome::kWaiting);
  EXPECT_EQ(lanes_[0].submit(7), FastLane::Outcome::kAppended);
  ASSERT_TRUE(lanes_[1].entry(1).has_value());
  EXPECT_EQ(lanes_[1].entry(1)->slot, 7u);
}

TEST_F(TwoLanes, ResponsesAndCachedOpsShareOneOrder) {
  ASSERT_TRUE(lanes_[0].has_room(2));
  lanes_[0].append_response();
  EXPECT_EQ(lanes_[1].submit(3), FastLane::Outcome::kWaiting);
  EXPECT_EQ(lanes_[0].submit(3), FastLane::Outcome::kAppended);
  lanes_[0].append_response();
  const bool expected_response[] = {true, false, true};
  for (uint64_t i = 0; i < 3; ++i) {
    ASSERT_TRUE(lanes_[1].entry(i).has_value()) << i;
    EXPECT_EQ(lanes_[1].entry(i)->response, expected_response[i]) << i;
  }
  EXPECT_TRUE(lanes_[1].entry_waiting());
  lanes_[1].set_consumed(3);
  EXPECT_FALSE(lanes_[1].entry_waiting());
}

TEST_F(TwoLanes, ADivertedRowHandsItsSubmissionsToTheCoordinator) {
  EXPECT_EQ(lanes_[1].submit(2), FastLane::Outcome::kWaiting);
  EXPECT_EQ(lanes_[0].divert(2), std::vector<int>{1});
  EXPECT_FALSE(lanes_[0].take_drain_request());
  // A submission into the diverted row asks for a drain and stays there.
  EXPECT_EQ(lanes_[0].submit(2), FastLane::Outcome::kDiverted);
  EXPECT_TRUE(lanes_[0].engine_attention());
  EXPECT_TRUE(lanes_[0].take_drain_request());
  EXPECT_FALSE(lanes_[0].take_drain_request());
  EXPECT_FALSE(lanes_[0].try_undivert(2));  // rank 0's submission is still in it
  EXPECT_EQ(lanes_[0].divert(2), std::vector<int>{0});
  EXPECT_TRUE(lanes_[0].try_undivert(2));
  EXPECT_FALSE(lanes_[0].entry(0).has_value());  // nothing ran through the lane
  EXPECT_EQ(lanes_[0].submit(2), FastLane::Outcome::kWaiting);
  EXPECT_EQ(lanes_[1].submit(2), FastLane::Outcome::kAppended);
}

TEST_F(TwoLanes, AWaitingDriverWakesForTheAppendThatItWatches) {
  lanes_[1].watch(FastLane::kDriver, true);
  std::atomic<bool> woke{false};
  std::thread driver([&] {
    const auto give_up = std::chrono::steady_clock::now() + milliseconds(10'000);
    while (!lanes_[1].entry(0) && std::chrono::steady_clock::now() < give_up)
      lanes_[1].wait_for_entry(0, [] { return false; });
    woke = lanes_[1].entry(0).has_value();
  });
  std::this_thread::sleep_for(milliseconds(50));  // the driver sleeps on its bell by now
  EXPECT_EQ(lanes_[1].submit(4), FastLane::Outcome::kWaiting);
  EXPECT_EQ(lanes_[0].submit(4), FastLane::Outcome::kAppended);
  driver.join();
  EXPECT_TRUE(woke);
}

TEST_F(TwoLanes, TheEngineIsCalledOnlyWhileItWatches) {
  EXPECT_EQ(lanes_[0].submit(1), FastLane::Outcome::kWaiting);
  EXPECT_EQ(lanes_[1].submit(1), FastLane::Outcome::kAppended);
  EXPECT_FALSE(lanes_[1].engine_attention());
  lanes_[1].watch(FastLane::kEngine, true);
  EXPECT_TRUE(lanes_[1].engine_attention());
  lanes_[1].set_consumed(1);
  EXPECT_FALSE(lanes_[1].engine_attention());
}

// ------------------------------------------------ through the Runtime

constexpr milliseconds kLimit(60'000);

// Ranks as processes with a Runtime each over shared memory.
std::unique_ptr<Runtime> runtime_for(const std::string& dir, int rank, int n, milliseconds timeout = kLimit) {
  RuntimeConfig config;
  config.rank = rank;
  config.size = n;
  config.timeout = timeout;
  config.start_timeout = kLimit;
  return std::make_unique<Runtime>(config, std::make_shared<test_support::DirectoryStore>(dir),
                                   make_transport_planner(make_gloo_backend_factory("127.0.0.1"), {ShmOptions{}}),
                                   std::vector<std::vector<int>>{});
}

OpArgs allreduce_of(std::vector<float>& values, const std::string& name, bool caller_waits) {
  OpArgs args;
  args.name = name;
  args.input = TensorView{values.data(), DataType::kFloat32, {static_cast<int64_t>(values.size())}};
  args.output = args.input;
  args.caller_waits = caller_waits;
  return args;
}

void expect_all_ok(const std::vector<test_support::RankOutcome>& outcomes) {
  for (size_t r = 0; r < outcomes.size(); ++r) EXPECT_EQ(outcomes[r].error, "") << "rank " << r;
}

// Steps of three repeated ops: one the caller waits for at once, two
// submitted in an order that differs by rank; then a broadcast and a barrier.
TEST(FastLaneProcesses, CachedOpsAgreeInEveryOrder) {
  test_support::TemporaryDirectory dir;
  const int n = 3;
  auto outcomes = run_processes(n, [&](int rank) {
    auto runtime = runtime_for(dir.path(), rank, n);
    for (int step = 0; step < 150; ++step) {
      std::vector<float> a(5, static_cast<float>(rank + step)), b(3, 1.0f), c(7, static_cast<float>(rank));
      auto args_b = allreduce_of(b, "b", false), args_c = allreduce_of(c, "c", false);
      std::shared_ptr<Work> first = runtime->enqueue(0, rank % 2 ? args_b : args_c);
      runtime->enqueue(0, allreduce_of(a, "a", step % 2 == 0))->wait();
      std::shared_ptr<Work> second = runtime->enqueue(0, rank % 2 ? args_c : args_b);
      first->wait();
      second->wait();
      const float a_sum = static_cast<float>(n * step + n * (n - 1) / 2);
      for (float v : a) require(v == a_sum, "a at step " + std::to_string(step) + ": " + std::to_string(v));
      for (float v : b) require(v == n, "b at step " + std::to_string(step));
      for (float v : c) require(v == n * (n - 1) / 2, "c at step " + std::to_string(step));
      std::vector<float> root(4, static_cast<float>(rank == 2 ? step : -1));
      OpArgs cast = allreduce_of(root, "cast", step % 3 == 0);
      cast.op = OpType::kBroadcast;
      cast.root = 2;
      runtime->enqueue(0, cast)->wait();
      for (float v : root) require(v == step, "broadcast at step " + std::to_string(step));
      OpArgs barrier;
      barrier.op = OpType::kBarrier;
      barrier.name = "fence";
      barrier.caller_waits = true;
      runtime->enqueue(0, barrier)->wait();
    }
  }, kLimit);
  expect_all_ok(outcomes);
}

// A cached name submitted with another shape on one rank is a mismatch on
// every rank (the coordinator takes the op back from the lane); the set
// goes on, through the lane again (counted as fast-path hits).
TEST(FastLaneProcesses, AMismatchOfACachedOpFailsOnEveryMemberAndTheSetGoesOn) {
  test_support::TemporaryDirectory dir;
  const int n = 2;
  auto outcomes = run_processes(n, [&](int rank) {
    auto runtime = runtime_for(dir.path(), rank, n);
    constexpr int kSteps = 20, kMismatch = 6, kInstancesToGiveBack = 4;
    int64_t fast_after_mismatch = 0;
    for (int step = 0; step < kSteps; ++step) {
      if (step == kMismatch + 1) fast_after_mismatch = runtime->metrics(0).fast_path_hits;
      const bool odd_one = step == kMismatch && rank == 1;
      std::vector<float> x(odd_one ? 5 : 4, 1.0f);
      try {
        runtime->enqueue(0, allreduce_of(x, "x", step % 2 == 0))->wait();
        require(step != 6, "step 6 did not fail on rank " + std::to_string(rank));
        for (float v : x) require(v == n, "x at step " + std::to_string(step));
      } catch (const Mismatch& e) {
        require(step == 6, "a mismatch at step " + std::to_string(step) + ": " + e.what());
        require(std::string(e.what()).find("x") != std::string::npos, e.what());
      }
    }
    const int64_t after = runtime->metrics(0).fast_path_hits - fast_after_mismatch;
    require(after >= kSteps - kMismatch - 1 - kInstancesToGiveBack,
            std::to_string(after) + " fast-path hits after the mismatch on rank " + std::to_string(rank));
  }, kLimit);
  expect_all_ok(outcomes);
}

// While rank 0 has joined, rank 1's repeated allreduce goes on with zeros
// from it (the coordinator runs every op then); afterwards the lane again.
TEST(FastLaneProcesses, AJoinedMemberStandsInForCachedOps) {
  test_support::TemporaryDirectory dir;
  const int n = 2;
  auto outcomes = run_processes(n, [&](int rank) {
    auto runtime = runtime_for(dir.path(), rank, n);
    const int steps = rank == 0 ? 3 : 10;
    for (int step = 0; step < steps; ++step) {
      std::vector<float> g(6, 1.0f);
      runtime->enqueue(0, allreduce_of(g, "g", rank == 1))->wait();
      const float expected = step < 3 ? 2.0f : 1.0f;
      for (float v : g) require(v == expected, "g at step " + std::to_string(step) + ": " + std::to_string(v));
    }
    OpArgs join;
    join.op = OpType::kJoin;
    std::shared_ptr<Work> joined = runtime->enqueue(0, join);
    joined->wait();
    int32_t last = -1;
    std::memcpy(&last, joined->output_data(), sizeof last);
    require(last == 1, "the member that joined last: " + std::to_string(last));
    const int64_t fast_before = runtime->metrics(0).fast_path_hits;
    constexpr int kAfterJoin = 12, kInstancesToGiveBack = 4;
    for (int step = 0; step < kAfterJoin; ++step) {
      std::vector<float> g(6, 1.0f);
      runtime->enqueue(0, allreduce_of(g, "g", true))->wait();
      for (float v : g) require(v == 2.0f, "g after the join");
    }
    const int64_t after = runtime->metrics(0).fast_path_hits - fast_before;
    require(after >= kAfterJoin - kInstancesToGiveBack,
            std::to_string(after) + " fast-path hits after the join on rank " + std::to_string(rank));
  }, kLimit);
  expect_all_ok(outcomes);
}

// A cached op that one member never submits fails the set within the op
// timeout, naming that member.
TEST(FastLaneProcesses, ACachedOpAMemberNeverSubmitsFailsTheSetNamingIt) {
  test_support::TemporaryDirectory dir;
  const int n = 2;
  auto outcomes = run_processes(n, [&](int rank) {
    auto runtime = runtime_for(dir.path(), rank, n, milliseconds(1500));
    for (int step = 0; step < 3; ++step) {
      std::vector<float> s(2, 1.0f);
      runtime->enqueue(0, allreduce_of(s, "s", true))->wait();
    }
    if (rank == 1) {
      std::this_thread::sleep_for(milliseconds(6000));
      return;
    }
    const auto start = std::chrono::steady_clock::now();
    std::vector<float> s(2, 1.0f);
    try {
      runtime->enqueue(0, allreduce_of(s, "s", true))->wait();
      require(false, "the op rank 1 never submitted completed");
    } catch (const PeerFailure& e) {
      const auto took = std::chrono::steady_clock::now() - start;
      require(took < milliseconds(5000), "failed only after " +
                                             std::to_string(std::chrono::duration_cast<milliseconds>(took).count()) +
                                             " ms");
      require(std::string(e.what()).find("missing global rank(s) [1]") != std::string::npos, e.what());
    }
  }, kLimit);
  EXPECT_EQ(outcomes[0].error, "");
}

}  // namespace
}  // namespace hora
