#include "runtime/progress_pool.h"

#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

#include "hora/errors.h"
#include "runtime/progress_pool_parts.h"
#include "util/futex.h"
#include "util/log.h"

namespace hora {
namespace {

using progress_pool_parts::kCoalesce;
using std::chrono::milliseconds;

// A thread idle this long above the resting number exits.
constexpr milliseconds kIdleExit{1000};

// The pool whose thread this is, if any, and the watch it holds while it
// runs the sets it found ready (BlockingScope).
thread_local ProgressPool* this_threads_pool = nullptr;
thread_local void* this_threads_watch = nullptr;

}  // namespace

ProgressPool::ProgressPool(int resting, int max_threads, std::chrono::microseconds descriptor_spin)
    : resting_(std::max(0, resting)), max_threads_(std::max(1, max_threads)), descriptor_spin_(descriptor_spin) {
  auto descriptors = std::make_unique<Watch>();
  descriptors->epoll = epoll_create1(EPOLL_CLOEXEC);
  descriptors->bell = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  epoll_event bell{};
  bell.events = EPOLLIN;
  bell.data.u64 = 0;
  if (descriptors->epoll < 0 || descriptors->bell < 0 ||
      epoll_ctl(descriptors->epoll, EPOLL_CTL_ADD, descriptors->bell, &bell) != 0)
    throw Internal(std::string("progress pool: cannot make its epoll set: ") + std::strerror(errno));
  watches_.push_back(std::move(descriptors));
}

ProgressPool::~ProgressPool() {
  std::unique_lock<std::mutex> lock(mutex_);
  stopping_ = true;
  for (auto& watch : watches_) bump(*watch);
  for (Worker* idle : idle_) {
    idle->handed = true;
    ++coming_;
    idle->wake.release();
  }
  idle_.clear();
  all_exited_.wait(lock, [&] { return threads_ == 0; });
  std::vector<std::unique_ptr<Worker>> workers = std::move(workers_);
  lock.unlock();
  for (auto& worker : workers) worker->thread.join();
}

bool ProgressPool::supported() { return futex_wait_any_supported(); }

std::shared_ptr<ProgressPool::Slot> ProgressPool::add(Client& client) {
  auto slot = std::make_shared<Slot>(client);
  std::lock_guard<std::mutex> lock(mutex_);
  slot->id = ++last_id_;
  ready_.push_back(slot);
  staff_locked();
  return slot;
}

std::shared_ptr<ProgressPool::Slot> ProgressPool::add_and_run(Client& client) {
  auto slot = std::make_shared<Slot>(client);
  std::unique_lock<std::mutex> lock(mutex_);
  slot->id = ++last_id_;
  run(lock, slot);
  return slot;
}

void ProgressPool::notify(Slot& slot) {
  int state = slot.state.load();
  while (state == Slot::kRunning)
    if (slot.state.compare_exchange_weak(state, Slot::kAgain)) return;
  if (state != Slot::kIdle) return;
  std::lock_guard<std::mutex> lock(mutex_);
  notify_locked(slot.shared_from_this());
}

void ProgressPool::notify_locked(const std::shared_ptr<Slot>& slot, bool staff) {
  if (slot->removed) return;
  int state = slot->state.load();
  for (;;) {
    if (state == Slot::kIdle) {
      if (!slot->state.compare_exchange_weak(state, Slot::kQueued)) continue;
      ready_.push_back(slot);
      if (!staff) return;
      // The thread that sleeps on the set's control plane runs it: one
      // wake, and no re-arming for it to learn of afterwards.
      if (slot->watch && slot->watch->held && slot->watch->sleeping) return bump(*slot->watch);
      staff_locked();
      return;
    }
    if (state == Slot::kRunning) {
      if (!slot->state.compare_exchange_weak(state, Slot::kAgain)) continue;
      return;
    }
    return;
  }
}

void ProgressPool::remove(Slot& slot) {
  std::unique_lock<std::mutex> lock(mutex_);
  slot.removed = true;
  disarm_locked(slot);
  std::erase_if(ready_, [&](const std::shared_ptr<Slot>& queued) { return queued.get() == &slot; });
  removed_.wait(lock, [&] {
    const int state = slot.state.load();
    return state != Slot::kRunning && state != Slot::kAgain;
  });
}

int ProgressPool::threads() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return threads_;
}

int ProgressPool::idle_threads() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return static_cast<int>(idle_.size());
}

