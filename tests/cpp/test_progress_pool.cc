// ProgressPool: sets run when notified, when their control plane rings and
// when they are due; idle sets cost no thread; a set blocked in a long
// collective never delays another; sets that wait for each other all get a
// thread; remove() waits for a running set. Then the same through Runtime:
// many live sets on a rank cost a bounded number of threads.
#include <gtest/gtest.h>
#include <dirent.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <latch>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "ranks_as_threads.h"
#include "runtime/progress_pool.h"
#include "util/futex.h"
#include "util/sleep_notice.h"

namespace hora {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

// A control plane that is only its arming: ring() moves one futex word.
class WordPlane final : public ControlPlane {
 public:
  void send(int, const std::vector<uint8_t>&) override {}
  std::optional<ControlMessage> receive(Clock::time_point) override { return std::nullopt; }
  void wake() override { ring(); }
  bool armable() const override { return true; }
  std::optional<Armed> arm() override {
    std::lock_guard<std::mutex> lock(mutex_);
    if (pending_) return std::nullopt;
    ++armed_;
    return Armed{FutexWait{&word_, std::atomic_ref<uint32_t>(word_).load()}};
  }
  void disarm() override {
    std::lock_guard<std::mutex> lock(mutex_);
    --armed_;
  }

  void ring() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      pending_ = true;
      std::atomic_ref<uint32_t>(word_).fetch_add(1);
    }
    futex_wake_all(&word_);
  }
  void take() {
    std::lock_guard<std::mutex> lock(mutex_);
    pending_ = false;
  }
  int armed() {
    std::lock_guard<std::mutex> lock(mutex_);
    return armed_;
  }

 private:
  std::mutex mutex_;
  uint32_t word_ = 0;
  bool pending_ = false;
  int armed_ = 0;
};

// A control plane armed as a descriptor (as TCP connections are): an
// eventfd that ring() makes readable and service() reads.
class DescriptorPlane final : public ControlPlane {
 public:
  DescriptorPlane() : fd_(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) {}
  ~DescriptorPlane() override { close(fd_); }
  void send(int, const std::vector<uint8_t>&) override {}
  std::optional<ControlMessage> receive(Clock::time_point) override {
    uint64_t count;
    while (read(fd_, &count, sizeof count) > 0) {
    }
    return std::nullopt;
  }
  void wake() override { ring(); }
  bool armable() const override { return true; }
  std::optional<Armed> arm() override {
    Armed armed;
    armed.fds = {fd_};
    return armed;
  }
  void ring() {
    const uint64_t one = 1;
    ASSERT_EQ(write(fd_, &one, sizeof one), static_cast<ssize_t>(sizeof one));
  }
  // A ring not yet read by receive().
  bool pending() const {
    pollfd readable{fd_, POLLIN, 0};
    return poll(&readable, 1, 0) == 1;
  }

 private:
  int fd_;
};

// Counts its runs; `during` runs inside service() (it may block); runs
// again after `period` unless that is zero; `stop` makes service() drop it.
class CountingSet final : public ProgressPool::Client {
 public:
  std::optional<Clock::time_point> service() override {
    plane.take();
    const int run = ++runs;
    if (during) during(run);
    if (stop) return std::nullopt;
    return period.count() > 0 ? Clock::now() + period : Clock::time_point::max();
  }
  ControlPlane& control() override { return plane; }

  WordPlane plane;
  std::atomic<int> runs{0};
  std::function<void(int)> during;
  std::chrono::milliseconds period{0};
  std::atomic<bool> stop{false};
};

// Waits up to `limit` for `done`.
bool eventually(const std::function<bool()>& done, std::chrono::milliseconds limit = 10s) {
  const auto until = Clock::now() + limit;
  while (!done()) {
    if (Clock::now() > until) return false;
    std::this_thread::sleep_for(1ms);
  }
  return true;
}

