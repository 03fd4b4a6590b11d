// Waiting on shared memory when threads outnumber cores
// (src/transport/shm/sync.h): members record the CPU they run on, a waiter
// whose CPU the member it waits for needs leaves it that CPU, and
// move_off_this_cpu() moves a thread without changing its affinity.
#include <gtest/gtest.h>
#include <sched.h>

#include <atomic>
#include <chrono>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "transport/shm/fast_lane.h"
#include "transport/shm/segment.h"
#include "transport/shm/shm_backend.h"
#include "transport/shm/sync.h"
#include "util/caller_waits.h"

namespace hora {
namespace {

std::vector<int> allowed_cpus() {
  cpu_set_t set;
  EXPECT_EQ(sched_getaffinity(0, sizeof set, &set), 0);
  std::vector<int> cpus;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu)
    if (CPU_ISSET(cpu, &set)) cpus.push_back(cpu);
  return cpus;
}

void pin_to(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  ASSERT_EQ(sched_setaffinity(0, sizeof set, &set), 0);
}

bool same_mask(const cpu_set_t& a, const cpu_set_t& b) { return CPU_EQUAL(&a, &b); }

// Sets `flag` when it goes out of scope, however the scope is left (a
// failed ASSERT returns early): threads waiting on it never hang.
struct SetOnExit {
  std::atomic<bool>& flag;
  ~SetOnExit() { flag.store(true); }
};

// One fresh segment of `members` and each member's view of the seats.
class MemberSeats : public ::testing::Test {
 protected:
  void make(uint32_t members) {
    const std::string name = shm::random_segment_name();
    segment_ = shm::Segment::create(name, shm::plan_layout(members, 4096, 4096));
    shm::unlink_segment(name);
    for (uint32_t r = 0; r < members; ++r) seats_.push_back(shm::member_seats(segment_, static_cast<int>(r)));
  }