// A worker: runs queued sets first, then takes a watch nobody holds, else
// waits to be handed something.
void ProgressPool::work(Worker* self) {
  this_threads_pool = this;
  std::unique_lock<std::mutex> lock(mutex_);
  --coming_;
  for (;;) {
    if (!ready_.empty()) {
      std::shared_ptr<Slot> slot = std::move(ready_.front());
      ready_.pop_front();
      ++running_;
      staff_locked();  // a watch this thread left
      run(lock, slot);
      --running_;
      continue;
    }
    if (stopping_) break;
    if (Watch* vacant = vacant_watch_locked()) {
      keep_watch(lock, *vacant);
      continue;
    }
    if (!idle_wait(lock, self)) break;
  }
  --threads_;
  self->exited = true;
  all_exited_.notify_all();
}

// Holds `watch`: sleeps on it, and runs the sets it finds ready itself,
// still holding it (no thread hand-off on the way from a message to its
// set), until it has nothing to watch or a collective makes this thread
// give it up (BlockingScope).
void ProgressPool::keep_watch(std::unique_lock<std::mutex>& lock, Watch& watch) {
  watch.held = true;
  this_threads_watch = &watch;
  while (this_threads_watch == &watch) {
    this->watch(lock, watch);
    if (ready_.empty()) break;  // nothing left to watch, or stopping
    while (!ready_.empty() && this_threads_watch == &watch) {
      std::shared_ptr<Slot> slot = std::move(ready_.front());
      ready_.pop_front();
      ++running_;
      run(lock, slot);
      --running_;
    }
  }
  if (this_threads_watch == &watch) {
    watch.held = false;
    this_threads_watch = nullptr;
  }
}

// Waits to be handed something; false when this thread should exit.
bool ProgressPool::idle_wait(std::unique_lock<std::mutex>& lock, Worker* self) {
  self->handed = false;
  idle_.push_back(self);
  lock.unlock();
  const bool woken = self->wake.try_acquire_for(kIdleExit);
  lock.lock();
  if (self->handed) {
    if (!woken) self->wake.acquire();  // released under the lock we hold now: at once
    --coming_;
    return true;
  }
  std::erase(idle_, self);
  return threads_ <= resting_ && !stopping_;
}

// Sleeps on the watch's sets until one has something or is due; the sets
// found so are queued, and the watch is left to another thread.
void ProgressPool::watch(std::unique_lock<std::mutex>& lock, Watch& watch) {
  if (watch.epoll >= 0) return watch_descriptors(lock, watch);
  std::vector<FutexWait> waits;
  while (!stopping_ && !watch.slots.empty()) {
    waits.clear();
    waits.push_back(FutexWait{&watch.word, watch.word});
    Clock::time_point due = Clock::time_point::max();
    for (const auto& slot : watch.slots) {
      if (slot->armed) waits.push_back(slot->wait);
      due = std::min(due, slot->due);
    }
    watch.sleeping = true;
    lock.unlock();
    futex_wait_any(waits, due);
    lock.lock();
    watch.sleeping = false;
    const auto soon = Clock::now() + kCoalesce;
    for (size_t i = 0; i < watch.slots.size();) {
      std::shared_ptr<Slot> slot = watch.slots[i];
      const bool rung =
          slot->armed && std::atomic_ref<uint32_t>(*slot->wait.word).load(std::memory_order_acquire) != slot->wait.seen;
      if (!rung && slot->due > soon) {
        ++i;
        continue;
      }
      disarm_locked(*slot);  // takes it off watch.slots
      notify_locked(slot, /*staff=*/false);  // this thread runs it
    }
    if (!ready_.empty()) return;
  }
}

// Runs the set's service() until nothing notified it meanwhile, then arms
// it (or drops it when service() says so).
void ProgressPool::run(std::unique_lock<std::mutex>& lock, const std::shared_ptr<Slot>& slot) {
  if (slot->removed) return;
  slot->state.store(Slot::kRunning);
  for (;;) {
    lock.unlock();
    std::optional<Clock::time_point> due;
    try {
      due = slot->client->service();
    } catch (const std::exception& e) {
      log_warning(std::string("a process set's progress failed: ") + e.what());
    }
    lock.lock();
    if (!due) {
      slot->removed = true;
      disarm_locked(*slot);
      slot->state.store(Slot::kIdle);
      break;
    }
    // Armed while this thread holds the set: the engine thread's contract.
    arm_locked(slot, *due);
    int running = Slot::kRunning;
    if (slot->state.compare_exchange_strong(running, Slot::kIdle)) break;
    slot->state.store(Slot::kRunning);  // notified meanwhile: once more
  }
  removed_.notify_all();
}

