// CpuPlacement: the ranks of a crowded machine in blocks over its CPUs;
// every thread of the process held on its CPU, and given back the CPUs it
// had; nothing done where the ranks fit or something narrowed the process
// already.
#include <gtest/gtest.h>
#include <pthread.h>
#include <sched.h>
#include <unistd.h>

#include <atomic>
#include <latch>
#include <thread>
#include <vector>

#include "util/cpu_placement.h"

namespace hora {
namespace {

std::vector<int> cpus_of(pthread_t thread) {
  cpu_set_t set;
  CPU_ZERO(&set);
  EXPECT_EQ(pthread_getaffinity_np(thread, sizeof set, &set), 0);
  std::vector<int> cpus;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu)
    if (CPU_ISSET(cpu, &set)) cpus.push_back(cpu);
  return cpus;
}

// The CPUs this process may use on a machine where every online one is
// allowed (the state CpuPlacement places from); empty elsewhere.
std::vector<int> all_online_cpus() {
  const std::vector<int> cpus = cpus_of(pthread_self());
  return static_cast<long>(cpus.size()) == sysconf(_SC_NPROCESSORS_ONLN) ? cpus : std::vector<int>{};
}

TEST(CpuPlacement, ConsecutivePositionsShareACpuInBlocks) {
  const std::vector<int> two{0, 1};
  std::vector<int> got;
  for (int position = 0; position < 4; ++position) got.push_back(placement_cpu(position, 4, two));
  EXPECT_EQ(got, (std::vector<int>{0, 0, 1, 1}));
  got.clear();
  for (int position = 0; position < 3; ++position) got.push_back(placement_cpu(position, 3, two));
  EXPECT_EQ(got, (std::vector<int>{0, 0, 1}));
  got.clear();
  const std::vector<int> numbered{2, 5, 7};
  for (int position = 0; position < 6; ++position) got.push_back(placement_cpu(position, 6, numbered));
  EXPECT_EQ(got, (std::vector<int>{2, 2, 5, 5, 7, 7}));
}

// More ranks than CPUs: this thread and one started before are held on the
// last position's CPU, a thread started meanwhile too; destroyed, all get
// every CPU back.
TEST(CpuPlacement, HoldsEveryThreadOnItsCpuAndGivesTheCpusBack) {
  const std::vector<int> cpus = all_online_cpus();
  if (cpus.size() < 2) GTEST_SKIP() << "this process may not use every online CPU, or there is one";
  const int count = static_cast<int>(cpus.size()) + 1;
  std::latch placed(1), checked(1), restored(1), done(1);
  std::vector<int> before_placing_cpus, after_restoring_cpus;
  std::thread earlier([&] {
    placed.wait();
    before_placing_cpus = cpus_of(pthread_self());
    checked.count_down();
    restored.wait();
    after_restoring_cpus = cpus_of(pthread_self());
    done.count_down();
  });
  {
    std::unique_ptr<CpuPlacement> placement = CpuPlacement::place(count - 1, count);
    ASSERT_NE(placement, nullptr);
    EXPECT_EQ(placement->cpu(), cpus.back());
    EXPECT_EQ(cpus_of(pthread_self()), std::vector<int>{cpus.back()});
    std::vector<int> later_cpus;
    std::thread later([&] { later_cpus = cpus_of(pthread_self()); });
    later.join();
    EXPECT_EQ(later_cpus, std::vector<int>{cpus.back()});
    placed.count_down();
    checked.wait();
    EXPECT_EQ(before_placing_cpus, std::vector<int>{cpus.back()}) << "a thread started before placing was left";
  }
  restored.count_down();
  done.wait();
  earlier.join();
  EXPECT_EQ(cpus_of(pthread_self()), cpus);
  EXPECT_EQ(after_restoring_cpus, cpus);
}

TEST(CpuPlacement, LeavesAProcessWhoseRanksFitOrWhoseCpusWereNarrowed) {
  const std::vector<int> cpus = all_online_cpus();
  if (cpus.size() < 2) GTEST_SKIP() << "this process may not use every online CPU, or there is one";
  const int fits = static_cast<int>(cpus.size());
  EXPECT_EQ(CpuPlacement::place(0, fits), nullptr);
  EXPECT_EQ(cpus_of(pthread_self()), cpus);
  cpu_set_t narrowed;
  CPU_ZERO(&narrowed);
  CPU_SET(cpus[0], &narrowed);
  CPU_SET(cpus[1], &narrowed);
  if (cpus.size() == 2) CPU_CLR(cpus[1], &narrowed);
  ASSERT_EQ(sched_setaffinity(0, sizeof narrowed, &narrowed), 0);
  const std::vector<int> narrowed_cpus = cpus_of(pthread_self());
  EXPECT_EQ(CpuPlacement::place(1, fits + 1), nullptr);
  EXPECT_EQ(cpus_of(pthread_self()), narrowed_cpus) << "a launcher's narrowing was not kept";
  cpu_set_t all;
  CPU_ZERO(&all);
  for (int cpu : cpus) CPU_SET(cpu, &all);
  ASSERT_EQ(sched_setaffinity(0, sizeof all, &all), 0);
}

}  // namespace
}  // namespace hora