// Runs once when added, then sleeps armed until its plane rings.
TEST(ProgressPool, RunsASetWhenAddedAndWhenItsControlPlaneRings) {
  if (!ProgressPool::supported()) GTEST_SKIP() << "no futex_waitv on this kernel: sets keep their own thread";
  ProgressPool pool;
  CountingSet set;
  auto slot = pool.add(set);
  ASSERT_TRUE(eventually([&] { return set.runs >= 1 && set.plane.armed() == 1; }));
  std::this_thread::sleep_for(50ms);
  EXPECT_EQ(set.runs, 1) << "an armed set that nothing rang ran again";
  set.plane.ring();
  ASSERT_TRUE(eventually([&] { return set.runs >= 2 && set.plane.armed() == 1; }));
  pool.notify(*slot);
  ASSERT_TRUE(eventually([&] { return set.runs >= 3; }));
  pool.remove(*slot);
  EXPECT_EQ(set.plane.armed(), 0) << "a removed set's control plane is still armed";
}

class DescriptorSet final : public ProgressPool::Client {
 public:
  std::optional<Clock::time_point> service() override {
    plane.receive(Clock::now());
    ++runs;
    return Clock::time_point::max();
  }
  ControlPlane& control() override { return plane; }
  DescriptorPlane plane;
  std::atomic<int> runs{0};
};

TEST(ProgressPool, RunsASetWhoseControlPlaneIsDescriptorsWhenOneIsReadable) {
  if (!ProgressPool::supported()) GTEST_SKIP() << "no futex_waitv on this kernel";
  ProgressPool pool;
  DescriptorSet a, b;
  auto slot_a = pool.add(a);
  auto slot_b = pool.add(b);
  ASSERT_TRUE(eventually([&] { return a.runs == 1 && b.runs == 1; }));
  std::this_thread::sleep_for(50ms);
  EXPECT_EQ(a.runs + b.runs, 2) << "a set whose descriptors nothing made readable ran again";
  for (int i = 2; i <= 5; ++i) {
    b.plane.ring();
    ASSERT_TRUE(eventually([&] { return b.runs == i; })) << "ring " << i;
  }
  EXPECT_EQ(a.runs, 1);
  pool.remove(*slot_a);
  pool.remove(*slot_b);
}

// A set armed by several descriptors (as a coordinator's TCP connections
// are): `during(run)` runs inside service(), after it read them.
class SeveralDescriptorsSet final : public ProgressPool::Client {
 public:
  explicit SeveralDescriptorsSet(size_t count) : planes(count) {}
  std::optional<Clock::time_point> service() override {
    for (auto& plane : planes) plane.receive(Clock::now());
    const int run = ++runs;
    if (during) during(run);
    return Clock::time_point::max();
  }
  ControlPlane& control() override { return fds_; }

  // Arms every plane's descriptor, in order.
  class Fds final : public ControlPlane {
   public:
    explicit Fds(SeveralDescriptorsSet& set) : set_(set) {}
    void send(int, const std::vector<uint8_t>&) override {}
    std::optional<ControlMessage> receive(Clock::time_point) override { return std::nullopt; }
    void wake() override { set_.planes.front().ring(); }
    bool armable() const override { return true; }
    std::optional<Armed> arm() override {
      Armed armed;
      for (auto& plane : set_.planes) armed.fds.push_back(plane.arm()->fds.front());
      return armed;
    }

   private:
    SeveralDescriptorsSet& set_;
  };

  std::vector<DescriptorPlane> planes;
  std::atomic<int> runs{0};
  std::function<void(int)> during;

 private:
  Fds fds_{*this};
};

