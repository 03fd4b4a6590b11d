// The machine's floor for hora's shared-memory allreduce: the same data
// movement and the same reduction kernel (benchmarks/allreduce.py's
// "shm-floor" peer) with nothing around it: no sets, negotiation, queues,
// futexes or checks, just N forked
// processes, one shared mapping and spinning on progress counters. Small
// messages take the one-sync path (every member copies its input to its
// slot, then reduces all slots in rank order); larger ones reduce-scatter
// then allgather through the slots (each member copies the slices the
// others own, reduces its own slice and copies it to its slot, then copies
// the others' reduced slices out), in chunks of a 1 MiB slot, with two slot
// buffers used in turn, and chunks of 32 KiB or more taking turns at the
// positions of a slot that fit them, as src/transport/shm/shm_collectives.cc
// does. On a shared virtual machine
// this floor itself moves several-fold from minute to minute, so the
// Python benchmark runs it beside the peers it compares.
//
//     build/hora_shm_floor --np 2 --sizes 4,262144 [--bind]
//
// --bind pins process i to the i-th CPU this process may use. Prints
// {"RESULT": {"<bytes>": <median seconds of the slowest process>, ...}}.
#include <sched.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "core/reduce.h"

namespace {

using Clock = std::chrono::steady_clock;
constexpr size_t kLine = 128;
constexpr size_t kMaxRanks = 16;
constexpr size_t kSmallBytes = 64 * 1024;  // as ShmTuning::small_bytes
constexpr size_t kSlotBytes = 1 << 20;     // as hora's default slot (HORA_SHM_SLOT_BYTES)
constexpr size_t kTurnsFrom = 32 * 1024;    // as shm_collectives.cc's kTurnsFrom
constexpr size_t kTurnAlign = 4096;

int iterations(size_t bytes) { return bytes <= (16 << 10) ? 2000 : bytes <= (4 << 20) ? 60 : 8; }

inline void relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

struct alignas(kLine) Counter {
  std::atomic<uint64_t> value;
};

struct Shared {
  Counter progress[kMaxRanks];
  double medians[kMaxRanks][64];
};

class Member {
 public:
  Member(Shared* shared, uint8_t* slots, size_t slot_bytes, int rank, int size)
      : shared_(shared), slots_(slots), slot_bytes_(slot_bytes), rank_(rank), size_(size) {}

  void sync() {
    const uint64_t phase = ++phase_;
    shared_->progress[rank_].value.store(phase, std::memory_order_release);
    for (int r = 0; r < size_; ++r)
      while (shared_->progress[r].value.load(std::memory_order_acquire) < phase) relax();
  }

  float* slot(int member, int buffer) {
    return reinterpret_cast<float*>(slots_ + (static_cast<size_t>(buffer) * size_ + member) * slot_bytes_ + at_);
  }

  // In chunks of at most a slot, as hora moves messages larger than one.
  void allreduce(float* data, size_t count) {
    const size_t per_chunk = slot_bytes_ / 4;
    for (size_t done = 0; done < count; done += per_chunk) allreduce_chunk(data + done, std::min(per_chunk, count - done));
  }

  // Where the chunk-th chunk of `bytes` goes in its slot (shm_collectives.cc: turn_position).
  size_t turn_position(size_t bytes, uint64_t chunk) const {
    if (bytes < kTurnsFrom) return 0;
    const size_t span = (bytes + kTurnAlign - 1) / kTurnAlign * kTurnAlign;
    const size_t positions = slot_bytes_ / span;
    return positions <= 1 ? 0 : (chunk / 2) % positions * span;
  }
  void allreduce_chunk(float* data, size_t count) {
    const uint64_t chunk = ops_++;
    const int buffer = static_cast<int>(chunk % 2);
    at_ = turn_position(count * 4, chunk);
    if (count * 4 <= kSmallBytes) {
      std::memcpy(slot(rank_, buffer), data, count * 4);
      sync();
      std::memcpy(data, slot(0, buffer), count * 4);
      for (int r = 1; r < size_; ++r) add(data, slot(r, buffer), count);
      return;
    }
    const size_t unit = kLine / 4;
    const size_t per = ((count + size_ - 1) / size_ + unit - 1) / unit * unit;
    auto begin = [&](int r) { return std::min(count, static_cast<size_t>(r) * per); };
    auto end = [&](int r) { return std::min(count, begin(r) + per); };
    for (int k = 1; k < size_; ++k) {
      const int r = (rank_ + k) % size_;
      std::memcpy(slot(rank_, buffer) + begin(r), data + begin(r), (end(r) - begin(r)) * 4);
    }
    sync();
    for (int k = 1; k < size_; ++k) {
      const int r = (rank_ + k) % size_;
      add(data + begin(rank_), slot(r, buffer) + begin(rank_), end(rank_) - begin(rank_));
    }
    std::memcpy(slot(rank_, buffer) + begin(rank_), data + begin(rank_), (end(rank_) - begin(rank_)) * 4);
    sync();
    for (int k = 1; k < size_; ++k) {
      const int r = (rank_ + k) % size_;
      std::memcpy(data + begin(r), slot(r, buffer) + begin(r), (end(r) - begin(r)) * 4);
    }
  }

