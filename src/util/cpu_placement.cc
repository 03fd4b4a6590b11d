#include "util/cpu_placement.h"

#include <dirent.h>
#include <unistd.h>

#include <cstdlib>

namespace hora {
namespace {

// Gives every thread of this process `mask`. Twice over the thread list:
// a thread started during the first pass by one not yet moved is in the
// second. A thread that exits meanwhile is no matter.
void give_every_thread(const cpu_set_t& mask) {
  for (int pass = 0; pass < 2; ++pass) {
    DIR* tasks = opendir("/proc/self/task");
    if (!tasks) return;
    while (const dirent* task = readdir(tasks)) {
      const pid_t tid = static_cast<pid_t>(std::atoi(task->d_name));
      if (tid > 0) sched_setaffinity(tid, sizeof mask, &mask);
    }
    closedir(tasks);
  }
}

}  // namespace

int placement_cpu(int position, int count, const std::vector<int>& cpus) {
  const size_t index = static_cast<size_t>(position) * cpus.size() / static_cast<size_t>(count);
  return cpus[index];
}

std::unique_ptr<CpuPlacement> CpuPlacement::place(int position, int count) {
  const long online = sysconf(_SC_NPROCESSORS_ONLN);
  if (online <= 0 || count <= online || position < 0 || position >= count) return nullptr;
  cpu_set_t allowed;
  if (sched_getaffinity(0, sizeof allowed, &allowed) != 0 || CPU_COUNT(&allowed) != online) return nullptr;
  std::vector<int> cpus;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu)
    if (CPU_ISSET(cpu, &allowed)) cpus.push_back(cpu);
  const int cpu = placement_cpu(position, count, cpus);
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(cpu, &one);
  if (sched_setaffinity(0, sizeof one, &one) != 0) return nullptr;
  give_every_thread(one);
  return std::unique_ptr<CpuPlacement>(new CpuPlacement(cpu, allowed));
}

CpuPlacement::~CpuPlacement() { give_every_thread(allowed_); }

}  // namespace hora