// Each descriptor of a set wakes it again after it woke it once (the watch
// puts back the descriptors that fired), whichever woke it last, and one
// that becomes readable while the set runs makes it run again.
TEST(ProgressPool, EveryDescriptorOfASetWakesItEachTimeItIsReadable) {
  if (!ProgressPool::supported()) GTEST_SKIP() << "no futex_waitv on this kernel";
  ProgressPool pool;
  SeveralDescriptorsSet set(3);
  std::atomic<int> ring_while_running{-1};
  set.during = [&](int) {
    const int which = ring_while_running.exchange(-1);
    if (which >= 0) set.planes[static_cast<size_t>(which)].ring();
  };
  auto slot = pool.add(set);
  ASSERT_TRUE(eventually([&] { return set.runs == 1; }));
  int expected = 1;
  for (int ring = 0; ring < 12; ++ring) {
    const size_t which = static_cast<size_t>((ring * 7) % 3);
    set.planes[which].ring();
    ++expected;
    ASSERT_TRUE(eventually([&] { return set.runs == expected; }))
        << "descriptor " << which << " did not wake the set at ring " << ring;
  }
  // Readable while the set runs, after it read them: another descriptor
  // than the one that woke it, then the same one. (`during` is set before
  // the pool may run the set, and reads only atomics.)
  for (int which : {2, 0}) {
    ring_while_running.store(which);
    set.planes[0].ring();
    expected += 2;
    ASSERT_TRUE(eventually([&] { return set.runs == expected; }))
        << "descriptor " << which << ", readable while the set ran, did not make it run again";
  }
  std::this_thread::sleep_for(50ms);
  EXPECT_EQ(set.runs, expected) << "a set ran with nothing readable";
  pool.remove(*slot);
}

// A removed set's descriptors leave the watch: readable, they wake nothing
// (the set's slot is gone); closed, their numbers go to a new set's
// descriptors, which wake that set.
TEST(ProgressPool, ARemovedSetsDescriptorsLeaveTheWatch) {
  if (!ProgressPool::supported()) GTEST_SKIP() << "no futex_waitv on this kernel";
  ProgressPool pool;
  auto first = std::make_unique<SeveralDescriptorsSet>(2);
  auto first_slot = pool.add(*first);
  ASSERT_TRUE(eventually([&] { return first->runs == 1; }));
  first->planes[1].ring();
  ASSERT_TRUE(eventually([&] { return first->runs == 2; }));
  pool.remove(*first_slot);
  first_slot.reset();
  first->planes[0].ring();
  first->planes[1].ring();
  std::this_thread::sleep_for(50ms);
  EXPECT_EQ(first->runs, 2) << "a removed set ran";
  EXPECT_TRUE(first->planes[0].pending() && first->planes[1].pending());
  first.reset();  // closes its descriptors
  SeveralDescriptorsSet second(2);
  auto second_slot = pool.add(second);
  ASSERT_TRUE(eventually([&] { return second.runs == 1; }));
  for (int ring = 0; ring < 4; ++ring) {
    second.planes[static_cast<size_t>(ring % 2)].ring();
    ASSERT_TRUE(eventually([&] { return second.runs == ring + 2; })) << "ring " << ring;
  }
  pool.remove(*second_slot);
}

TEST(ProgressPool, RunsASetAgainWhenItIsDue) {
  if (!ProgressPool::supported()) GTEST_SKIP() << "no futex_waitv on this kernel";
  ProgressPool pool;
  CountingSet set;
  set.period = 20ms;
  auto slot = pool.add(set);
  EXPECT_TRUE(eventually([&] { return set.runs >= 5; }, 5s)) << "a set due every 20 ms ran " << set.runs << " times";
  pool.remove(*slot);
}

// One set's collective blocks its thread; another set's messages are still
// served meanwhile. (Without the BlockingScope a collective opens, the
// other set would wait for the thread to come back.) `lazy`: the scope
// takes effect when the collective says it goes to sleep.
void long_collective_beside_another(bool lazy) {
  ProgressPool pool(/*resting=*/0);
  std::latch release(1);
  CountingSet busy, other;
  busy.during = [&](int run) {
    ProgressPool::BlockingScope collective(lazy);
    if (run != 2) return;
    if (lazy) about_to_sleep();
    release.wait();
  };
  auto busy_slot = pool.add(busy);
  auto other_slot = pool.add(other);
  ASSERT_TRUE(eventually([&] { return busy.plane.armed() == 1 && other.plane.armed() == 1; }));
  busy.plane.ring();
  ASSERT_TRUE(eventually([&] { return busy.runs == 2; }));
  for (int i = 0; i < 20; ++i) {
    const int before = other.runs;
    other.plane.ring();
    ASSERT_TRUE(eventually([&] { return other.runs > before; }, 5s))
        << "a set waited behind another set's collective";
  }
  release.count_down();
  pool.remove(*busy_slot);
  pool.remove(*other_slot);
}

