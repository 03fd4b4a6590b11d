// MemberLoop as a state machine: what it sends the coordinator, which
// responses it takes from a message, and when it finds the set broken.
// Process set 7 of engine_fakes.h, seen from set rank 1.
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "coordinator/wire.h"
#include "engine_fakes.h"
#include "hora/errors.h"
#include "runtime/failure_protocol.h"
#include "runtime/member_loop.h"

namespace hora {
namespace {

using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

Request allreduce(std::string name) { return testing::allreduce_of(std::move(name)); }

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

class MemberLoopTest : public ::testing::Test {
 protected:
  EngineOptions options_ = testing::set_seven(1);
  telemetry::SetTelemetry telemetry_{7, {1, 3, 5}, 1, nullptr};
  testing::FakeAgreement agreement_{0};
  MemberLoop loop_{options_, agreement_, telemetry_};
  Clock::time_point now_ = Clock::now();
};

TEST_F(MemberLoopTest, NewRequestsTravelInFullUntilTheCacheKnowsThem) {
  MemberMessage first = decode_member_message(loop_.submit_local({allreduce("x"), allreduce("y")}));
  ASSERT_EQ(first.requests.size(), 2u);
  EXPECT_TRUE(first.cached_slots.empty());
  loop_.cache().insert(allreduce("x"));
  MemberMessage second = decode_member_message(loop_.submit_local({allreduce("x"), allreduce("z")}));
  EXPECT_EQ(second.cached_slots, std::vector<uint32_t>{0});
  ASSERT_EQ(second.requests.size(), 1u);
  EXPECT_EQ(second.requests[0].name, "z");
  EXPECT_EQ(telemetry_.metrics().cache_hits, 1);
}

TEST_F(MemberLoopTest, TheCoordinatorsResponsesComeOutInOrder) {
  CoordinatorMessage message;
  for (const char* name : {"a", "b"}) {
    Response response;
    response.names = {name};
    response.cache = {0};
    response.slots = {-1};
    message.responses.push_back(response);
  }
  std::vector<Response> responses = loop_.on_message(ControlMessage{0, encode(message), false});
  ASSERT_EQ(responses.size(), 2u);
  EXPECT_EQ(responses[0].names, std::vector<std::string>{"a"});
  EXPECT_EQ(responses[1].names, std::vector<std::string>{"b"});
  EXPECT_FALSE(loop_.failure());
}

TEST_F(MemberLoopTest, MessagesNoMemberMayReceiveAreRefused) {
  EXPECT_THROW(loop_.on_message(ControlMessage{2, encode(CoordinatorMessage{}), false}), Internal);
  EXPECT_THROW(loop_.on_message(ControlMessage{0, encode(MemberMessage{}), false}), Internal);
  auto report = encode(FailureMessage{FailureMessage::Stage::kReport, {}, "x"});
  EXPECT_THROW(loop_.on_message(ControlMessage{0, report, false}), Internal);
}

TEST_F(MemberLoopTest, AVerdictIsFinal) {
  loop_.on_message(ControlMessage{0, encode(FailureMessage{FailureMessage::Stage::kVerdict, {5}, "the verdict"}), false});
  ASSERT_TRUE(loop_.failure());
  EXPECT_TRUE(loop_.failure()->verdict);
  EXPECT_EQ(loop_.failure()->reason, "the verdict");
}

TEST_F(MemberLoopTest, TheCoordinatorsGoodbyeOrClosedVerdictClosesTheSet) {
  loop_.on_message(ControlMessage{0, encode(FailureMessage{FailureMessage::Stage::kGoodbye, {}, ""}), false});
  ASSERT_TRUE(loop_.failure());
  EXPECT_TRUE(loop_.failure()->left);
  EXPECT_EQ(loop_.failure()->gone, std::vector<int>{0}) << "the coordinator that left is not waited for";
}

// Another host's leader may run entries before this member's log holds
// them (a host agreement): the coordinator's goodbye names how many it ran,
// and the set closes once they are here, its closed connection expected
// meanwhile; or after kClosingGrace all the same.
TEST_F(MemberLoopTest, TheCoordinatorsGoodbyeWaitsForTheEntriesItRan) {
  agreement_.length = 3;
  loop_.on_message(ControlMessage{0, encode(FailureMessage{FailureMessage::Stage::kGoodbye, {}, "", 5}), false});
  EXPECT_FALSE(loop_.failure()) << "the coordinator ran entries this log does not hold yet";
  EXPECT_TRUE(loop_.on_message(ControlMessage{0, {}, true}).empty());
  EXPECT_FALSE(loop_.failure()) << "its connection closing is expected";
  EXPECT_TRUE(loop_.close_once_run());
  agreement_.length = 5;
  EXPECT_FALSE(loop_.close_once_run());
  ASSERT_TRUE(loop_.failure());
  EXPECT_TRUE(loop_.failure()->left);
  EXPECT_EQ(loop_.failure()->gone, std::vector<int>{0});
}

TEST_F(MemberLoopTest, AClosedSetWhoseEntriesNeverComeClosesAfterAGrace) {
  agreement_.length = 0;
  loop_.on_message(ControlMessage{0, encode(FailureMessage{FailureMessage::Stage::kClosed, {}, "closed", 1}), false});
  EXPECT_TRUE(loop_.close_once_run());
  EXPECT_FALSE(loop_.failure());
  std::this_thread::sleep_for(kClosingGrace + milliseconds(50));
  EXPECT_FALSE(loop_.close_once_run());
  ASSERT_TRUE(loop_.failure());
  EXPECT_EQ(loop_.failure()->reason, "closed");
}

TEST_F(MemberLoopTest, AClosedVerdictIsFinalAndClean) {
  loop_.on_message(ControlMessage{0, encode(FailureMessage{FailureMessage::Stage::kClosed, {5}, "closed"}), false});
  ASSERT_TRUE(loop_.failure());
  EXPECT_TRUE(loop_.failure()->left);
  EXPECT_TRUE(loop_.failure()->verdict);
  EXPECT_EQ(loop_.failure()->reason, "closed");
}

TEST_F(MemberLoopTest, AProbeMeansTheCoordinatorAnswered) {
  loop_.on_message(ControlMessage{0, encode(FailureMessage{FailureMessage::Stage::kProbe, {}, "a collective failed"}), false});
  ASSERT_TRUE(loop_.failure());
  EXPECT_TRUE(loop_.failure()->needs_census);
  EXPECT_TRUE(loop_.failure()->coordinator_answered);
  EXPECT_TRUE(contains(loop_.failure()->reason, "global rank 1) found the set broken: a collective failed"))
      << loop_.failure()->reason;
}

TEST_F(MemberLoopTest, TheCoordinatorsClosedConnectionNamesIt) {
  EXPECT_TRUE(loop_.on_message(ControlMessage{0, {}, true}).empty());
  ASSERT_TRUE(loop_.failure());
  EXPECT_EQ(loop_.failure()->gone, std::vector<int>{0});
  EXPECT_TRUE(contains(loop_.failure()->reason, "coordinator, global rank 1")) << loop_.failure()->reason;
}

TEST_F(MemberLoopTest, ASilentCoordinatorIsGivenUpOnAfterTheOpTimeoutAndAGrace) {
  const milliseconds patience = options_.timeout + FailureProtocol::coordinator_grace(options_.timeout);
  EXPECT_EQ(loop_.inspect(now_, std::nullopt, Clock::time_point{}), Clock::time_point::max()) << "nothing waits";
  EXPECT_EQ(loop_.inspect(now_ + milliseconds{900}, now_, Clock::time_point{}), now_ + patience);
  EXPECT_FALSE(loop_.failure());
  // An op this rank ran meanwhile restarts the clock.
  const Clock::time_point ran = now_ + milliseconds{800};
  EXPECT_EQ(loop_.inspect(now_ + patience, now_, ran), ran + patience);
  EXPECT_FALSE(loop_.failure());
  loop_.inspect(ran + patience, now_, ran);
  ASSERT_TRUE(loop_.failure());
  EXPECT_TRUE(loop_.failure()->waited_out);
  EXPECT_TRUE(loop_.failure()->needs_census);
  EXPECT_TRUE(contains(loop_.failure()->reason, "decided nothing for")) << loop_.failure()->reason;
}

TEST_F(MemberLoopTest, WithoutAnOpTimeoutTheCoordinatorIsNeverGivenUpOn) {
  options_.timeout = milliseconds{0};
  EXPECT_EQ(loop_.inspection_interval().count(), 0);
  EXPECT_EQ(loop_.inspect(now_ + std::chrono::hours{24}, now_, Clock::time_point{}), Clock::time_point::max());
  EXPECT_FALSE(loop_.failure());
}

}  // namespace
}  // namespace hora