 private:
  static void add(float* into, const float* from, size_t count) {
    hora::reduce_into(into, from, count, hora::DataType::kFloat32, hora::ReduceOp::kSum);
  }

  Shared* shared_;
  uint8_t* slots_;
  size_t slot_bytes_;
  int rank_, size_;
  uint64_t phase_ = 0, ops_ = 0;
  size_t at_ = 0;  // the current chunk's position in the slots
};

void run_member(Shared* shared, uint8_t* slots, size_t slot_bytes, int rank, int size,
                const std::vector<size_t>& sizes) {
  Member member(shared, slots, slot_bytes, rank, size);
  for (size_t s = 0; s < sizes.size(); ++s) {
    std::vector<float> data(std::max<size_t>(sizes[s] / 4, 1), 1.0f);
    std::vector<double> samples;
    for (int i = 0; i < iterations(sizes[s]) + 5; ++i) {
      const auto start = Clock::now();
      member.allreduce(data.data(), data.size());
      const std::chrono::duration<double> took = Clock::now() - start;
      if (i >= 5) samples.push_back(took.count());
      // Start each op together, as the Python peers' loops do not need to:
      // the median then measures the op, not the skew.
      member.sync();
    }
    std::nth_element(samples.begin(), samples.begin() + samples.size() / 2, samples.end());
    shared->medians[rank][s] = samples[samples.size() / 2];
  }
}

}  // namespace

int main(int argc, char** argv) {
  int size = 2;
  bool bind = false;
  std::vector<size_t> sizes{4};
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--np") == 0 && i + 1 < argc) {
      size = std::atoi(argv[++i]);
    } else if (std::strcmp(argv[i], "--sizes") == 0 && i + 1 < argc) {
      sizes.clear();
      for (char* part = std::strtok(argv[++i], ","); part; part = std::strtok(nullptr, ","))
        sizes.push_back(std::strtoull(part, nullptr, 10));
    } else if (std::strcmp(argv[i], "--bind") == 0) {
      bind = true;
    } else {
      std::fprintf(stderr, "usage: %s --np N --sizes a,b,... [--bind]\n", argv[0]);
      return 2;
    }
  }
  if (size < 2 || size > static_cast<int>(kMaxRanks) || sizes.empty() || sizes.size() > 64) {
    std::fprintf(stderr, "--np must be 2..%zu and --sizes give 1..64 sizes\n", kMaxRanks);
    return 2;
  }
  const size_t largest = *std::max_element(sizes.begin(), sizes.end());
  const size_t slot_bytes = std::min(kSlotBytes, (std::max<size_t>(largest, 4) + kLine - 1) / kLine * kLine);
  const size_t bytes = sizeof(Shared) + 2 * static_cast<size_t>(size) * slot_bytes;
  void* mapping = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (mapping == MAP_FAILED) {
    std::perror("mmap");
    return 1;
  }
  auto* shared = new (mapping) Shared{};
  auto* slots = static_cast<uint8_t*>(mapping) + sizeof(Shared);
  cpu_set_t allowed;
  sched_getaffinity(0, sizeof allowed, &allowed);
  std::vector<int> cpus;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &allowed)) cpus.push_back(c);
  std::vector<pid_t> children;
  for (int rank = 0; rank < size; ++rank) {
    const pid_t pid = fork();
    if (pid < 0) {
      std::perror("fork");
      return 1;
    }
    if (pid == 0) {
      if (bind) {
        cpu_set_t one;
        CPU_ZERO(&one);
        CPU_SET(cpus[static_cast<size_t>(rank) % cpus.size()], &one);
        sched_setaffinity(0, sizeof one, &one);
      }
      run_member(shared, slots, slot_bytes, rank, size, sizes);
      _exit(0);
    }
    children.push_back(pid);
  }
  bool ok = true;
  for (pid_t pid : children) {
    int status = 0;
    ok = waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0 && ok;
  }
  if (!ok) return 1;
  std::string result = "{\"RESULT\": {";
  for (size_t s = 0; s < sizes.size(); ++s) {
    double slowest = 0;
    for (int r = 0; r < size; ++r) slowest = std::max(slowest, shared->medians[r][s]);
    char seconds[32];
    std::snprintf(seconds, sizeof(seconds), "%.9e", slowest);
    result += (s ? ", \"" : "\"") + std::to_string(sizes[s]) + "\": " + seconds;
  }
  std::printf("%s}}\n", result.c_str());
  return 0;
}
