// What a hand-off between two processes costs on this machine, by how the
// waiter waits and where the two run: the floor under every shared-memory
// sync that sleeps. Two forked processes pass a turn back and forth through
// one shared word; a waiter spins for up to --spin microseconds, then
// sleeps on the word as a futex (hora's doorbells do the same).
//
//     build/hora_wakeup [--rounds 20000]
//
// Cases: both spinning on two CPUs; both sleeping at once on two CPUs (a
// wake-up crosses CPUs, and on a virtual machine an idle virtual CPU must
// be woken by its hypervisor); both sleeping at once on one CPU (a wake-up
// is a switch between the two); and, unpinned, spin-then-sleep with the
// spin budgets hora uses (20 us at a collective's first sync, 200 us inside
// one), one above the cross-CPU wake-up, and a spin that yields the CPU
// between looks. Two more compare a futex with a named FIFO watched by
// epoll (a doorbell that a process waiting on sockets can watch with them),
// both sleeping, unpinned. Cases pinned to two CPUs need two CPUs this
// process may use. Prints one line per case: the median round trip (two
// hand-offs) in microseconds over 5 runs, then
// {"RESULT": {"<case>": <seconds per round trip>, ...}}.
#include <fcntl.h>
#include <linux/futex.h>
#include <sched.h>
#include <sys/epoll.h>
#include <sys/stat.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

struct Case {
  const char* name;
  int cpu_a, cpu_b;  // -1: unpinned
  long spin_ns;      // spin budget before sleeping (LONG_MAX: never sleep)
  bool yield = false;  // spin with sched_yield() between looks
  bool fifo = false;   // sleep in epoll_wait on a named FIFO instead of a futex
};

void pin(int cpu) {
  if (cpu < 0) return;
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  if (sched_setaffinity(0, sizeof set, &set) != 0) {
    std::perror("sched_setaffinity");
    std::_Exit(2);
  }
}

// Waits until *word == want: spins for up to spin_ns, then sleeps.
void await(std::atomic<uint32_t>* word, uint32_t want, long spin_ns, bool yield) {
  const auto spin_until = Clock::now() + std::chrono::nanoseconds(spin_ns == LONG_MAX ? 0 : spin_ns);
  for (int i = 0; spin_ns > 0; ++i) {
    if (word->load(std::memory_order_acquire) == want) return;
    if (yield) sched_yield();
    if (spin_ns != LONG_MAX && (i & 31) == 31 && Clock::now() >= spin_until) break;
  }
  for (;;) {
    const uint32_t seen = word->load(std::memory_order_acquire);
    if (seen == want) return;
    syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAIT, seen, nullptr, nullptr, 0);
  }
}

void pass(std::atomic<uint32_t>* word, uint32_t value) {
  word->store(value, std::memory_order_release);
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0);
}

void fail(const char* what) {
  std::perror(what);
  std::_Exit(2);
}

// One side of the FIFO case: waits in epoll on its own FIFO, writes a byte
// into the other's to pass the turn.
struct FifoSide {
  int in = -1, out = -1, epoll = -1;

  FifoSide(const std::string& own, const std::string& other) {
    in = open(own.c_str(), O_RDONLY | O_NONBLOCK);
    if (in < 0) fail("open FIFO");
    // The other side's read end may not be open yet (ENXIO until it is).
    while ((out = open(other.c_str(), O_WRONLY | O_NONBLOCK)) < 0) {
      if (errno != ENXIO) fail("open FIFO");
      usleep(1000);
    }
    epoll = epoll_create1(0);
    epoll_event event{};
    event.events = EPOLLIN;
    if (epoll < 0 || epoll_ctl(epoll, EPOLL_CTL_ADD, in, &event) != 0) fail("epoll");
  }
  void pass() const {
    const char byte = 1;
    if (write(out, &byte, 1) != 1) fail("write FIFO");
  }
  void await() const {
    char byte;
    while (read(in, &byte, 1) != 1) {
      epoll_event event;
      epoll_wait(epoll, &event, 1, -1);
    }
  }
};

