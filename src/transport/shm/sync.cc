#include "transport/shm/sync.h"

#include <linux/futex.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <ctime>
#include <map>
#include <mutex>

namespace hora::shm {
namespace {

long futex(uint32_t* word, int op, uint32_t value, const timespec* timeout) {
  // No FUTEX_PRIVATE_FLAG: the word is shared between processes.
  return syscall(SYS_futex, word, op, value, timeout, nullptr, 0);
}

int open_pidfd(pid_t pid) {
#ifdef SYS_pidfd_open
  return static_cast<int>(syscall(SYS_pidfd_open, pid, 0));
#else
  (void)pid;
  errno = ENOSYS;
  return -1;
#endif
}

}  // namespace

void Doorbell::ring() const noexcept {
  std::atomic_thread_fence(std::memory_order_seq_cst);
  // Lookers alone (the high half) find what was published by looking.
  if ((std::atomic_ref<uint32_t>(*sleepers_).load(std::memory_order_relaxed) & (kLooker - 1)) == 0) return;
  std::atomic_ref<uint32_t>(*word_).fetch_add(1, std::memory_order_release);
  futex(word_, FUTEX_WAKE, INT_MAX, nullptr);
}

bool Doorbell::sleeping() const noexcept {
  std::atomic_thread_fence(std::memory_order_seq_cst);
  return std::atomic_ref<uint32_t>(*sleepers_).load(std::memory_order_relaxed) != 0;
}

void Doorbell::sleep(uint32_t seen, Clock::duration timeout) const noexcept {
  const auto nanos = std::chrono::duration_cast<std::chrono::nanoseconds>(timeout).count();
  if (nanos <= 0) return;
  timespec relative{static_cast<time_t>(nanos / 1'000'000'000), static_cast<long>(nanos % 1'000'000'000)};
  // EAGAIN (the word moved), EINTR and ETIMEDOUT all mean: look again.
  futex(word_, FUTEX_WAIT, seen, &relative);
}

int move_off_this_cpu() noexcept {
  cpu_set_t allowed;
  if (sched_getaffinity(0, sizeof allowed, &allowed) != 0) return -1;  // also: CPUs beyond CPU_SETSIZE
  const int cpu = sched_getcpu();
  if (cpu < 0 || cpu >= CPU_SETSIZE || !CPU_ISSET(cpu, &allowed) || CPU_COUNT(&allowed) < 2) return -1;
  cpu_set_t others = allowed;
  CPU_CLR(cpu, &others);
  // Taking this CPU out of the thread's mask moves it at once; putting the
  // mask back lets the scheduler place it anywhere again later.
  if (sched_setaffinity(0, sizeof others, &others) != 0) return -1;
  for (int attempt = 0; attempt < 3; ++attempt)
    if (sched_setaffinity(0, sizeof allowed, &allowed) == 0) break;
  return cpu;
}

int Seats::take() const noexcept {
  const int cpu = sched_getcpu();  // glibc reads it from the rseq area: no system call
  if (cpu < 0 || words_.empty()) return -1;
  std::atomic_ref<uint32_t> word(*words_[static_cast<size_t>(rank_)]);
  if (word.load(std::memory_order_relaxed) != static_cast<uint32_t>(cpu) + 1)
    word.store(static_cast<uint32_t>(cpu) + 1, std::memory_order_relaxed);
  return cpu;
}

Pidfd::~Pidfd() { close(fd_); }

bool Pidfd::exited() const {
  pollfd fd{fd_, POLLIN, 0};
  return poll(&fd, 1, 0) > 0 && (fd.revents & (POLLIN | POLLHUP | POLLERR)) != 0;
}

namespace {

// The pidfds the sets of this process hold, by pid. A cache of kernel
// handles (entries go when the last set lets go), the one table of its
// kind: sets are made on many threads, so it has its own lock.
std::shared_ptr<const Pidfd> shared_pidfd(pid_t pid) {
  static std::mutex mutex;
  static std::map<pid_t, std::weak_ptr<const Pidfd>> open;
  std::lock_guard<std::mutex> lock(mutex);
  std::erase_if(open, [](const auto& entry) { return entry.second.expired(); });
  if (auto it = open.find(pid); it != open.end()) {
    std::shared_ptr<const Pidfd> held = it->second.lock();
    if (held && !held->exited()) return held;
  }
  const int fd = open_pidfd(pid);
  if (fd < 0) return nullptr;
  auto pidfd = std::make_shared<const Pidfd>(fd);
  open[pid] = pidfd;
  return pidfd;
}

}  // namespace

PeerWatch::PeerWatch(const std::vector<pid_t>& pids) : pids_(pids), pidfds_(pids.size()) {
  for (size_t i = 0; i < pids.size(); ++i) {
    if (pids[i] > 0 && pids[i] != getpid()) pidfds_[i] = shared_pidfd(pids[i]);
  }
}

bool PeerWatch::exited(int rank) const {
  const size_t i = static_cast<size_t>(rank);
  if (pids_[i] == getpid()) return false;
  if (pidfds_[i]) return pidfds_[i]->exited();
  return kill(pids_[i], 0) != 0 && errno == ESRCH;
}

}  // namespace hora::shm
