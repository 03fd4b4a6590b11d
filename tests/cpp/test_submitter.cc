// Submitter, on the submitting thread alone: how ops are named, which are
// refused with what, and what a broken or stopped set hands out. The set is
// not connected (nothing is agreed without the coordinator), so every op is
// queued for negotiation.
#include <gtest/gtest.h>

#include <atomic>
#include <string>

#include "coordinator/tensor_queue.h"
#include "engine_fakes.h"
#include "hora/errors.h"
#include "runtime/executor.h"
#include "runtime/submitter.h"

namespace hora {
namespace {

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

Request op(OpType type, std::string name = "") {
  Request q = testing::allreduce_of(std::move(name));
  q.op = type;
  return q;
}

class SubmitterTest : public ::testing::Test {
 protected:
  std::string submit(Request request) {
    Submitter::Submitted submitted = submitter_.submit(std::move(request), {}, {}, {});
    EXPECT_FALSE(submitted.slot);
    std::vector<Request> fresh = queue_.take_new();
    return fresh.empty() ? std::string() : fresh.back().name;
  }
  // What submit() throws (InvalidArgument), or "".
  std::string refusal(Request request) {
    try {
      submit(std::move(request));
    } catch (const InvalidArgument& e) {
      return e.what();
    }
    return "";
  }

  EngineOptions options_ = testing::set_seven(1);
  std::atomic<bool> stopping_{false};
  telemetry::SetTelemetry telemetry_{7, {1, 3, 5}, 1, nullptr};
  TensorQueue queue_;
  Executor executor_{options_, queue_, submitter_, telemetry_, stopping_, [] {}};
  Submitter submitter_{7, queue_, executor_, stopping_};
};

TEST_F(SubmitterTest, UnnamedOpsAreNumberedPerOpType) {
  EXPECT_EQ(submit(op(OpType::kAllreduce)), "allreduce.noname.1");
  EXPECT_EQ(submit(op(OpType::kAllreduce)), "allreduce.noname.2");
  EXPECT_EQ(submit(op(OpType::kBroadcast)), "broadcast.noname.1");
  EXPECT_EQ(submit(op(OpType::kAllreduce, "grad")), "grad");
}

TEST_F(SubmitterTest, StandingInForAnUnnamedOpKeepsTheNumbering) {
  submitter_.stood_in(OpType::kAllreduce, "allreduce.noname.5");
  submitter_.stood_in(OpType::kAllreduce, "grad");
  EXPECT_EQ(submit(op(OpType::kAllreduce)), "allreduce.noname.6");
}

TEST_F(SubmitterTest, ASecondOpOfANameInFlightIsRefusedNamingTheSet) {
  submit(op(OpType::kAllreduce, "grad"));
  const std::string why = refusal(op(OpType::kAllreduce, "grad"));
  EXPECT_TRUE(contains(why, "allreduce 'grad': this rank already has an op of that name in flight on process set 7"))
      << why;
  TensorEntry first = queue_.take("grad");
  first.work->complete();
  first.work->wait();  // seen done: the name is free again
  EXPECT_EQ(refusal(op(OpType::kAllreduce, "grad")), "");
}

TEST_F(SubmitterTest, AJoinedMemberMaySubmitNothingUntilTheJoinFinishes) {
  EXPECT_EQ(submit(op(OpType::kJoin, "ignored")), kJoinName);
  EXPECT_TRUE(submitter_.joined());
  const std::string why = refusal(op(OpType::kAllreduce, "grad"));
  EXPECT_TRUE(contains(why, "this rank called join() on process set 7 and may not submit allreduce 'grad'")) << why;
  EXPECT_TRUE(contains(refusal(op(OpType::kJoin)), "called join() on process set 7 already"));
  submitter_.join_finished();
  EXPECT_FALSE(submitter_.joined());
  EXPECT_EQ(submit(op(OpType::kAllreduce, "grad")), "grad");
}

TEST_F(SubmitterTest, ABrokenSetHandsOutFailedWork) {
  submitter_.broke(std::make_exception_ptr(PeerFailure("process set 7 is broken")));
  Submitter::Submitted submitted = submitter_.submit(op(OpType::kAllreduce, "grad"), {}, {}, {});
  ASSERT_TRUE(submitted.work->finished());
  EXPECT_THROW(submitted.work->wait(), PeerFailure);
  EXPECT_TRUE(queue_.empty());
  EXPECT_THROW(submitter_.wait_connected(), PeerFailure);
}

TEST_F(SubmitterTest, AStoppedSetRefusesWithItsReason) {
  bool ran = false;
  EXPECT_TRUE(submitter_.stop("process set 7 was removed", [&] { ran = true; }));
  EXPECT_TRUE(ran);
  EXPECT_FALSE(submitter_.stop("again", [] { FAIL() << "stopped twice"; }));
  EXPECT_EQ(refusal(op(OpType::kAllreduce, "grad")), "process set 7 was removed");
}

}  // namespace
}  // namespace hora
