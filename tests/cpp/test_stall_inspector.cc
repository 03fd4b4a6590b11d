// The coordinator's stall inspector, driven with a hand-made clock: when it
// warns, what the warning names, when a stall fails the set and why.
#include <gtest/gtest.h>

#include <optional>
#include <string>
#include <vector>

#include "coordinator/stall_inspector.h"

namespace hora {
namespace {

using std::chrono::milliseconds;
using Clock = StallInspector::Clock;

const Clock::time_point kStart = Clock::time_point() + std::chrono::hours(1);

Clock::time_point at(int ms) { return kStart + milliseconds(ms); }

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// Set 3 over global ranks [2, 5, 9]; rank 5 never submits "grad".
class StallInspectorTest : public ::testing::Test {
 protected:
  StallInspector make(StallOptions options) { return StallInspector(3, {2, 5, 9}, options); }

  std::vector<PendingOp> pending_ = {{"grad", {2, 9}, {5}}};
  int pending_calls_ = 0;
  std::function<std::vector<PendingOp>()> pending() {
    return [this] {
      ++pending_calls_;
      return pending_;
    };
  }
};

TEST_F(StallInspectorTest, WarnsOnceTheWarningTimePassesNamingTensorAndMissingRank) {
  StallInspector inspector = make({milliseconds(1000), milliseconds(0), milliseconds(0)});
  inspector.submitted("grad", at(0));
  EXPECT_TRUE(inspector.inspect(at(700), pending()).warning.empty());
  EXPECT_EQ(pending_calls_, 0);  // nothing near a limit: the negotiator is not asked
  EXPECT_TRUE(inspector.inspect(at(999), pending()).warning.empty());
  StallReport report = inspector.inspect(at(1000), pending());
  EXPECT_FALSE(report.failure);
  EXPECT_TRUE(contains(report.warning, "process set 3 [2, 5, 9]")) << report.warning;
  EXPECT_TRUE(contains(report.warning, "more than 1 s")) << report.warning;
  EXPECT_TRUE(contains(report.warning, "global rank 5 has not submitted 'grad'")) << report.warning;
  EXPECT_FALSE(contains(report.warning, "global rank 2")) << report.warning;
}

TEST_F(StallInspectorTest, RepeatsTheWarningOncePerWarningPeriod) {
  StallInspector inspector = make({milliseconds(1000), milliseconds(0), milliseconds(0)});
  inspector.submitted("grad", at(0));
  EXPECT_FALSE(inspector.inspect(at(1200), pending()).warning.empty());
  EXPECT_TRUE(inspector.inspect(at(1700), pending()).warning.empty());
  EXPECT_TRUE(inspector.inspect(at(2100), pending()).warning.empty());
  EXPECT_FALSE(inspector.inspect(at(2200), pending()).warning.empty());
}

TEST_F(StallInspectorTest, ResubmittingAFinishedNameRestartsItsClock) {
  StallInspector inspector = make({milliseconds(1000), milliseconds(0), milliseconds(0)});
  inspector.submitted("grad", at(0));
  inspector.submitted("grad", at(500));  // a second member: the clock keeps running
  inspector.finished("grad");
  inspector.submitted("grad", at(900));
  EXPECT_TRUE(inspector.inspect(at(1800), pending()).warning.empty());
  EXPECT_FALSE(inspector.inspect(at(1900), pending()).warning.empty());
}

TEST_F(StallInspectorTest, GroupsOpsByTheRankThatHasNotSubmittedThem) {
  pending_ = {{"a", {2}, {5, 9}}, {"b", {2, 9}, {5}}, {"young", {2}, {5, 9}}};
  StallInspector inspector = make({milliseconds(1000), milliseconds(0), milliseconds(0)});
  inspector.submitted("a", at(0));
  inspector.submitted("b", at(100));
  inspector.submitted("young", at(1500));
  const std::string warning = inspector.inspect(at(2000), pending()).warning;
  EXPECT_TRUE(contains(warning, "2 op(s)")) << warning;
  EXPECT_TRUE(contains(warning, "global rank 5 has not submitted 'a', 'b'")) << warning;
  const std::string last_line = warning.substr(warning.rfind('\n') + 1);
  EXPECT_EQ(last_line, "  global rank 9 has not submitted 'a'; it waits on 'b'") << warning;
  EXPECT_FALSE(contains(warning, "young")) << warning;
}

TEST_F(StallInspectorTest, ShutdownTimeFailsTheSetNamingTheMissingRanks) {
  StallInspector inspector = make({milliseconds(1000), milliseconds(2500), milliseconds(600'000)});
  inspector.submitted("grad", at(0));
  EXPECT_FALSE(inspector.inspect(at(2400), pending()).failure);
  StallReport report = inspector.inspect(at(2500), pending());
  ASSERT_TRUE(report.failure);
  EXPECT_EQ(report.failure->missing, std::vector<int>{5});
  EXPECT_FALSE(report.failure->diverged) << "a missing rank fails the set";
  EXPECT_TRUE(contains(report.failure->reason, "global rank(s) [5] did not submit 'grad' within 2.5 s"))
      << report.failure->reason;
  EXPECT_TRUE(contains(report.failure->reason, "HOROVOD_STALL_SHUTDOWN_TIME_SECONDS")) << report.failure->reason;
  EXPECT_TRUE(report.warning.empty());  // the failure says it all
}

TEST_F(StallInspectorTest, OpTimeoutFailsTheSetWhenShorterThanTheShutdownTime) {
  pending_ = {{"a", {2}, {5, 9}}, {"b", {2, 5}, {9}}};
  StallInspector inspector = make({milliseconds(0), milliseconds(0), milliseconds(3000)});
  inspector.submitted("a", at(0));
  inspector.submitted("b", at(10));
  StallReport report = inspector.inspect(at(3010), pending());
  ASSERT_TRUE(report.failure);
  EXPECT_EQ(report.failure->missing, (std::vector<int>{9}));
  EXPECT_TRUE(contains(report.failure->reason, "HORA_OP_TIMEOUT_SECONDS")) << report.failure->reason;
  EXPECT_TRUE(contains(report.failure->reason, "global rank(s) [9] did not submit 'a', 'b'")) << report.failure->reason;
}

// Rank 5 has not submitted 'a' but is alive, waiting on 'b': it is named
// with what it waits on and not counted as missing.
TEST_F(StallInspectorTest, ARankWaitingOnAnotherOpIsNotMissing) {
  pending_ = {{"a", {2, 9}, {5}, "allreduce 'a' (float32 [4])"}, {"b", {5}, {2, 9}, "broadcast 'b' (int64 [])"},
              {"c", {2}, {5, 9}, "allreduce 'c' (float32 [1])"}};
  StallInspector inspector = make({milliseconds(60'000), milliseconds(0), milliseconds(3000)});
  inspector.submitted("a", at(0));
  inspector.submitted("b", at(0));
  inspector.submitted("c", at(0));
  StallReport report = inspector.inspect(at(3000), pending());
  ASSERT_TRUE(report.failure);
  const std::string& reason = report.failure->reason;
  EXPECT_TRUE(report.failure->missing.empty()) << reason;
  EXPECT_TRUE(report.failure->diverged) << "diverged members' ops fail alone";
  EXPECT_TRUE(contains(reason, "the ranks diverged")) << reason;
  EXPECT_TRUE(contains(reason, "global rank 5 waits on broadcast 'b' (int64 [])")) << reason;
  EXPECT_TRUE(contains(reason, "global rank 2 waits on allreduce 'a' (float32 [4]), allreduce 'c' (float32 [1])"))
      << reason;
  EXPECT_FALSE(contains(reason, "missing")) << reason;
}

// Two ranks, each in a differently named op: diverged, warned about after
// the divergence time although the warning time is a minute.
class DivergenceTest : public StallInspectorTest {
 protected:
  DivergenceTest() {
    pending_ = {{"loss", {2, 9}, {5}, "allreduce 'loss' (float32 [4])"},
                {"Loss", {5}, {2, 9}, "allreduce 'Loss' (float32 [4])"}};
  }
  StallOptions options_{milliseconds(60'000), milliseconds(0), milliseconds(600'000), milliseconds(10'000)};
};

TEST_F(DivergenceTest, IsWarnedAboutAfterTheDivergenceTimeNamingEachRanksOp) {
  options_.divergence_timeout = milliseconds(0);  // the warning repeats instead of the set failing
  StallInspector inspector = make(options_);
  inspector.submitted("loss", at(0));
  inspector.submitted("Loss", at(0));
  for (int t = 0; t < 10'000; t += 1000) EXPECT_TRUE(inspector.inspect(at(t), pending()).warning.empty()) << t;
  const std::string warning = inspector.inspect(at(10'000), pending()).warning;
  EXPECT_TRUE(contains(warning, "process set 3 [2, 5, 9]: the ranks diverged")) << warning;
  EXPECT_TRUE(contains(warning, "\n  global rank 2 waits on allreduce 'loss' (float32 [4])")) << warning;
  EXPECT_TRUE(contains(warning, "\n  global rank 5 waits on allreduce 'Loss' (float32 [4])")) << warning;
  EXPECT_TRUE(contains(warning, "\n  global rank 9 waits on allreduce 'loss' (float32 [4])")) << warning;
  EXPECT_FALSE(contains(warning, "has not submitted")) << warning;
  // Repeated once per warning period, like any stall warning.
  EXPECT_TRUE(inspector.inspect(at(11'000), pending()).warning.empty());
  EXPECT_FALSE(inspector.inspect(at(70'000), pending()).warning.empty());
}

TEST_F(DivergenceTest, NeedsTwoInspectionsInARowToAgree) {
  // The ranks only just diverged (a rank that was computing submitted its
  // op a moment ago): no warning until a later inspection sees it too.
  StallInspector inspector = make(options_);
  inspector.submitted("loss", at(0));
  pending_ = {{"loss", {2, 9}, {5}, "allreduce 'loss' (float32 [4])"}};
  EXPECT_TRUE(inspector.inspect(at(9500), pending()).warning.empty());
  inspector.submitted("Loss", at(10'400));
  pending_.push_back({"Loss", {5}, {2, 9}, "allreduce 'Loss' (float32 [4])"});
  EXPECT_TRUE(inspector.inspect(at(10'500), pending()).warning.empty());
  EXPECT_TRUE(contains(inspector.inspect(at(11'500), pending()).warning, "diverged"));
}

TEST_F(DivergenceTest, TheWarningTimeBoundsIt) {
  options_.warning_time = milliseconds(2000);
  StallInspector inspector = make(options_);
  inspector.submitted("loss", at(0));
  inspector.submitted("Loss", at(0));
  EXPECT_EQ(inspector.inspection_interval(), milliseconds(500));
  EXPECT_TRUE(inspector.inspect(at(1500), pending()).warning.empty());
  EXPECT_TRUE(contains(inspector.inspect(at(2000), pending()).warning, "diverged"));
}

TEST_F(DivergenceTest, NothingWhenWarningsAreOff) {
  options_.warning_time = milliseconds(0);
  StallInspector inspector = make(options_);
  inspector.submitted("loss", at(0));
  inspector.submitted("Loss", at(0));
  EXPECT_TRUE(inspector.inspect(at(100'000), pending()).warning.empty());
}

TEST_F(DivergenceTest, FailsAtTheOpTimeoutAsDivergenceWithNobodyMissing) {
  options_.op_timeout = milliseconds(20'000);
  StallInspector inspector = make(options_);
  inspector.submitted("loss", at(0));
  inspector.submitted("Loss", at(0));
  StallReport report = inspector.inspect(at(20'000), pending());
  ASSERT_TRUE(report.failure);
  EXPECT_TRUE(report.failure->missing.empty());
  EXPECT_TRUE(report.failure->diverged);
  EXPECT_TRUE(contains(report.failure->reason, "the ranks diverged")) << report.failure->reason;
  EXPECT_TRUE(contains(report.failure->reason, "within 20 s (HORA_OP_TIMEOUT_SECONDS)")) << report.failure->reason;
  EXPECT_TRUE(contains(report.failure->reason, "global rank 5 waits on allreduce 'Loss' (float32 [4])"))
      << report.failure->reason;
}

TEST_F(DivergenceTest, FailsAfterTheDivergenceTimeoutWhenNothingChanges) {
  // Diverged members that submit nothing more run different code: the set
  // fails a minute after the divergence was first seen, not at the op timeout.
  StallInspector inspector = make(options_);
  inspector.submitted("loss", at(0));
  inspector.submitted("Loss", at(0));
  std::optional<StallFailure> failure;
  int failed_at = 0;
  for (int t = 1000; t <= 600'000 && !failure; t += 1000) {
    failure = inspector.inspect(at(t), pending()).failure;
    failed_at = t;
  }
  ASSERT_TRUE(failure);
  EXPECT_EQ(failed_at, 69'000);  // first seen diverged at 9 s, an inspection interval before the warning
  EXPECT_TRUE(failure->missing.empty());
  EXPECT_TRUE(failure->diverged);
  EXPECT_TRUE(contains(failure->reason, "the ranks diverged: each waits on an op the others have not submitted, "
                                        "and nothing was submitted or finished for 60 s "
                                        "(HORA_DIVERGENCE_TIMEOUT_SECONDS: 60 s)"))
      << failure->reason;
  EXPECT_TRUE(contains(failure->reason, "global rank 5 waits on allreduce 'Loss' (float32 [4])")) << failure->reason;
}

TEST_F(DivergenceTest, MembersStillSubmittingKeepTheOpTimeout) {
  StallInspector inspector = make(options_);
  inspector.submitted("loss", at(0));
  inspector.submitted("Loss", at(0));
  for (int t = 1000; t < 100'000; t += 1000) {
    if (t == 50'000) inspector.submitted("other", at(t));  // a member goes on submitting
    if (t == 90'000) inspector.finished("other");          // and an op completes
    ASSERT_FALSE(inspector.inspect(at(t), pending()).failure) << t;
  }
  EXPECT_FALSE(inspector.inspect(at(149'000), pending()).failure);
  EXPECT_TRUE(inspector.inspect(at(150'000), pending()).failure);
}

TEST_F(DivergenceTest, TheDivergenceTimeoutCanBeTurnedOff) {
  options_.divergence_timeout = milliseconds(0);
  options_.op_timeout = milliseconds(300'000);
  StallInspector inspector = make(options_);
  inspector.submitted("loss", at(0));
  inspector.submitted("Loss", at(0));
  for (int t = 1000; t < 300'000; t += 1000) ASSERT_FALSE(inspector.inspect(at(t), pending()).failure) << t;
  std::optional<StallFailure> failure = inspector.inspect(at(300'000), pending()).failure;
  ASSERT_TRUE(failure);
  EXPECT_TRUE(contains(failure->reason, "(HORA_OP_TIMEOUT_SECONDS)")) << failure->reason;
}

TEST_F(StallInspectorTest, SaysEarlyOnceWhomAnOpWaitsFor) {
  // Rank 5 waits on nothing (it is computing): one notice at the divergence
  // time, naming it, then the stall warning at the warning time.
  StallInspector inspector = make({milliseconds(60'000), milliseconds(0), milliseconds(600'000), milliseconds(10'000)});
  inspector.submitted("grad", at(0));
  EXPECT_TRUE(inspector.inspect(at(9000), pending()).warning.empty());
  const std::string notice = inspector.inspect(at(10'000), pending()).warning;
  EXPECT_TRUE(contains(notice, "process set 3 [2, 5, 9]: 'grad' has waited 10 s for global rank(s) [5], which have "
                               "not submitted it (still computing?); a stall warning follows at 60 s"))
      << notice;
  for (int t = 11'000; t < 60'000; t += 1000) EXPECT_TRUE(inspector.inspect(at(t), pending()).warning.empty()) << t;
  EXPECT_TRUE(contains(inspector.inspect(at(60'000), pending()).warning, "global rank 5 has not submitted 'grad'"));
  // A later stall of the set gets its notice again.
  inspector.finished("grad");
  EXPECT_TRUE(inspector.inspect(at(61'000), pending()).warning.empty());
  inspector.submitted("grad", at(62'000));
  EXPECT_TRUE(contains(inspector.inspect(at(72'000), pending()).warning, "has waited 10 s"));
}

TEST_F(StallInspectorTest, EverythingOffMeansNoInspections) {
  StallInspector inspector = make({milliseconds(0), milliseconds(0), milliseconds(0), milliseconds(0), milliseconds(0)});
  EXPECT_EQ(inspector.inspection_interval(), milliseconds(0));
  inspector.submitted("grad", at(0));
  StallReport report = inspector.inspect(at(10'000'000), pending());
  EXPECT_TRUE(report.warning.empty());
  EXPECT_FALSE(report.failure);
}

TEST_F(StallInspectorTest, InspectionIntervalFollowsTheShortestLimit) {
  EXPECT_EQ(make({milliseconds(60'000), milliseconds(0), milliseconds(600'000)}).inspection_interval(),
            milliseconds(1000));
  EXPECT_EQ(make({milliseconds(60'000), milliseconds(0), milliseconds(2000)}).inspection_interval(),
            milliseconds(500));
  EXPECT_EQ(make({milliseconds(400), milliseconds(0), milliseconds(0)}).inspection_interval(), milliseconds(100));
}

}  // namespace
}  // namespace hora