TEST(ProgressPool, ASetInALongCollectiveDoesNotDelayAnother) {
  if (!ProgressPool::supported()) GTEST_SKIP() << "no futex_waitv on this kernel";
  long_collective_beside_another(/*lazy=*/false);
}

TEST(ProgressPool, ASetWhoseCollectiveGoesToSleepDoesNotDelayAnother) {
  if (!ProgressPool::supported()) GTEST_SKIP() << "no futex_waitv on this kernel";
  long_collective_beside_another(/*lazy=*/true);
}

// A lazy scope whose call never sleeps hands nothing over: no thread is
// woken or started for the watch it holds.
TEST(ProgressPool, ACollectiveThatCompletesWithoutSleepingWakesNoThread) {
  if (!ProgressPool::supported()) GTEST_SKIP() << "no futex_waitv on this kernel";
  ProgressPool pool(/*resting=*/0);
  CountingSet set;
  set.during = [&](int) { ProgressPool::BlockingScope collective(/*lazy=*/true); };
  auto slot = pool.add(set);
  ASSERT_TRUE(eventually([&] { return set.plane.armed() == 1 && pool.threads() == 1; }, 5s)) << pool.threads();
  for (int i = 2; i <= 20; ++i) {
    set.plane.ring();
    ASSERT_TRUE(eventually([&] { return set.runs == i; }));
  }
  EXPECT_EQ(pool.threads(), 1) << "short collectives made the pool start threads";
  pool.remove(*slot);
}

// Twelve sets whose collectives wait for each other (as sets of two ranks
// that started them in opposite orders would): each needs a thread at once.
TEST(ProgressPool, SetsThatWaitForEachOtherAllGetAThread) {
  if (!ProgressPool::supported()) GTEST_SKIP() << "no futex_waitv on this kernel";
  constexpr int kSets = 12;
  ProgressPool pool(/*resting=*/2);
  std::latch all_in(kSets);
  std::vector<std::unique_ptr<CountingSet>> sets;
  std::vector<std::shared_ptr<ProgressPool::Slot>> slots;
  for (int i = 0; i < kSets; ++i) {
    sets.push_back(std::make_unique<CountingSet>());
    sets.back()->during = [&](int run) {
      ProgressPool::BlockingScope collective;
      if (run == 2) all_in.arrive_and_wait();
    };
    slots.push_back(pool.add(*sets.back()));
  }
  ASSERT_TRUE(eventually([&] {
    for (auto& set : sets)
      if (set->plane.armed() != 1) return false;
    return true;
  }));
  for (auto& set : sets) set->plane.ring();
  ASSERT_TRUE(eventually([&] {
    for (auto& set : sets)
      if (set->runs < 2 || set->plane.armed() != 1) return false;
    return true;
  })) << "sets waiting for each other never all ran";
  EXPECT_TRUE(eventually([&] { return pool.threads() <= 2 + 1; }, 5s))
      << "idle threads above the resting number stayed: " << pool.threads();
  for (auto& slot : slots) pool.remove(*slot);
}

// `count` CountingSets registered with `pool` (each made ready by
// `configure` first), removed again at the end.
struct ManySets {
  ManySets(ProgressPool& pool, int count, const std::function<void(CountingSet&)>& configure = {}) : pool(pool) {
    for (int i = 0; i < count; ++i) {
      sets.push_back(std::make_unique<CountingSet>());
      if (configure) configure(*sets.back());
      slots.push_back(pool.add(*sets.back()));
    }
  }
  ~ManySets() {
    for (auto& slot : slots) pool.remove(*slot);
  }
  bool all(const std::function<bool(CountingSet&)>& holds) const {
    for (const auto& set : sets)
      if (!holds(*set)) return false;
    return true;
  }

  ProgressPool& pool;
  std::vector<std::unique_ptr<CountingSet>> sets;
  std::vector<std::shared_ptr<ProgressPool::Slot>> slots;
};

