// Waiting on shared memory when threads outnumber cores
// (src/transport/shm/sync.h): members record the CPU they run on, a waiter
// whose CPU the member it waits for needs leaves it that CPU, and
// move_off_this_cpu() moves a thread without changing its affinity.
#include <gtest/gtest.h>
#include <sched.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "transport/shm/fast_lane.h"
#include "transport/shm/segment.h"
#include "transport/shm/shm_backend.h"
#include "transport/shm/sync.h"

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

// One fresh segment of `members` and each member's view of the seats.
class Seats : public ::testing::Test {
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

TEST_F(Seats, AMemberRecordsItsCpuAndCrowdsOnlyAWaiterThere) {
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

TEST_F(Seats, AFastLaneSubmitterRecordsItsCpu) {
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
    cpu_set_t before;
    ASSERT_EQ(sched_getaffinity(0, sizeof before, &before), 0);
    const int from = sched_getcpu();
    ASSERT_TRUE(shm::move_off_this_cpu());
    EXPECT_NE(sched_getcpu(), from);
    cpu_set_t after;
    ASSERT_EQ(sched_getaffinity(0, sizeof after, &after), 0);
    EXPECT_TRUE(same_mask(before, after));
    // Not again within kMinMoveInterval.
    EXPECT_FALSE(shm::move_off_this_cpu());
  }).join();
}

TEST(MoveOffThisCpu, AThreadPinnedToOneCpuStaysThere) {
  std::thread([&] {
    const int cpu = allowed_cpus().front();
    pin_to(cpu);
    EXPECT_FALSE(shm::move_off_this_cpu());
    EXPECT_EQ(sched_getcpu(), cpu);
    cpu_set_t mask;
    ASSERT_EQ(sched_getaffinity(0, sizeof mask, &mask), 0);
    EXPECT_EQ(CPU_COUNT(&mask), 1);
    EXPECT_TRUE(CPU_ISSET(cpu, &mask));
  }).join();
}

// Member 1 is pinned to one CPU and waits there for member 0's waiter to
// leave it; every other CPU is kept as busy, so the scheduler has no
// reason to move the waiter for a while (seconds, here). A waiter that
// sees it is crowded moves at once (in microseconds) and ends its wait;
// one that kept spinning, or only yielded, would spin out its second and
// then fail at its deadline.
TEST_F(Seats, ACrowdedWaiterMovesOffTheCpuTheMemberItWaitsForNeeds) {
  const std::vector<int> cpus = allowed_cpus();
  ASSERT_GE(cpus.size(), 2u) << "this test needs two CPUs this process may use";
  make(2);
  uint32_t word = 0, sleepers = 0;
  shm::Doorbell bell(&word, &sleepers);
  std::atomic<bool> ready{false};
  std::atomic<bool> waiter_there{false};
  std::atomic<bool> waiter_done{false};
  const int cpu = cpus.front();
  std::atomic<bool> done{false};
  std::vector<std::thread> busy;
  // Two busy threads on each other CPU: as many as the waiter's CPU holds.
  for (size_t i = 1; i < cpus.size(); ++i)
    for (int k = 0; k < 2; ++k)
      busy.emplace_back([&, other = cpus[i]] {
        pin_to(other);
        while (!done.load()) shm::cpu_relax();
      });
  std::thread member([&] {
    pin_to(cpu);
    seats_[1].take();
    while (!waiter_there.load()) std::this_thread::yield();
    // Member 0 records its CPU each time it asks whether it is crowded.
    while (seats_[1].at(0, cpu) && !waiter_done.load()) std::this_thread::yield();
    ready.store(true);
    bell.ring();
  });
  bool waited = false;
  int moved_to = -1;
  std::thread waiter([&] {
    pin_to(cpu);
    cpu_set_t all;
    CPU_ZERO(&all);
    for (int c : cpus) CPU_SET(c, &all);
    seats_[0].take();
    waiter_there.store(true);
    ASSERT_EQ(sched_setaffinity(0, sizeof all, &all), 0);  // free to move, still on `cpu`
    const auto deadline = shm::Clock::now() + std::chrono::seconds(1);
    waited = bell.wait([&] { return ready.load(); }, [] {}, deadline, std::chrono::seconds(1),
                       [&] { return seats_[0].crowded([](int) { return true; }); });
    moved_to = sched_getcpu();
    waiter_done.store(true);
  });
  waiter.join();
  member.join();
  done.store(true);
  for (std::thread& t : busy) t.join();
  EXPECT_TRUE(waited);
  EXPECT_NE(moved_to, cpu);
}

}  // namespace
}  // namespace hora