  shm::Segment segment_;
  std::vector<shm::Seats> seats_;
};

TEST_F(MemberSeats, AMemberRecordsItsCpuAndCrowdsOnlyAWaiterThere) {
  make(3);
  const auto everyone = [](int) { return true; };
  // Before any record, nobody crowds anybody.
  EXPECT_FALSE(seats_[1].crowd(0, everyone));
  std::thread([&] {
    const int cpu = allowed_cpus().front();
    pin_to(cpu);
    EXPECT_EQ(seats_[0].take(), cpu);
    EXPECT_TRUE(seats_[1].at(0, cpu));
    EXPECT_TRUE(seats_[1].crowd(cpu, everyone));
    EXPECT_TRUE(seats_[2].crowd(cpu, everyone));
    // Only the members waited for count, and never the waiter itself.
    EXPECT_FALSE(seats_[1].crowd(cpu, [](int member) { return member != 0; }));
    EXPECT_FALSE(seats_[0].crowd(cpu, everyone));
    EXPECT_FALSE(seats_[1].crowd(cpu + 1, everyone));
    EXPECT_FALSE(seats_[1].crowd(-1, everyone));
    // Waiting on the same CPU, member 1 is crowded by member 0, and says so
    // in its own record.
    EXPECT_TRUE(seats_[1].crowded(everyone));
    EXPECT_TRUE(seats_[0].at(1, cpu));
  }).join();
}

TEST_F(MemberSeats, AFastLaneSubmitterRecordsItsCpu) {
  make(2);
  std::vector<shm::Doorbell> bells{shm::member_bell(segment_, 0), shm::member_bell(segment_, 1)};
  shm::FastLane lane(segment_, 1, 2, bells, seats_[1], std::chrono::microseconds(5));
  std::thread([&] {
    const int cpu = allowed_cpus().back();
    pin_to(cpu);
    EXPECT_FALSE(seats_[0].at(1, cpu));
    EXPECT_EQ(lane.submit(3), shm::FastLane::Outcome::kWaiting);
    EXPECT_TRUE(seats_[0].at(1, cpu));
  }).join();
}

TEST(MoveOffThisCpu, MovesTheThreadAndLeavesItsAffinityAsItWas) {
  const std::vector<int> cpus = allowed_cpus();
  ASSERT_GE(cpus.size(), 2u) << "this test needs two CPUs this process may use";
  std::thread([&] {
    // Two CPUs, so that where it goes is known.
    cpu_set_t two;
    CPU_ZERO(&two);
    CPU_SET(cpus[0], &two);
    CPU_SET(cpus[1], &two);
    ASSERT_EQ(sched_setaffinity(0, sizeof two, &two), 0);
    const int left = shm::move_off_this_cpu();
    const int now = sched_getcpu();
    ASSERT_TRUE(left == cpus[0] || left == cpus[1]) << left;
    EXPECT_EQ(now, left == cpus[0] ? cpus[1] : cpus[0]);
    cpu_set_t after;
    ASSERT_EQ(sched_getaffinity(0, sizeof after, &after), 0);
    EXPECT_TRUE(same_mask(two, after));
  }).join();
}

TEST(MoveOffThisCpu, AThreadPinnedToOneCpuStaysThere) {
  std::thread([&] {
    const int cpu = allowed_cpus().front();
    pin_to(cpu);
    EXPECT_EQ(shm::move_off_this_cpu(), -1);
    EXPECT_EQ(sched_getcpu(), cpu);
    cpu_set_t mask;
    ASSERT_EQ(sched_getaffinity(0, sizeof mask, &mask), 0);
    EXPECT_EQ(CPU_COUNT(&mask), 1);
    EXPECT_TRUE(CPU_ISSET(cpu, &mask));
  }).join();
}

// Member 1 is pinned to one CPU and waits there for member 0's waiter to
// leave it; the waiter may use one other CPU, kept as busy, so the
// scheduler has no reason to move it for a while (seconds, here). A waiter that
// sees it is crowded moves at once (in microseconds) and ends its wait;
// one that kept spinning, or only yielded, would spin out its second and
// then fail at its deadline.
TEST_F(MemberSeats, ACrowdedWaiterMovesOffTheCpuTheMemberItWaitsForNeeds) {
  const std::vector<int> cpus = allowed_cpus();
  ASSERT_GE(cpus.size(), 2u) << "this test needs two CPUs this process may use";
  make(2);
  uint32_t word = 0, sleepers = 0;
  shm::Doorbell bell(&word, &sleepers);
  std::atomic<bool> ready{false};
  std::atomic<bool> waiter_there{false};
  std::atomic<bool> waiter_done{false};
  std::atomic<bool> seen_elsewhere{false};
  const int cpu = cpus[0], other = cpus[1];
  std::atomic<bool> done{false};
  std::vector<std::thread> busy;
  // Two busy threads on the other CPU: as many as the waiter's CPU holds.
  for (int k = 0; k < 2; ++k)
    busy.emplace_back([&] {
      pin_to(other);
      while (!done.load()) cpu_relax();
    });
  std::thread member([&] {
    pin_to(cpu);
    seats_[1].take();
    while (!waiter_there.load() && !waiter_done.load()) std::this_thread::yield();
    // Member 0 records its CPU each time it asks whether it is crowded:
    // `ready` is set only once the waiter was seen on another CPU.
    while (!waiter_done.load()) {
      if (!seats_[1].at(0, cpu)) {
        seen_elsewhere.store(true);
        break;
      }
      std::this_thread::yield();
    }
    ready.store(true);
    bell.ring();
  });
  bool waited = false;
  std::thread waiter([&] {
    SetOnExit finished{waiter_done};
    pin_to(cpu);
    seats_[0].take();
    waiter_there.store(true);
    cpu_set_t two;
    CPU_ZERO(&two);
    CPU_SET(cpu, &two);
    CPU_SET(other, &two);
    ASSERT_EQ(sched_setaffinity(0, sizeof two, &two), 0);  // free to move, still on `cpu`
    const auto deadline = shm::Clock::now() + std::chrono::seconds(1);
    const CallerWaiting caller;  // a caller waits on the op: the wait spins
    waited = bell.wait([&] { return ready.load(); }, [] {}, deadline, std::chrono::seconds(1),
                       [&] { return seats_[0].crowded([](int) { return true; }); });
  });
  waiter.join();
  member.join();
  done.store(true);
  for (std::thread& t : busy) t.join();
  // Where the waiter runs after its wait says nothing: once the member has
  // left `cpu`, the scheduler may put the waiter back there at any time.
  EXPECT_TRUE(waited);
  EXPECT_TRUE(seen_elsewhere.load());
}

// A wait that no caller waits on (an op reduced while the rank computes)
// sleeps after a few microseconds instead of spinning out its budget on a
// core the rank's compute needs; while a caller waits, it spins. The waker
// rings only once it has seen the waiter asleep (an unwatched wait) or not
// at all (a watched one: the waiter must see `ready` by spinning).
TEST(CallerWaits, AWaitNoCallerWaitsOnSleepsAtOnceAndAWatchedOneSpins) {
  uint32_t word = 0, sleepers = 0;
  shm::Doorbell bell(&word, &sleepers);
  const auto budget = std::chrono::seconds(30);
  const auto deadline = shm::Clock::now() + std::chrono::seconds(60);
  {
    ASSERT_FALSE(caller_waiting());
    std::atomic<bool> ready{false};
    std::thread waker([&] {
      while (std::atomic_ref<uint32_t>(sleepers).load() == 0) std::this_thread::yield();
      ready.store(true);
      bell.ring();
    });
    const auto start = shm::Clock::now();
    EXPECT_TRUE(bell.wait([&] { return ready.load(); }, [] {}, deadline, budget));
    waker.join();
    EXPECT_LT(shm::Clock::now() - start, budget) << "it spun its whole budget";
  }
  {
    const CallerWaiting waiting;
    EXPECT_TRUE(caller_waiting());
    std::atomic<bool> ready{false};
    std::atomic<bool> slept{false};
    std::thread setter([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      slept.store(std::atomic_ref<uint32_t>(sleepers).load() != 0);
      ready.store(true);  // no ring: only a spinning waiter sees it
    });
    EXPECT_TRUE(bell.wait([&] { return ready.load(); }, [] {}, deadline, budget));
    setter.join();
    EXPECT_FALSE(slept.load()) << "a wait a caller waits on slept";
  }
  EXPECT_FALSE(caller_waiting());
}

// Where the machine's ranks outnumber its cores a caller waiting for its
// host's log looks, yielding between looks, counted (sleeping() is true) so
// that whoever would wake another of its threads rings its bell instead.
TEST(LookYielding, CountsAsASleeperWhileItLooksAndReturnsOnceReady) {
  uint32_t word = 0, sleepers = 0;
  shm::Doorbell bell(&word, &sleepers);
  std::atomic<bool> ready{false};
  std::atomic<bool> found{false};
  std::thread looker([&] { found.store(bell.look_yielding([&] { return ready.load(); }, std::chrono::seconds(30))); });
  const auto give_up = shm::Clock::now() + std::chrono::seconds(30);
  while (!bell.sleeping() && shm::Clock::now() < give_up) std::this_thread::yield();
  EXPECT_TRUE(bell.sleeping()) << "a looker that rings would miss";
  ready.store(true);
  looker.join();
  EXPECT_TRUE(found.load());
  EXPECT_FALSE(bell.sleeping()) << "still counted after it returned";
}

// A ring that finds only lookers counted makes no system call (the word a
// sleeper waits on does not move: a looker finds what was published by
// looking); with a sleeper too, it wakes the sleeper.
TEST(LookYielding, ARingForLookersAloneWakesNobodyAndOneForASleeperWakesIt) {
  uint32_t word = 0, sleepers = 0;
  shm::Doorbell bell(&word, &sleepers);
  std::atomic<int> published{0};
  std::atomic<bool> found{false};
  std::thread looker(
      [&] { found.store(bell.look_yielding([&] { return published.load() == 1; }, std::chrono::seconds(30))); });
  const auto give_up = shm::Clock::now() + std::chrono::seconds(30);
  while (!bell.sleeping() && shm::Clock::now() < give_up) std::this_thread::yield();
  ASSERT_TRUE(bell.sleeping());
  published.store(1);
  bell.ring();
  looker.join();
  EXPECT_TRUE(found.load());
  EXPECT_EQ(std::atomic_ref<uint32_t>(word).load(), 0u) << "a ring for a looker alone made a system call";

  std::atomic<bool> woken{false};
  std::thread sleeper([&] {
    woken.store(bell.wait([&] { return published.load() == 2; }, [] {}, shm::Clock::now() + std::chrono::seconds(30),
                          std::chrono::nanoseconds{}));
  });
  while (std::atomic_ref<uint32_t>(sleepers).load() == 0 && shm::Clock::now() < give_up) std::this_thread::yield();
  published.store(2);
  bell.ring();
  sleeper.join();
  EXPECT_TRUE(woken.load());
  EXPECT_EQ(std::atomic_ref<uint32_t>(word).load(), 1u) << "a ring for a sleeper did not wake it";
}

TEST(LookYielding, GivesUpAfterItsTimeUncounted) {
  uint32_t word = 0, sleepers = 0;
  shm::Doorbell bell(&word, &sleepers);
  const auto start = shm::Clock::now();
  EXPECT_FALSE(bell.look_yielding([] { return false; }, std::chrono::milliseconds(5)));
  EXPECT_GE(shm::Clock::now() - start, std::chrono::milliseconds(5));
  EXPECT_FALSE(bell.sleeping());
}

// A condition that throws (a leader's caller doing its host's work while it
// waits) leaves the bell as it found it: a count left behind would have
// every later alert ring a bell that nobody sleeps on.
TEST(LookYielding, AWaiterWhoseConditionThrowsIsNoLongerCounted) {
  uint32_t word = 0, sleepers = 0;
  shm::Doorbell bell(&word, &sleepers);
  int looks = 0;
  const auto throws_on_second_look = [&] {
    if (++looks == 2) throw std::runtime_error("the host's record could not go out");
    return false;
  };
  EXPECT_THROW(bell.look_yielding(throws_on_second_look, std::chrono::seconds(30)), std::runtime_error);
  EXPECT_FALSE(bell.sleeping());
  looks = 0;
  // wait(): the first look spins (none here), the second is after the count.
  EXPECT_THROW(bell.wait(throws_on_second_look, [] {}, shm::Clock::now() + std::chrono::seconds(30),
                         std::chrono::nanoseconds{}),
               std::runtime_error);
  EXPECT_FALSE(bell.sleeping());
}

}  // namespace
}  // namespace hora