double run_fifo(int rounds) {
  char dir[] = "/tmp/hora_wakeup.XXXXXX";
  if (!mkdtemp(dir)) fail("mkdtemp");
  const std::string a = std::string(dir) + "/a", b = std::string(dir) + "/b";
  if (mkfifo(a.c_str(), 0600) != 0 || mkfifo(b.c_str(), 0600) != 0) fail("mkfifo");
  const pid_t child = fork();
  if (child == 0) {
    FifoSide side(b, a);
    for (int i = 0; i < rounds; ++i) {
      side.await();
      side.pass();
    }
    std::_Exit(0);
  }
  FifoSide side(a, b);
  const auto start = Clock::now();
  for (int i = 0; i < rounds; ++i) {
    side.pass();
    side.await();
  }
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  waitpid(child, nullptr, 0);
  unlink(a.c_str());
  unlink(b.c_str());
  rmdir(dir);
  return seconds / rounds;
}

// Seconds per round trip for one run of `rounds`.
double run(const Case& c, int rounds) {
  if (c.fifo) return run_fifo(rounds);
  void* shared = mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (shared == MAP_FAILED) {
    std::perror("mmap");
    std::exit(2);
  }
  auto* word = new (shared) std::atomic<uint32_t>(0);
  const pid_t child = fork();
  if (child == 0) {
    pin(c.cpu_b);
    for (int i = 0; i < rounds; ++i) {
      await(word, 2 * i + 1, c.spin_ns, c.yield);
      pass(word, 2 * i + 2);
    }
    std::_Exit(0);
  }
  pin(c.cpu_a);
  const auto start = Clock::now();
  for (int i = 0; i < rounds; ++i) {
    pass(word, 2 * i + 1);
    await(word, 2 * i + 2, c.spin_ns, c.yield);
  }
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  waitpid(child, nullptr, 0);
  munmap(shared, 4096);
  return seconds / rounds;
}

}  // namespace

int main(int argc, char** argv) {
  int rounds = 20000;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--rounds") == 0 && i + 1 < argc) {
      rounds = std::atoi(argv[++i]);
    } else {
      std::fprintf(stderr, "usage: %s [--rounds N]\n", argv[0]);
      return 2;
    }
  }
  if (rounds <= 0) {
    std::fprintf(stderr, "--rounds must be positive\n");
    return 2;
  }
  cpu_set_t allowed;
  sched_getaffinity(0, sizeof allowed, &allowed);
  std::vector<int> cpus;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu)
    if (CPU_ISSET(cpu, &allowed)) cpus.push_back(cpu);
  std::vector<Case> cases;
  if (cpus.size() >= 2) {
    cases.push_back({"spin, two CPUs", cpus[0], cpus[1], LONG_MAX});
    cases.push_back({"sleep, two CPUs", cpus[0], cpus[1], 0});
  }
  cases.push_back({"sleep, one CPU", cpus[0], cpus[0], 0});
  cases.push_back({"spin 20 us then sleep, unpinned", -1, -1, 20'000});
  cases.push_back({"spin 100 us then sleep, unpinned", -1, -1, 100'000});
  cases.push_back({"spin 200 us then sleep, unpinned", -1, -1, 200'000});
  cases.push_back({"yield 100 us then sleep, unpinned", -1, -1, 100'000, true});
  cases.push_back({"sleep on a futex, unpinned", -1, -1, 0});
  cases.push_back({"sleep in epoll on a FIFO, unpinned", -1, -1, 0, false, true});
  std::string result;
  for (const Case& c : cases) {
    std::vector<double> runs;
    for (int r = 0; r < 5; ++r) runs.push_back(run(c, rounds));
    std::sort(runs.begin(), runs.end());
    std::printf("%-34s %8.2f us per round trip\n", c.name, runs[2] * 1e6);
    std::fflush(stdout);
    char seconds[32];
    std::snprintf(seconds, sizeof seconds, "%.4g", runs[2]);
    result += (result.empty() ? "\"" : ", \"") + std::string(c.name) + "\": " + seconds;
  }
  std::printf("{\"RESULT\": {%s}}\n", result.c_str());
  return 0;
}
