// ProgressPool's descriptor watch (the epoll set of every TCP control
// connection) and the lending of a set to a caller that waits for it
// (borrow(), give_back()): docs/progress_threads.md.
#include <sched.h>
#include <sys/epoll.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "runtime/progress_pool.h"
#include "runtime/progress_pool_parts.h"
#include "util/caller_waits.h"
#include "util/log.h"

namespace hora {
namespace {

using progress_pool_parts::kCoalesce;
using std::chrono::milliseconds;

// The descriptor watch's key of a set's `index`th descriptor (0 is the
// watch's own eventfd; set ids start at 1).
uint64_t descriptor_key(uint64_t id, size_t index) { return id << 32 | static_cast<uint32_t>(index); }

// Puts a set's descriptor on the watch (`op`: EPOLL_CTL_ADD, or
// EPOLL_CTL_MOD for one that fired); false, with a warning, when the kernel
// refuses it.
bool watch_one(int epoll, int op, uint64_t key, int fd) {
  epoll_event event{};
  event.events = EPOLLIN | EPOLLONESHOT;
  event.data.u64 = key;
  if (epoll_ctl(epoll, op, fd, &event) == 0) return true;
  log_warning(std::string("progress pool: cannot watch a control connection: ") + std::strerror(errno));
  return false;
}

}  // namespace

bool ProgressPool::lent(const Slot& slot) { return slot.lent.load(std::memory_order_acquire); }

bool ProgressPool::borrow(Slot& slot) {
  // Still lent from the last time: nothing to take off the watch.
  int idle = Slot::kIdle;
  if (slot.lent.load(std::memory_order_acquire)) return slot.state.compare_exchange_strong(idle, Slot::kRunning);
  std::lock_guard<std::mutex> lock(mutex_);
  if (slot.removed || !slot.armed || slot.fds.empty()) return false;
  if (!slot.state.compare_exchange_strong(idle, Slot::kRunning)) return false;
  std::vector<int> fds = slot.fds;
  forget_descriptors_locked(slot);
  slot.lent_fds = std::move(fds);
  slot.lent.store(true, std::memory_order_release);
  return true;
}

void ProgressPool::give_back(Slot& slot, std::optional<Clock::time_point> due, bool keep_lent) {
  std::lock_guard<std::mutex> lock(mutex_);
  const std::shared_ptr<Slot> shared = slot.shared_from_this();
  if (!due) {
    slot.removed = true;
    disarm_locked(slot);
  } else if (slot.lent.load() && slot.armed && keep_lent) {
    // Its watch runs it once the lending ends: one wake of the watcher at
    // most every kLendFor while the caller keeps borrowing it.
    slot.due = std::min(*due, Clock::now() + kLendFor);
    Watch* watch = slot.watch;
    if (watch && watch->sleeping && watch->sleep_until > slot.due + kLendFor) bump(*watch);
  } else {
    // Its descriptors go back on the watch (or, where a watcher that found
    // it due meanwhile disarmed it, it is armed again).
    arm_locked(shared, *due);
  }
  int running = Slot::kRunning;
  if (!slot.state.compare_exchange_strong(running, Slot::kIdle)) {
    slot.state.store(Slot::kIdle);  // notified meanwhile: a thread runs it
    notify_locked(shared);
  }
  removed_.notify_all();
}

void ProgressPool::watch_descriptors(std::unique_lock<std::mutex>& lock, Watch& watch) {
  epoll_event events[64];
  std::vector<uint64_t> rung;
  while (!stopping_ && !watch.slots.empty()) {
    Clock::time_point due = Clock::time_point::max();
    for (const auto& slot : watch.slots) due = std::min(due, slot->due);
    int timeout_ms = -1;
    if (due != Clock::time_point::max()) {
      const auto left = std::chrono::ceil<milliseconds>(due - Clock::now()).count();
      timeout_ms = static_cast<int>(std::clamp<int64_t>(left, 0, 1'000'000));
    }
    watch.sleeping = true;
    watch.sleep_until =
        timeout_ms < 0 ? Clock::time_point::max() : Clock::now() + milliseconds(timeout_ms);
    lock.unlock();
    int count = 0;
    if (descriptor_spin_.count() > 0 && timeout_ms != 0 && caller_waiting_unlooked()) {
      const auto spin_until = Clock::now() + descriptor_spin_;
      while ((count = epoll_wait(watch.epoll, events, 64, 0)) == 0 && Clock::now() < spin_until &&
             caller_waiting_unlooked()) {
        sched_yield();  // the thread that would send the message may share this CPU
      }
      if (count == 0 && due != Clock::time_point::max()) {
        const auto left = std::chrono::ceil<milliseconds>(due - Clock::now()).count();
        timeout_ms = static_cast<int>(std::clamp<int64_t>(left, 0, 1'000'000));
      }
    }
    if (count == 0) count = epoll_wait(watch.epoll, events, 64, timeout_ms);
    lock.lock();
    watch.sleeping = false;
    rung.clear();
    for (int i = 0; i < count; ++i) {
      const uint64_t key = events[i].data.u64;
      if (key == 0) {
        uint64_t drained;
        while (read(watch.bell, &drained, sizeof drained) > 0) {
        }
        continue;
      }
      rung.push_back(key >> 32);
      // One-shot: it goes back on the watch when its set is armed again.
      auto it = registered_.find(key >> 32);
      if (it != registered_.end()) it->second->fired.push_back(static_cast<uint32_t>(key));
    }
    // Sets due soon run now, together; a set kept lent only once its
    // lending ends (kLendFor is shorter than the coalescing: running it
    // early would end every lending at the watcher's next wake).
    const auto now = Clock::now(), soon = now + kCoalesce;
    for (size_t i = 0; i < watch.slots.size();) {
      std::shared_ptr<Slot> slot = watch.slots[i];
      if (std::find(rung.begin(), rung.end(), slot->id) == rung.end() && slot->due > (slot->lent.load() ? now : soon)) {
        ++i;
        continue;
      }
      disarm_locked(*slot);
      notify_locked(slot, /*staff=*/false);  // this thread runs it
    }
    if (!ready_.empty()) return;
  }
}

// Puts the slot's descriptors on the watch: where they are there already,
// only those that fired since; false (none left on it, and the slot looked
// at again soon) when the kernel refuses one.
bool ProgressPool::watch_descriptors_locked(Slot& slot, const std::vector<int>& fds) {
  const int epoll = watches_.front()->epoll;
  if (!slot.fds.empty() && slot.fds == fds) {
    for (uint32_t index : slot.fired) {
      if (watch_one(epoll, EPOLL_CTL_MOD, descriptor_key(slot.id, index), fds[index])) continue;
      forget_descriptors_locked(slot);
      return false;
    }
    slot.fired.clear();
    return true;
  }
  forget_descriptors_locked(slot);
  registered_[slot.id] = &slot;
  for (size_t i = 0; i < fds.size(); ++i) {
    if (watch_one(epoll, EPOLL_CTL_ADD, descriptor_key(slot.id, i), fds[i])) {
      slot.fds.push_back(fds[i]);
      continue;
    }
    forget_descriptors_locked(slot);
    return false;
  }
  return true;
}

// A lent set's descriptors go back on the watch; false (left off) when the
// kernel refuses one.
bool ProgressPool::rewatch_locked(Slot& slot) {
  const std::vector<int> fds = std::move(slot.lent_fds);
  slot.lent_fds.clear();
  slot.lent.store(false, std::memory_order_release);
  return watch_descriptors_locked(slot, fds);
}

// Takes the slot's descriptors off the watch.
void ProgressPool::forget_descriptors_locked(Slot& slot) {
  for (int fd : slot.fds) epoll_ctl(watches_.front()->epoll, EPOLL_CTL_DEL, fd, nullptr);
  slot.fds.clear();
  slot.fired.clear();
  registered_.erase(slot.id);
}

}  // namespace hora