// 300 idle sets: the resting threads plus one watcher per 127 sets.
TEST(ProgressPool, ManyIdleSetsCostAFewThreads) {
  if (!ProgressPool::supported()) GTEST_SKIP() << "no futex_waitv on this kernel";
  constexpr int kSets = 300;
  ProgressPool pool(/*resting=*/2);
  ManySets many(pool, kSets);
  auto& sets = many.sets;
  ASSERT_TRUE(eventually([&] { return many.all([](CountingSet& set) { return set.plane.armed() == 1; }); }));
  const int watchers = (kSets + ProgressPool::kSetsPerWatch - 1) / ProgressPool::kSetsPerWatch;
  EXPECT_TRUE(eventually([&] { return pool.threads() <= 2 + watchers; }, 5s)) << pool.threads() << " threads";
  for (int i : {0, 150, 299}) {
    sets[i]->plane.ring();
    EXPECT_TRUE(eventually([&] { return sets[i]->runs >= 2; })) << "set " << i << " was not woken";
  }
}

// 100 sets due every 10 ms: bursts of short runs stay on the threads that
// are awake instead of waking one thread per queued set.
TEST(ProgressPool, ShortRunsDoNotMultiplyThreads) {
  if (!ProgressPool::supported()) GTEST_SKIP() << "no futex_waitv on this kernel";
  constexpr int kSets = 100;
  ProgressPool pool(/*resting=*/2);
  ManySets many(pool, kSets, [](CountingSet& set) { set.period = 10ms; });
  std::this_thread::sleep_for(2500ms);  // idle threads above the resting number go after a second
  EXPECT_LE(pool.threads(), 2 + 1 + 2) << "threads of a pool whose sets only run briefly";
  EXPECT_GE(many.sets[kSets / 2]->runs, 20) << "a set due every 10 ms ran too seldom";
}

TEST(ProgressPool, RemoveWaitsForARunningSetAndItIsNotRunAfterwards) {
  if (!ProgressPool::supported()) GTEST_SKIP() << "no futex_waitv on this kernel";
  ProgressPool pool;
  std::latch entered(1), release(1);
  CountingSet set;
  set.during = [&](int run) {
    if (run != 2) return;
    entered.count_down();
    release.wait();
  };
  auto slot = pool.add(set);
  ASSERT_TRUE(eventually([&] { return set.plane.armed() == 1; }));
  set.plane.ring();
  entered.wait();
  std::atomic<bool> removed{false};
  std::thread remover([&] {
    pool.remove(*slot);
    removed = true;
  });
  std::this_thread::sleep_for(50ms);
  EXPECT_FALSE(removed) << "remove() returned while the set ran";
  release.count_down();
  remover.join();
  const int runs = set.runs;
  set.plane.ring();
  pool.notify(*slot);
  std::this_thread::sleep_for(50ms);
  EXPECT_EQ(set.runs, runs) << "a removed set ran";
  EXPECT_EQ(set.plane.armed(), 0);
}

TEST(ProgressPool, ASetThatSaysStopIsDroppedAndDisarmed) {
  if (!ProgressPool::supported()) GTEST_SKIP() << "no futex_waitv on this kernel";
  ProgressPool pool;
  CountingSet set;
  set.stop = true;
  auto slot = pool.add(set);
  ASSERT_TRUE(eventually([&] { return set.runs == 1; }));
  set.plane.ring();
  pool.notify(*slot);
  std::this_thread::sleep_for(50ms);
  EXPECT_EQ(set.runs, 1) << "a dropped set ran again";
  EXPECT_EQ(set.plane.armed(), 0);
  pool.remove(*slot);
}

// A caller that waits borrows a set armed by descriptors: no pool thread
// runs it while it is lent, not even when a message comes (the caller
// reads it); given back, the pool watches it again, and a notification
// meanwhile makes it run then.
// Adds `set` and borrows it, once armed again after its first run (null
// where it never was).
std::shared_ptr<ProgressPool::Slot> borrowed_after_first_run(ProgressPool& pool, DescriptorSet& set) {
  auto slot = pool.add(set);
  if (!eventually([&] { return set.runs == 1; }) || !eventually([&] { return pool.borrow(*slot); })) return nullptr;
  return slot;
}

