// Executor: who runs an op. A negotiated op is the engine thread's and runs
// when the log reaches its response; a cached op that the agreement decides
// runs on the caller that waits for it (no other thread exists in these
// tests), or on the engine thread, which then watches the log. A one-member
// set over a fake agreement, without threads.
#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "coordinator/response_cache.h"
#include "coordinator/tensor_queue.h"
#include "engine_fakes.h"
#include "hora/errors.h"
#include "runtime/executor.h"
#include "runtime/set_links.h"

namespace hora {
namespace {

using control::Agreement;
using testing::FakeAgreement;
using testing::CountingControl;
using testing::SoloBackend;

class NeverJoined final : public JoinLedger {
 public:
  bool joined() const override { return false; }
  void stood_in(OpType, const std::string& name) override { stood_in_names.push_back(name); }
  std::vector<std::string> stood_in_names;
  void join_finished() override {}
};

class Driver final : public WorkDriver {
 public:
  explicit Driver(Executor& executor) : executor_(executor) {}
  void drive(const Work& work) override { executor_.drive(work); }

 private:
  Executor& executor_;
};

Request allreduce(const std::string& name) { return testing::allreduce_of(name); }

class ExecutorTest : public ::testing::Test {
 protected:
  ExecutorTest() {
    options_.global_ranks = {0};
    auto agreement = std::make_unique<FakeAgreement>(4);
    agreement_ = agreement.get();
    auto control = std::make_unique<CountingControl>();
    control_ = control.get();
    links_ = std::make_unique<SetLinks>(std::make_unique<SoloBackend>(), std::move(control), std::move(agreement), true);
    executor_.attach(*links_, cache_, nullptr);
  }

  // Submits x as the Submitter does; returns its Work and slot.
  std::pair<std::shared_ptr<Work>, std::optional<uint32_t>> submit() {
    TensorEntry entry{allreduce("x"), TensorView{data_.data(), DataType::kFloat32, {4}},
                      TensorView{data_.data(), DataType::kFloat32, {4}}, std::make_shared<Work>(), {}};
    std::shared_ptr<Work> work = entry.work;
    std::optional<uint32_t> slot = executor_.admit(entry, driver_);
    queue_.push(std::move(entry), !slot);
    return {work, slot};
  }

  // Runs x once through the coordinator, which caches it in slot 0.
  void negotiate_once() {
    auto [work, slot] = submit();
    ASSERT_FALSE(slot) << "an op the cache does not know yet is agreed without the coordinator";
    ASSERT_EQ(queue_.take_new().size(), 1u);
    Response response;
    response.names = {"x"};
    response.cache = {1};
    response.slots = {-1};
    cache_.insert(allreduce("x"));
    executor_.deliver({response});
    agreement_->append_response();  // the coordinator commits it
    executor_.run_log();
    ASSERT_TRUE(work->finished());
    work->wait();
  }

  EngineOptions options_;
  std::atomic<bool> stopping_{false};
  telemetry::SetTelemetry telemetry_{0, {0}, 0, nullptr};
  TensorQueue queue_;
  NeverJoined joins_;
  ResponseCache cache_{16};
  int engine_wakes_ = 0;
  Executor executor_{options_, queue_, joins_, telemetry_, stopping_, [this] { ++engine_wakes_; }};
  std::shared_ptr<Driver> driver_ = std::make_shared<Driver>(executor_);
  FakeAgreement* agreement_ = nullptr;
  CountingControl* control_ = nullptr;
  std::unique_ptr<SetLinks> links_;
  std::vector<float> data_ = {1, 2, 3, 4};
};

TEST_F(ExecutorTest, ACachedOpTheCallerWaitsForRunsOnTheCaller) {
  negotiate_once();
  auto [work, slot] = submit();
  ASSERT_EQ(slot, std::optional<uint32_t>{0});
  EXPECT_TRUE(queue_.take_new().empty()) << "an op the agreement decides is not negotiated";
  executor_.enter(*slot, /*caller_waits=*/true);
  EXPECT_EQ(agreement_->watching & Agreement::kEngine, 0u) << "the engine thread was asked to watch";
  EXPECT_FALSE(work->finished());
  work->wait();  // drives: runs the log on this thread
  EXPECT_TRUE(work->finished());
  EXPECT_EQ(agreement_->consumed, 2u);
}

TEST_F(ExecutorTest, ACachedOpNobodyWaitsForIsTheEngineThreads) {
  negotiate_once();
  auto [work, slot] = submit();
  ASSERT_TRUE(slot);
  executor_.enter(*slot, /*caller_waits=*/false);
  EXPECT_NE(agreement_->watching & Agreement::kEngine, 0u);
  executor_.run_log();
  EXPECT_TRUE(work->finished());
  EXPECT_EQ(agreement_->watching & Agreement::kEngine, 0u) << "still watching with nothing pending";
}

TEST_F(ExecutorTest, ACallerLeavesAResponseToTheEngineThread) {
  negotiate_once();
  auto [work, slot] = submit();
  ASSERT_TRUE(slot);
  agreement_->append_response();  // a response of the coordinator comes first in the log
  executor_.enter(*slot, /*caller_waits=*/true);
  const int wakes = engine_wakes_;
  executor_.drive(*work);
  EXPECT_FALSE(work->finished()) << "a caller ran past the response that comes before its op";
  EXPECT_GT(engine_wakes_, wakes) << "the engine thread was not woken for what is left";
  Response response;
  response.op = OpType::kBarrier;
  executor_.deliver({response});
  executor_.run_log();
  EXPECT_TRUE(work->finished());
}

TEST_F(ExecutorTest, ARequestThatDiffersFromTheCachedOneIsNegotiated) {
  negotiate_once();
  TensorEntry entry{allreduce("x"), {}, {}, std::make_shared<Work>(), {}};
  entry.request.shape = {8};
  EXPECT_FALSE(executor_.admit(entry, driver_));
  EXPECT_FALSE(entry.lane);
}

// An op given up because the members diverged (Negotiator::abandon) fails
// only the submissions it lists: this member's op of that name, submitted
// after the coordinator gave up the others', waits on; a skipped unnamed op
// keeps this member's unnamed-op count with the others'.
TEST_F(ExecutorTest, AnOpGivenUpFailsOnlyTheSubmissionsItLists) {
  auto [work, slot] = submit();
  ASSERT_EQ(queue_.take_new().size(), 1u);
  Response others;
  others.names = {"x"};
  others.error = "allreduce 'x' ... failed: the ranks diverged";
  others.cache = {0};
  others.slots = {-1};
  others.sizes = {1, 2};  // set ranks 1 and 2 had submitted it, not this one (0)
  Response unnamed = others;
  unnamed.names = {"allreduce.noname.3"};
  executor_.deliver({others, unnamed});
  agreement_->append_response();
  agreement_->append_response();
  executor_.run_log();
  EXPECT_FALSE(work->finished()) << "this member's own x failed with the others' given-up one";
  EXPECT_EQ(joins_.stood_in_names, (std::vector<std::string>{"x", "allreduce.noname.3"}));

  Response mine = others;
  mine.sizes = {0};
  executor_.deliver({mine});
  agreement_->append_response();
  executor_.run_log();
  ASSERT_TRUE(work->finished());
  EXPECT_THROW(work->wait(), Mismatch);
}

}  // namespace
}  // namespace hora