void ProgressPool::arm_locked(const std::shared_ptr<Slot>& slot, Clock::time_point due) {
  if (slot->removed) return;
  if (slot->armed && slot->lent.load() && !rewatch_locked(*slot)) {
    disarm_locked(*slot);
    due = Clock::now() + kCoalesce;
  }
  if (!slot->armed) {
    std::optional<ControlPlane::Armed> armed = slot->client->control().arm();
    if (!armed) return notify_locked(slot);  // something is there already
    slot->armed = true;
    slot->wait = armed->wait;
    due = std::min(due, armed->look_again);
    if (!armed->fds.empty() && !watch_descriptors_locked(*slot, armed->fds)) due = Clock::now() + kCoalesce;
  }
  slot->due = due;
  if (!slot->watch) {
    auto roomy = watches_.end();
    if (slot->fds.empty())
      roomy = std::find_if(watches_.begin(), watches_.end(), [](const auto& watch) {
        return watch->epoll < 0 && watch->slots.size() < kSetsPerWatch;
      });
    else
      roomy = watches_.begin();  // the descriptor watch
    if (roomy == watches_.end()) roomy = watches_.insert(watches_.end(), std::make_unique<Watch>());
    slot->watch = roomy->get();
    slot->watch->slots.push_back(slot);
  }
  bump(*slot->watch);
  staff_locked();
}

// Disarms the set's control plane and takes it off its watch.
void ProgressPool::disarm_locked(Slot& slot) {
  // A lent set's descriptors are off the watch already; the others stay
  // there (armed again by arm_locked()) unless the set is dropped.
  if (slot.lent.exchange(false, std::memory_order_acq_rel)) slot.lent_fds.clear();
  if (slot.armed) {
    slot.client->control().disarm();
    slot.armed = false;
  }
  if (slot.removed) forget_descriptors_locked(slot);
  if (Watch* watch = std::exchange(slot.watch, nullptr))
    std::erase_if(watch->slots, [&](const std::shared_ptr<Slot>& listed) { return listed.get() == &slot; });
  slot.due = Clock::time_point::max();
}

// Makes a sleeping watcher look at its list again.
void ProgressPool::bump(Watch& watch) {
  if (!watch.sleeping) return;  // it looks before it sleeps again
  if (watch.bell >= 0) {
    const uint64_t one = 1;
    [[maybe_unused]] const ssize_t written = write(watch.bell, &one, sizeof one);
    return;
  }
  std::atomic_ref<uint32_t>(watch.word).fetch_add(1, std::memory_order_release);
  futex_wake_all(&watch.word);
}

ProgressPool::BlockingScope::BlockingScope(bool lazy) : pool_(this_threads_pool), lazy_(lazy) {
  if (!pool_) return;
  if (!lazy_) {
    enter();
    return;
  }
  previous_ = set_sleep_notice(SleepNotice{[](void* scope) { static_cast<BlockingScope*>(scope)->enter(); }, this});
}

// This thread no longer runs sets for now: its watch goes to another.
void ProgressPool::BlockingScope::enter() {
  if (entered_) return;
  entered_ = true;
  std::lock_guard<std::mutex> lock(pool_->mutex_);
  --pool_->running_;
  if (auto* held = static_cast<Watch*>(std::exchange(this_threads_watch, nullptr))) held->held = false;
  pool_->staff_locked();
}

ProgressPool::BlockingScope::~BlockingScope() {
  if (!pool_) return;
  if (lazy_) set_sleep_notice(previous_);
  if (!entered_) return;
  std::lock_guard<std::mutex> lock(pool_->mutex_);
  ++pool_->running_;
}

ProgressPool::Watch* ProgressPool::vacant_watch_locked() {
  for (auto& watch : watches_)
    if (!watch->held && !watch->slots.empty()) return watch.get();
  return nullptr;
}

// Makes sure a thread is coming for the queued sets unless one runs a set
// outside a collective (it takes the next when done), and one for every
// watch without a watcher: wakes idle threads, or starts new ones.
void ProgressPool::staff_locked() {
  int wanted = !ready_.empty() && running_ == 0 ? 1 : 0;
  for (auto& watch : watches_)
    if (!watch->held && !watch->slots.empty()) ++wanted;
  while (coming_ < wanted && !idle_.empty()) {
    Worker* idle = idle_.back();
    idle_.pop_back();
    idle->handed = true;
    ++coming_;
    idle->wake.release();
  }
  if (coming_ >= wanted || stopping_) return;
  std::erase_if(workers_, [](const std::unique_ptr<Worker>& worker) {
    if (!worker->exited) return false;
    worker->thread.join();  // it has left the pool's code already
    return true;
  });
  while (coming_ < wanted && threads_ < max_threads_) {
    auto worker = std::make_unique<Worker>();
    Worker* self = worker.get();
    ++threads_;
    ++coming_;
    worker->thread = std::thread([this, self] { work(self); });
    workers_.push_back(std::move(worker));
  }
}

}  // namespace hora