TEST(ProgressPool, ALentSetIsRunByItsBorrowerAloneAndWatchedAgainWhenGivenBack) {
  if (!ProgressPool::supported()) GTEST_SKIP() << "no futex_waitv on this kernel";
  ProgressPool pool;
  DescriptorSet set;
  auto slot = borrowed_after_first_run(pool, set);
  ASSERT_TRUE(slot) << "a set armed by descriptors was not lent";
  EXPECT_TRUE(ProgressPool::lent(*slot));
  EXPECT_FALSE(pool.borrow(*slot)) << "a set was lent twice at once";
  set.plane.ring();
  std::this_thread::sleep_for(50ms);
  EXPECT_EQ(set.runs, 1) << "a pool thread ran a lent set";
  std::optional<Clock::time_point> due = set.service();  // the borrower reads the message
  pool.notify(*slot);
  std::this_thread::sleep_for(50ms);
  EXPECT_EQ(set.runs, 2) << "a notification ran a lent set before it was given back";
  pool.give_back(*slot, due);
  EXPECT_FALSE(ProgressPool::lent(*slot));
  ASSERT_TRUE(eventually([&] { return set.runs == 3; })) << "the notification made while it was lent was lost";
  set.plane.ring();
  ASSERT_TRUE(eventually([&] { return set.runs == 4; })) << "a set given back is not watched again";
  pool.remove(*slot);
}

// Kept lent (the caller's next op is likely soon), a set is borrowed again
// at once; a message that comes while nobody borrows it is still read,
// after the lending time, and the set is watched again after the lending
// ends, by its time or by a notification. (That a notification ends it
// sooner than its time is not told apart here: 2 ms.) A thread this test
// loses its CPU to may end a lending before the test looks: it tries again.
TEST(ProgressPool, ASetKeptLentIsServedOnceTheLendingEnds) {
  if (!ProgressPool::supported()) GTEST_SKIP() << "no futex_waitv on this kernel";
  ProgressPool pool;
  DescriptorSet set;
  auto slot = pool.add(set);
  ASSERT_TRUE(eventually([&] { return set.runs == 1; }));
  const auto borrow = [&] { return eventually([&] { return pool.borrow(*slot); }); };

  bool borrowed_again = false;
  for (int attempt = 0; attempt < 100 && !borrowed_again; ++attempt) {
    ASSERT_TRUE(borrow());
    pool.give_back(*slot, set.service(), /*keep_lent=*/true);
    // Still lent: borrowing it again takes it from nobody.
    if (ProgressPool::lent(*slot) && pool.borrow(*slot)) {
      borrowed_again = true;
      pool.give_back(*slot, set.service(), /*keep_lent=*/true);
    }
  }
  ASSERT_TRUE(borrowed_again) << "a set kept lent was never borrowed again";
  set.plane.ring();
  ASSERT_TRUE(eventually([&] { return !set.plane.pending() && !ProgressPool::lent(*slot); }, 2s))
      << "a message to a set kept lent was never read";
  std::this_thread::sleep_for(20ms);
  set.plane.ring();
  ASSERT_TRUE(eventually([&] { return !set.plane.pending(); })) << "the lending ended without watching the set";

  ASSERT_TRUE(borrow());
  pool.give_back(*slot, set.service(), /*keep_lent=*/true);
  pool.notify(*slot);
  ASSERT_TRUE(eventually([&] { return !ProgressPool::lent(*slot); }));
  std::this_thread::sleep_for(20ms);
  set.plane.ring();
  ASSERT_TRUE(eventually([&] { return !set.plane.pending(); }))
      << "a set notified while lent was not watched again";
  pool.remove(*slot);
}

