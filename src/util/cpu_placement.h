// Placing the ranks of a crowded machine on its CPUs (docs/performance.md,
// "Ranks placed on a crowded machine").
//
// Where a machine runs more of the job's ranks than it has CPUs, the
// kernel's balancing keeps ranks that wait by looking and yielding where
// they last ran: they never sleep, so they stay cache-hot and count as a
// full CPU's load, and a CPU with four of them keeps them while the other
// CPU runs two threads and idles. A rank held on one CPU of its own choosing
// cannot end up there. Ranks are placed in blocks: consecutive positions
// (a host's ranks, in the planner's order) share a CPU, so a host's members
// hand each other the CPU by yielding and the hosts run side by side.
#pragma once

#include <sched.h>

#include <memory>
#include <vector>

namespace hora {

// The CPU of the `position`th of `count` ranks placed over `cpus` (CPU
// numbers, ascending): position * cpus.size() / count, so that every CPU
// takes a block of consecutive positions.
int placement_cpu(int position, int count, const std::vector<int>& cpus);

// Every thread of this process held on one CPU while it lives; destroyed,
// every thread gets back the CPUs this process was allowed before. One per
// process at a time (the planner of the live Runtime holds it). Any thread.
class CpuPlacement {
 public:
  // Places this process as the `position`th of `count` ranks sharing this
  // machine's CPUs. Null, touching nothing, where they do not outnumber
  // the machine's online CPUs, where something narrowed this process's CPUs
  // already (a launcher's binding, a cpuset: those are kept), or where the
  // kernel refuses.
  static std::unique_ptr<CpuPlacement> place(int position, int count);

  ~CpuPlacement();
  CpuPlacement(const CpuPlacement&) = delete;
  CpuPlacement& operator=(const CpuPlacement&) = delete;

  int cpu() const { return cpu_; }

 private:
  CpuPlacement(int cpu, const cpu_set_t& allowed) : cpu_(cpu), allowed_(allowed) {}

  const int cpu_;
  const cpu_set_t allowed_;  // before placing
};

}  // namespace hora
