// FailureProtocol over a scripted control plane (no threads): who the
// coordinator names missing after its census, what it tells the members,
// and what a member concludes with and without a verdict. Process set 7 of
// engine_fakes.h (global ranks {1, 3, 5}), op timeout 1 s: a census window
// of 250 ms.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <string>

#include "coordinator/wire.h"
#include "engine_fakes.h"
#include "runtime/failure_protocol.h"

namespace hora {
namespace {

using std::chrono::milliseconds;
using testing::ScriptedBackend;
using testing::ScriptedControl;

ControlMessage failure_from(int from, FailureMessage::Stage stage, const std::string& reason) {
  return ControlMessage{from, encode(FailureMessage{stage, {}, reason}), false};
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

class FailureProtocolTest : public ::testing::Test {
 protected:
  // The protocol as set rank `rank` runs it.
  void as_rank(int rank) {
    options_ = testing::set_seven(rank);
    auto control = std::make_unique<ScriptedControl>();
    backend_ = control.get();
    auto data = std::make_unique<ScriptedBackend>(rank, 3, *control);
    links_ = std::make_unique<SetLinks>(SetTransports{std::move(data), std::move(control), nullptr});
    protocol_ = std::make_unique<FailureProtocol>(options_, *links_, stopping_);
  }
  std::vector<FailureMessage> sent_to(int member) const {
    std::vector<FailureMessage> out;
    for (const auto& [to, bytes] : backend_->sent)
      if (to == member) out.push_back(decode_failure_message(bytes));
    return out;
  }

  EngineOptions options_;
  std::atomic<bool> stopping_{false};
  ScriptedControl* backend_ = nullptr;  // the scripted control plane
  std::unique_ptr<SetLinks> links_;
  std::unique_ptr<FailureProtocol> protocol_;
};

TEST_F(FailureProtocolTest, TheCensusNamesTheMemberThatNeitherAnswersNorCloses) {
  as_rank(0);
  backend_->inbox = {failure_from(1, FailureMessage::Stage::kReport, "the allreduce failed")};
  const auto start = std::chrono::steady_clock::now();
  const std::string verdict =
      protocol_->conclude(SetFailure{"the allreduce failed", {}, true}, {false, false, false}, {false, false, false});
  EXPECT_GE(std::chrono::steady_clock::now() - start, FailureProtocol::census_window(options_.timeout));
  EXPECT_EQ(verdict, "process set 7 [1, 3, 5] is broken; missing global rank(s) [5]: the allreduce failed");
  EXPECT_EQ(backend_->aborted, "the allreduce failed") << "the data plane was not given up first";
  for (int member : {1, 2}) {
    std::vector<FailureMessage> got = sent_to(member);
    ASSERT_EQ(got.size(), 2u) << "member " << member << ": a probe, then the verdict";
    EXPECT_EQ(got[0].stage, FailureMessage::Stage::kProbe);
    EXPECT_EQ(got[1].stage, FailureMessage::Stage::kVerdict);
    EXPECT_EQ(got[1].reason, verdict);
    EXPECT_EQ(got[1].missing, std::vector<int32_t>{5});
  }
}

TEST_F(FailureProtocolTest, AMemberWhoseConnectionClosesIsDeadAndNotToldTheVerdict) {
  as_rank(0);
  backend_->inbox = {ControlMessage{2, {}, true}, failure_from(1, FailureMessage::Stage::kReport, "x")};
  const std::string verdict = protocol_->conclude(SetFailure{"x", {}, true}, {false, false, false}, {false, false, false});
  EXPECT_TRUE(contains(verdict, "missing global rank(s) [5]")) << verdict;
  ASSERT_EQ(sent_to(2).size(), 1u) << "only the probe";
  EXPECT_EQ(sent_to(2)[0].stage, FailureMessage::Stage::kProbe);
}

TEST_F(FailureProtocolTest, AFailureThatNamesItsMembersNeedsNoCensus) {
  as_rank(0);
  const std::string verdict =
      protocol_->conclude(SetFailure{"the control connection closed", {1}, false}, {false, true, false},
                          {false, false, false});
  EXPECT_EQ(verdict, "process set 7 [1, 3, 5] is broken; missing global rank(s) [3]: the control connection closed");
  EXPECT_TRUE(sent_to(1).empty()) << "a closed member was sent something";
  ASSERT_EQ(sent_to(2).size(), 1u);
  EXPECT_EQ(sent_to(2)[0].stage, FailureMessage::Stage::kVerdict);
}

TEST_F(FailureProtocolTest, AMemberThatLeftClosesTheSetAndTheOthersAreToldItIsClosed) {
  as_rank(0);
  SetFailure left{options_.goodbye_reason(1), {1}, false};
  left.left = true;
  const std::string message =
      protocol_->conclude(left, {false, false, false}, {false, false, false}, /*lost_ops=*/false);
  EXPECT_EQ(message, "process set 7 [1, 3, 5] is closed: global rank 3 left it (it shut hora down or removed the set)");
  EXPECT_TRUE(sent_to(1).empty()) << "the member that left was sent something";
  ASSERT_EQ(sent_to(2).size(), 1u);
  EXPECT_EQ(sent_to(2)[0].stage, FailureMessage::Stage::kClosed);
  EXPECT_EQ(sent_to(2)[0].reason, options_.goodbye_reason(1)) << "each member words its own outcome";
  EXPECT_EQ(sent_to(2)[0].missing, std::vector<int32_t>{3});
}

// Ops of this rank waited in the set when the member left: they are lost,
// and for this rank the set is broken, naming who left.
TEST_F(FailureProtocolTest, ASetAMemberLeftIsBrokenForARankWhoseOpsWaitedInIt) {
  as_rank(0);
  SetFailure left{options_.goodbye_reason(1), {1}, false};
  left.left = true;
  EXPECT_EQ(protocol_->conclude(left, {false, false, false}, {false, false, false}, /*lost_ops=*/true),
            "process set 7 [1, 3, 5] is broken; missing global rank(s) [3]: global rank 3 left it (it shut hora down "
            "or removed the set)");
}

TEST_F(FailureProtocolTest, AMemberWhoseCoordinatorLeftNeedsNoVerdict) {
  as_rank(2);
  SetFailure left{options_.goodbye_reason(0), {0}, false};
  left.left = true;
  const auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(protocol_->await_verdict(left, /*lost_ops=*/false),
            "process set 7 [1, 3, 5] is closed: global rank 1 left it (it shut hora down or removed the set)");
  EXPECT_LT(std::chrono::steady_clock::now() - start, FailureProtocol::coordinator_grace(options_.timeout))
      << "a member waited for a verdict from a coordinator that had left";
}

TEST_F(FailureProtocolTest, AMemberReportsAndReturnsTheCoordinatorsVerdict) {
  as_rank(2);
  backend_->inbox = {failure_from(0, FailureMessage::Stage::kProbe, "x"),
                     failure_from(0, FailureMessage::Stage::kVerdict, "the verdict")};
  EXPECT_EQ(protocol_->await_verdict(SetFailure{"my collective failed", {}, true}), "the verdict");
  std::vector<FailureMessage> reported = sent_to(0);
  ASSERT_EQ(reported.size(), 1u);
  EXPECT_EQ(reported[0].stage, FailureMessage::Stage::kReport);
  EXPECT_EQ(reported[0].reason, "my collective failed");
}

TEST_F(FailureProtocolTest, AMemberThatWaitedOutGivesASilentCoordinatorOnlyAGrace) {
  as_rank(1);
  SetFailure failure{"the coordinator decided nothing", {}, true};
  failure.waited_out = true;
  const auto start = std::chrono::steady_clock::now();
  const std::string verdict = protocol_->await_verdict(failure);
  const auto waited = std::chrono::steady_clock::now() - start;
  EXPECT_GE(waited, FailureProtocol::coordinator_grace(options_.timeout));
  EXPECT_LT(waited, FailureProtocol::verdict_wait(options_.timeout));
  EXPECT_TRUE(contains(verdict, "missing global rank(s) [1]")) << verdict;
  EXPECT_TRUE(contains(verdict, "the coordinator (global rank 1) did not answer within")) << verdict;
}

TEST_F(FailureProtocolTest, AMemberThatCannotReachItsCoordinatorNamesIt) {
  as_rank(1);
  backend_->unreachable = {0};
  const std::string verdict = protocol_->await_verdict(SetFailure{"x", {}, true});
  EXPECT_TRUE(contains(verdict, "missing global rank(s) [1]")) << verdict;
  EXPECT_TRUE(contains(verdict, "then the control connection to the coordinator (global rank 1) closed")) << verdict;
}

TEST(FailureProtocolTimes, TheWaitsFollowTheOpTimeoutWithinTheirBounds) {
  EXPECT_EQ(FailureProtocol::census_window(milliseconds{1000}), milliseconds{250});
  EXPECT_EQ(FailureProtocol::census_window(milliseconds{0}), milliseconds{2000});
  EXPECT_EQ(FailureProtocol::census_window(milliseconds{100}), milliseconds{200});
  EXPECT_EQ(FailureProtocol::verdict_wait(milliseconds{1000}), milliseconds{1000});
  EXPECT_EQ(FailureProtocol::coordinator_grace(milliseconds{1000}), milliseconds{125});
  EXPECT_EQ(FailureProtocol::coordinator_grace(milliseconds{600'000}), milliseconds{500});
}

}  // namespace
}  // namespace hora