// A set kept lent runs on a pool thread only once its lending ends, not at
// the watcher's next wake: a caller that gives it back after every op and
// borrows it again for the next (100 µs later) keeps it lent, and the pool
// runs it about once every kLendFor. (The watcher runs sets due within its
// coalescing window together, which is longer than a lending: run so, the
// lending of a set given back and kept would end at once, every op.)
TEST(ProgressPool, ASetKeptLentRunsOnlyWhenItsLendingEnds) {
  if (!ProgressPool::supported()) GTEST_SKIP() << "no futex_waitv on this kernel";
  ProgressPool pool;
  DescriptorSet set;
  auto slot = borrowed_after_first_run(pool, set);
  ASSERT_TRUE(slot) << "a set armed by descriptors was not lent";
  const int runs_before = set.runs;
  const auto start = Clock::now();
  constexpr int kOps = 200;
  for (int op = 0; op < kOps; ++op) {
    pool.give_back(*slot, set.service(), /*keep_lent=*/true);
    std::this_thread::sleep_for(100us);  // the caller computes
    ASSERT_TRUE(eventually([&] { return pool.borrow(*slot); }));
  }
  const auto lendings = (Clock::now() - start) / ProgressPool::kLendFor;
  pool.give_back(*slot, set.service());
  // The borrower's own service() calls count too: kOps + 1 of them.
  const int pool_runs = set.runs - runs_before - (kOps + 1);
  EXPECT_LE(pool_runs, lendings + 2) << "the pool ran a set kept lent before its lending ended, " << pool_runs
                                     << " times in " << lendings << " lendings' time";
  pool.remove(*slot);
}

// Only sets armed by descriptors are lent (a futex word has no cheaper
// look than the pool's own), and never a removed one.
TEST(ProgressPool, OnlyDescriptorSetsThatThePoolHoldsAreLent) {
  if (!ProgressPool::supported()) GTEST_SKIP() << "no futex_waitv on this kernel";
  ProgressPool pool;
  CountingSet word_set;
  DescriptorSet descriptor_set;
  auto word_slot = pool.add(word_set);
  auto descriptor_slot = pool.add(descriptor_set);
  ASSERT_TRUE(eventually([&] { return word_set.plane.armed() == 1 && descriptor_set.runs == 1; }));
  std::this_thread::sleep_for(20ms);
  EXPECT_FALSE(pool.borrow(*word_slot));
  pool.remove(*descriptor_slot);
  EXPECT_FALSE(pool.borrow(*descriptor_slot)) << "a removed set was lent";
  pool.remove(*word_slot);
}

int threads_of_this_process() {
  int count = 0;
  if (DIR* dir = opendir("/proc/self/task")) {
    while (dirent* entry = readdir(dir))
      if (entry->d_name[0] != '.') ++count;
    closedir(dir);
  }
  return count;
}

TensorView view(std::vector<float>& v) { return {v.data(), DataType::kFloat32, {static_cast<int64_t>(v.size())}}; }

// Two ranks (threads, in-process control planes) in 64 live sets each, one
// op run in each: the sets' engines hold a few pool threads, not 128.
TEST(ProgressPool, ManyLiveSetsOfARuntimeCostAFewThreads) {
  if (!ProgressPool::supported()) GTEST_SKIP() << "no futex_waitv on this kernel";
  constexpr int kSets = 63;
  std::latch counted(2);
  std::atomic<int> before{0}, after{0};
  std::latch ready(2);
  test_support::run_ranks(2, [&](Runtime& runtime) {
    std::vector<float> data = {1.0f};
    OpArgs args;
    args.op = OpType::kAllreduce;
    args.input = view(data);
    args.output = view(data);
    args.name = "first";
    runtime.enqueue(0, args)->wait();
    ready.arrive_and_wait();
    if (runtime.rank() == 0) before = threads_of_this_process();
    std::vector<int32_t> ids;
    for (int i = 0; i < kSets; ++i) ids.push_back(runtime.add_process_set({0, 1}).id);
    for (int32_t id : ids) {
      args.name = "use";
      runtime.enqueue(id, args)->wait();
    }
    runtime.enqueue(0, args)->wait();
    if (runtime.rank() == 0) {
      // Threads started while sets connected and ran exit after a second idle.
      eventually([&] { return threads_of_this_process() - before <= 8; }, 5s);
      after = threads_of_this_process();
    }
    counted.arrive_and_wait();
    for (int32_t id : ids) runtime.remove_process_set(id);
  });
  EXPECT_LE(after - before, 8) << 2 * kSets << " live set engines on two ranks grew the process from " << before
                               << " to " << after << " threads";
}

}  // namespace
}  // namespace hora
