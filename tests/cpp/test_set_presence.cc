// Members of a set meet before its transport connects: a member that never
// arrives is named as a rank that has not called hvd.init() (or
// add_process_set), with what the launcher knows of its process.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "hora/errors.h"
#include "hora/runtime.h"
#include "runtime/set_presence.h"
#include "transport/backend.h"

namespace hora {
namespace {

using std::chrono::milliseconds;

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

std::vector<uint8_t> bytes(const std::string& text) { return {text.begin(), text.end()}; }

ProcessSet member(int32_t id, std::vector<int> ranks, int me) {
  ProcessSet set{id, std::move(ranks), -1};
  for (size_t i = 0; i < set.ranks.size(); ++i)
    if (set.ranks[i] == me) set.rank = static_cast<int>(i);
  return set;
}

// What await_members threw on rank `me` while the others never came.
std::string absence_error(Store& job_store, int32_t id, std::vector<int> ranks, int me,
                          PresenceOptions options = {milliseconds(300), milliseconds(0)}) {
  auto set_store = make_prefix_store("process_set." + std::to_string(id), make_prefix_store("job", make_hash_store()));
  std::atomic<bool> cancelled{false};
  try {
    await_members(*set_store, job_store, member(id, std::move(ranks), me), options, cancelled);
  } catch (const Timeout& e) {
    return e.what();
  }
  ADD_FAILURE() << "no Timeout";
  return "";
}

TEST(SetPresence, MembersThatAllArriveGoOn) {
  auto store = make_hash_store();
  std::atomic<bool> cancelled{false};
  std::vector<std::thread> threads;
  for (int r = 0; r < 3; ++r)
    threads.emplace_back([&, r] {
      std::this_thread::sleep_for(milliseconds(30 * r));
      EXPECT_NO_THROW(await_members(*store, *store, member(0, {0, 1, 2}, r), {milliseconds(10'000)}, cancelled));
    });
  for (auto& t : threads) t.join();
}

TEST(SetPresence, ARankThatNeverCallsInitIsNamedAsSuch) {
  auto job_store = make_hash_store();
  const std::string error = absence_error(*job_store, 0, {0, 1, 2}, 0);
  EXPECT_TRUE(contains(error, "process set 0 [0, 1, 2]: global rank 1 has not called hvd.init() after 0.3 s; "
                              "global rank 2 has not called hvd.init() after 0.3 s (HORA_START_TIMEOUT)"))
      << error;
  EXPECT_FALSE(contains(error, "rendezvous")) << error;
  EXPECT_FALSE(contains(error, "its process")) << error;  // nobody said who watches the processes
}

TEST(SetPresence, WhatTheLauncherKnowsOfTheProcessIsSaid) {
  auto job_store = make_hash_store();
  job_store->set(kLauncherWatchKey, bytes("1"));
  job_store->set(launcher_process_key(2), bytes("exited with code 1"));
  const std::string error = absence_error(*job_store, 0, {0, 1, 2}, 0);
  EXPECT_TRUE(contains(error, "global rank 1 has not called hvd.init() after 0.3 s (its process is alive)")) << error;
  EXPECT_TRUE(contains(error, "global rank 2 has not called hvd.init() after 0.3 s (its process exited with code 1)"))
      << error;
}

TEST(SetPresence, AnotherSetNamesAddProcessSet) {
  auto job_store = make_hash_store();
  const std::string error = absence_error(*job_store, 4, {0, 2}, 2);
  EXPECT_TRUE(contains(error, "process set 4 [0, 2]: global rank 0 has not called add_process_set([0, 2]) after 0.3 s "
                              "(HORA_OP_TIMEOUT_SECONDS)"))
      << error;
}

TEST(SetPresence, TheLowestMemberPresentWarnsWhileWaiting) {
  auto job_store = make_hash_store();
  job_store->set(kLauncherWatchKey, bytes("1"));
  for (int me : {1, 2}) {
    testing::internal::CaptureStderr();
    absence_error(*job_store, 0, {0, 1, 2}, me, {milliseconds(450), milliseconds(200)});
    const std::string printed = testing::internal::GetCapturedStderr();
    if (me == 1) {
      EXPECT_TRUE(contains(printed, "hora: WARNING: process set 0 [0, 1, 2]: global rank 0 has not called hvd.init() "
                                    "after 0.2 s (its process is alive)"))
          << printed;
    } else {
      // Rank 1 has arrived in this test's world only when it is the caller.
      EXPECT_TRUE(contains(printed, "global rank 1 has not called hvd.init()")) << printed;
    }
  }
}

TEST(SetPresence, ANonLowestMemberStaysQuiet) {
  auto job_store = make_hash_store();
  auto set_store = make_hash_store();
  set_store->set("present.0", bytes("1"));  // rank 0 arrived, rank 2 did not
  std::atomic<bool> cancelled{false};
  testing::internal::CaptureStderr();
  EXPECT_THROW(await_members(*set_store, *job_store, member(0, {0, 1, 2}, 1), {milliseconds(450), milliseconds(200)},
                             cancelled),
               Timeout);
  EXPECT_EQ(testing::internal::GetCapturedStderr(), "");
}

TEST(SetPresence, CancellingStopsTheWait) {
  auto store = make_hash_store();
  std::atomic<bool> cancelled{false};
  std::thread canceller([&] {
    std::this_thread::sleep_for(milliseconds(100));
    cancelled = true;
  });
  EXPECT_THROW(await_members(*store, *store, member(0, {0, 1}, 0), {milliseconds(60'000)}, cancelled),
               InvalidArgument);
  canceller.join();
}

// A member whose process the launcher saw end never arrives: the others
// fail at once (within about half a second), naming it and how it ended,
// instead of waiting out the timeout.
TEST(SetPresence, AMemberWhoseProcessEndedFailsTheWaitAtOnce) {
  auto job_store = make_hash_store();
  auto set_store = make_hash_store();
  job_store->set(kLauncherWatchKey, bytes("1"));
  std::atomic<bool> cancelled{false};
  std::thread launcher([&] {
    std::this_thread::sleep_for(milliseconds(200));   // it dies while rank 0 waits
    job_store->set(launcher_process_key(3), bytes("killed by signal 9 (SIGKILL)"));
  });
  try {
    await_members(*set_store, *job_store, member(5, {0, 3}, 0), {milliseconds(60'000), milliseconds(0)}, cancelled);
    ADD_FAILURE() << "the wait ended without rank 3";
  } catch (const PeerFailure& e) {
    EXPECT_TRUE(contains(e.what(), "process set 5 [0, 3]: global rank 3 has not called add_process_set([0, 3]) after "))
        << e.what();
    EXPECT_TRUE(contains(e.what(), "(its process killed by signal 9 (SIGKILL)); it never will")) << e.what();
  }
  launcher.join();
}

TEST(SetPresence, MembersStillAliveAreWaitedFor) {
  auto job_store = make_hash_store();
  job_store->set(kLauncherWatchKey, bytes("1"));
  job_store->set(launcher_process_key(7), bytes("exited with code 0"));  // not a member
  const std::string error = absence_error(*job_store, 4, {0, 2}, 0, {milliseconds(1'200), milliseconds(0)});
  EXPECT_TRUE(contains(error, "global rank 2 has not called add_process_set([0, 2]) after 1.2 s (its process is alive)"))
      << error;
}

// Through the runtime: hvd.init() on rank 0 of two, rank 1 never calls it.
TEST(SetPresence, InitFailsNamingTheRankThatNeverCalledIt) {
  RuntimeConfig config;
  config.rank = 0;
  config.size = 2;
  config.start_timeout = milliseconds(400);
  try {
    Runtime runtime(config, make_hash_store(), make_local_backend_factory(), {});
    FAIL() << "init succeeded without rank 1";
  } catch (const Timeout& e) {
    EXPECT_TRUE(contains(e.what(), "process set 0 [0, 1]: global rank 1 has not called hvd.init() after 0.4 s"))
        << e.what();
  }
}

}  // namespace
}  // namespace hora
