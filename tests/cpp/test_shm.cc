// The shared-memory backend across real processes: ranks are forked
// processes that share a DirectoryStore, each mapping the set's segment
// itself. (tests/cpp/test_backends.cc runs the shared Backend suite on it
// with ranks as threads.)
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/stat.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <thread>

#include "core/half.h"
#include "hora/errors.h"
#include "hora/runtime.h"
#include "ranks_as_processes.h"
#include "store/carried_store.h"
#include "planner/transport_planner.h"
#include "transport/backend.h"
#include "transport/shm/segment.h"
#include "transport/shm/shm_backend.h"

namespace hora {
namespace {

using std::chrono::milliseconds;
using test_support::require;
using test_support::run_processes;
using Clock = std::chrono::steady_clock;

constexpr milliseconds kTimeout(20'000);

std::vector<int> first_ranks(int n) {
  std::vector<int> ranks(n);
  for (int i = 0; i < n; ++i) ranks[i] = i;
  return ranks;
}

// One member's transports of a set, used through its data plane (->).
struct Attached {
  SetTransports set;
  Backend* operator->() const { return set.backend.get(); }
  Backend& operator*() const { return *set.backend; }
  ControlPlane& control() const { return *set.control; }
};

// In a forked rank: a shared-memory set for global ranks 0..n-1 over the
// directory store at `dir` (under `prefix`), checked to be one.
Attached attach(const std::string& dir, const std::string& prefix, int n, int rank,
                milliseconds timeout = kTimeout, ShmOptions options = {}) {
  auto planner = make_transport_planner(make_gloo_backend_factory("127.0.0.1"), {options});
  auto store = make_prefix_store(prefix, std::make_shared<test_support::DirectoryStore>(dir));
  Attached member{planner->connect(first_ranks(n), rank, store, timeout)};
  require(shm::is_shm_backend(*member.set.backend), "the set did not get a shared-memory backend");
  require(member.set.fast_lane != nullptr || n > shm::FastLane::kMaxMembers || n < 2, "the set got no fast lane");
  return member;
}

void expect_all_ok(const std::vector<test_support::RankOutcome>& outcomes) {
  for (size_t r = 0; r < outcomes.size(); ++r) EXPECT_EQ(outcomes[r].error, "") << "rank " << r;
}

// The segment that a set under `prefix` used is no longer in /dev/shm.
void expect_segment_unlinked(const std::string& dir, const std::string& prefix) {
  test_support::DirectoryStore store(dir);
  const std::vector<uint8_t> record = store.get(prefix + "/shm/segment", milliseconds(0));
  const std::string text(record.begin(), record.end());
  const std::string name = text.substr(0, text.find(' '));
  ASSERT_TRUE(shm::valid_segment_name(name)) << text;
  struct stat info {};
  EXPECT_NE(stat(("/dev/shm/" + name).c_str(), &info), 0) << name << " is still in /dev/shm";
}

// ------------------------------------------------------------ values by dtype

// Small integers, exact in every dtype, whose sum, product, min and max
// over three ranks fit in int8.
double input_value(int rank, size_t i) { return static_cast<double>((rank + i) % 5 + 1); }

void put(DataType dtype, uint8_t* at, double v) {
  switch (dtype) {
    case DataType::kUInt8: *at = static_cast<uint8_t>(v); break;
    case DataType::kInt8: *reinterpret_cast<int8_t*>(at) = static_cast<int8_t>(v); break;
    case DataType::kUInt16: { uint16_t x = static_cast<uint16_t>(v); std::memcpy(at, &x, 2); break; }
    case DataType::kInt16: { int16_t x = static_cast<int16_t>(v); std::memcpy(at, &x, 2); break; }
    case DataType::kInt32: { int32_t x = static_cast<int32_t>(v); std::memcpy(at, &x, 4); break; }
    case DataType::kInt64: { int64_t x = static_cast<int64_t>(v); std::memcpy(at, &x, 8); break; }
    case DataType::kFloat16: { uint16_t x = float_to_fp16(static_cast<float>(v)); std::memcpy(at, &x, 2); break; }
    case DataType::kBFloat16: { uint16_t x = float_to_bf16(static_cast<float>(v)); std::memcpy(at, &x, 2); break; }
    case DataType::kFloat32: { float x = static_cast<float>(v); std::memcpy(at, &x, 4); break; }
    case DataType::kFloat64: std::memcpy(at, &v, 8); break;
    case DataType::kBool: *at = v != 0; break;
  }
}

double get(DataType dtype, const uint8_t* at) {
  uint16_t h;
  switch (dtype) {
    case DataType::kUInt8: return *at;
    case DataType::kInt8: return *reinterpret_cast<const int8_t*>(at);
    case DataType::kUInt16: { uint16_t x; std::memcpy(&x, at, 2); return x; }
    case DataType::kInt16: { int16_t x; std::memcpy(&x, at, 2); return x; }
    case DataType::kInt32: { int32_t x; std::memcpy(&x, at, 4); return x; }
    case DataType::kInt64: { int64_t x; std::memcpy(&x, at, 8); return static_cast<double>(x); }
    case DataType::kFloat16: std::memcpy(&h, at, 2); return fp16_to_float(h);
    case DataType::kBFloat16: std::memcpy(&h, at, 2); return bf16_to_float(h);
    case DataType::kFloat32: { float x; std::memcpy(&x, at, 4); return x; }
    case DataType::kFloat64: { double x; std::memcpy(&x, at, 8); return x; }
    case DataType::kBool: return *at != 0;
  }
  return NAN;
}

double expected_reduction(DataType dtype, ReduceOp op, int n, size_t i) {
  double out = 0;
  for (int r = 0; r < n; ++r) {
    double v = input_value(r, i);
    if (dtype == DataType::kBool) v = (r + i) % 2;
    if (r == 0) out = v;
    else if (op == ReduceOp::kSum) out = dtype == DataType::kBool ? (out || v) : out + v;
    else if (op == ReduceOp::kProduct) out = dtype == DataType::kBool ? (out && v) : out * v;
    else if (op == ReduceOp::kMin) out = std::min(out, v);
    else out = std::max(out, v);
  }
  return out;
}

// Checks allreduce of `count` elements of every dtype with each of `ops`.
void check_every_allreduce(Backend& b, size_t count, const std::vector<ReduceOp>& ops) {
  for (int d = 0; d < kNumDataTypes; ++d) {
    const auto dtype = static_cast<DataType>(d);
    const size_t element = dtype_size(dtype);
    for (ReduceOp op : ops) {
      std::vector<uint8_t> buf(count * element + 1);
      for (size_t i = 0; i < count; ++i)
        put(dtype, &buf[i * element], dtype == DataType::kBool ? (b.rank() + i) % 2 : input_value(b.rank(), i));
      b.allreduce(buf.data(), count, dtype, op);
      for (size_t i = 0; i < count; ++i) {
        const double want = expected_reduction(dtype, op, b.size(), i);
        const double got = get(dtype, &buf[i * element]);
        if (got != want)
          throw std::runtime_error(std::string(dtype_name(dtype)) + " " + reduce_op_name(op).data() + " count " +
                                   std::to_string(count) + " element " + std::to_string(i) + ": got " +
                                   std::to_string(got) + ", expected " + std::to_string(want));
      }
    }
  }
}

// ------------------------------------------------------------------- tests

// Counts: zero, one, not divisible by the set size, past the one-sync
// limit of 64 KiB (reduce-scatter + allgather) for most dtypes, and past
// the 128 KiB slots used here (chunked, each chunk reduce-scattered).
TEST(ShmProcesses, AllreduceEveryOpAndDtype) {
  test_support::TemporaryDirectory dir;
  const int n = 3;
  auto outcomes = run_processes(n, [&](int rank) {
    auto b = attach(dir.path(), "set", n, rank, kTimeout, ShmOptions{true, 128 << 10, ""});
    const std::vector<ReduceOp> all = {ReduceOp::kSum, ReduceOp::kProduct, ReduceOp::kMin, ReduceOp::kMax};
    for (size_t count : {size_t{0}, size_t{1}, size_t{7}, size_t{40'001}}) check_every_allreduce(*b, count, all);
    check_every_allreduce(*b, 100'003, {ReduceOp::kSum, ReduceOp::kMax});
    b->barrier();
  }, milliseconds(120'000));
  expect_all_ok(outcomes);
  expect_segment_unlinked(dir.path(), "set");
}

// Chunks of 32 KiB or more take turns at the positions of a slot that fit
// them; every op here has new values, in sizes that fit the 128 KiB slots
// 1 to 3 times (one-sync and reduce-scatter paths, a chunked message whose
// last chunk is short), mixed with broadcasts that use the slots' start,
// so a member that read a stale position or overwrote one still being read
// gets a wrong sum.
TEST(ShmProcesses, AllreduceChunksTakingTurnsNeverReadStaleData) {
  test_support::TemporaryDirectory dir;
  const int n = 3;
  auto outcomes = run_processes(n, [&](int rank) {
    auto b = attach(dir.path(), "set", n, rank, kTimeout, ShmOptions{true, 128 << 10, ""});
    const size_t counts[] = {8'192, 10'000, 30'000, 12'345, 40'001, 9'000, 16'384};
    for (int step = 0; step < 60; ++step) {
      const size_t count = counts[step % 7];
      std::vector<float> v(count);
      for (size_t i = 0; i < count; ++i) v[i] = static_cast<float>(rank * 1000 + step * 7 + i % 13);
      b->allreduce(v.data(), count, DataType::kFloat32, ReduceOp::kSum);
      for (size_t i = 0; i < count; ++i) {
        const float want = static_cast<float>(3000 + 3 * (step * 7 + i % 13));  // ranks 0, 1, 2
        if (v[i] != want)
          throw std::runtime_error("step " + std::to_string(step) + " count " + std::to_string(count) + " element " +
                                   std::to_string(i) + ": got " + std::to_string(v[i]) + ", expected " +
                                   std::to_string(want));
      }
      if (step % 5 == 4) {
        std::vector<int32_t> w(9'000, rank == 1 ? step : -1);
        b->broadcast(w.data(), w.size() * sizeof(int32_t), 1);
        if (w.front() != step || w.back() != step) throw std::runtime_error("broadcast at step " + std::to_string(step));
      }
    }
    b->barrier();
  }, milliseconds(120'000));
  expect_all_ok(outcomes);
}

// A reduce gives its root the very bits an allreduce of the same inputs
// gives (inputs whose sums round), at every size path and root; the other
// members' buffers are theirs to overwrite. Allreduces and broadcasts
// interleaved with them still read only fresh data from the slots.
TEST(ShmProcesses, ReduceGivesTheRootTheAllreducesBits) {
  test_support::TemporaryDirectory dir;
  const int n = 3;
  auto outcomes = run_processes(n, [&](int rank) {
    auto b = attach(dir.path(), "set", n, rank, kTimeout, ShmOptions{true, 128 << 10, ""});
    int step = 0;
    for (size_t count : {size_t{1}, size_t{7}, size_t{8'192}, size_t{40'001}, size_t{100'003}}) {
      for (int root = 0; root < n; ++root, ++step) {
        std::vector<float> input(count);
        for (size_t i = 0; i < count; ++i) input[i] = 0.1f * static_cast<float>(rank + 1) + 1e-3f * (i % 101) + step;
        std::vector<float> all = input;
        b->allreduce(all.data(), count, DataType::kFloat32, ReduceOp::kSum);
        std::vector<float> reduced = input;
        b->reduce(reduced.data(), count, DataType::kFloat32, ReduceOp::kSum, root);
        if (rank == root && std::memcmp(reduced.data(), all.data(), count * sizeof(float)) != 0)
          throw std::runtime_error("reduce of " + std::to_string(count) + " to root " + std::to_string(root) +
                                   " differs from the allreduce");
        std::vector<int32_t> w(9'000, rank == (root + 1) % n ? step : -1);
        b->broadcast(w.data(), w.size() * sizeof(int32_t), (root + 1) % n);
        if (std::count(w.begin(), w.end(), step) != static_cast<ptrdiff_t>(w.size()))
          throw std::runtime_error("broadcast at step " + std::to_string(step));
      }
    }
    // Every dtype and op at the root, past the one-sync limit (64 KiB) in
    // one-byte types too.
    for (int d = 0; d < kNumDataTypes; ++d) {
      const auto dtype = static_cast<DataType>(d);
      const size_t element = dtype_size(dtype), count = 70'001;
      for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kProduct, ReduceOp::kMin, ReduceOp::kMax}) {
        std::vector<uint8_t> buf(count * element);
        for (size_t i = 0; i < count; ++i)
          put(dtype, &buf[i * element], dtype == DataType::kBool ? (rank + i) % 2 : input_value(rank, i));
        b->reduce(buf.data(), count, dtype, op, 2);
        for (size_t i = 0; rank == 2 && i < count; ++i)
          if (get(dtype, &buf[i * element]) != expected_reduction(dtype, op, n, i))
            throw std::runtime_error(std::string(dtype_name(dtype)) + " " + reduce_op_name(op).data() + " element " +
                                     std::to_string(i));
      }
    }
    float one = 1;
    try {
      b->reduce(&one, 1, DataType::kFloat32, ReduceOp::kSum, -1);
      throw std::runtime_error("a reduce to root -1 was accepted");
    } catch (const InvalidArgument& e) {
      if (std::string(e.what()).find("reduce root -1") == std::string::npos) throw;
    }
    b->barrier();
  }, milliseconds(120'000));
  expect_all_ok(outcomes);
}

TEST(ShmProcesses, AllgatherBroadcastAlltoallAndBarrier) {
  test_support::TemporaryDirectory dir;
  const int n = 3;
  auto outcomes = run_processes(n, [&](int rank) {
    auto b = attach(dir.path(), "set", n, rank);
    // Member 1 sends nothing; member 2 more than a slot (several rounds).
    for (size_t scale : {size_t{1}, size_t{700'000}}) {
      auto count = [&](int r) { return r == 1 ? size_t{0} : (r + 1) * scale; };
      std::vector<uint8_t> in(count(rank) + 1);
      for (size_t i = 0; i < count(rank); ++i) in[i] = static_cast<uint8_t>(rank * 50 + i % 41);
      std::vector<size_t> sizes;
      std::vector<uint8_t> want;
      for (int r = 0; r < n; ++r) {
        sizes.push_back(count(r));
        for (size_t i = 0; i < count(r); ++i) want.push_back(static_cast<uint8_t>(r * 50 + i % 41));
      }
      std::vector<uint8_t> out(want.size() + 1, 0xEE);
      b->allgatherv(in.data(), out.data(), sizes);
      out.pop_back();
      require(out == want, "allgatherv at scale " + std::to_string(scale));
      for (int root = 0; root < n; ++root) {
        std::vector<uint8_t> data(3 * scale + 5, rank == root ? 0 : 0xEE);
        if (rank == root)
          for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<uint8_t>(root + i % 97);
        b->broadcast(data.data(), data.size(), root);
        for (size_t i = 0; i < data.size(); ++i)
          if (data[i] != static_cast<uint8_t>(root + i % 97)) throw std::runtime_error("broadcast from " + std::to_string(root));
      }
      // Block from a to b: (a + b) % 3 * scale bytes, some empty.
      auto block = [&](int from, int to) { return static_cast<size_t>((from + to) % 3) * scale; };
      auto byte = [](int from, int to, size_t i) { return static_cast<uint8_t>(from * 16 + to + i % 7); };
      std::vector<uint8_t> send, expect;
      std::vector<size_t> send_bytes, recv_bytes;
      for (int peer = 0; peer < n; ++peer) {
        for (size_t i = 0; i < block(rank, peer); ++i) send.push_back(byte(rank, peer, i));
        for (size_t i = 0; i < block(peer, rank); ++i) expect.push_back(byte(peer, rank, i));
        send_bytes.push_back(block(rank, peer));
        recv_bytes.push_back(block(peer, rank));
      }
      send.push_back(0);
      std::vector<uint8_t> received(expect.size() + 1, 0xEE);
      b->alltoallv(send.data(), send_bytes, received.data(), recv_bytes);
      received.pop_back();
      require(received == expect, "alltoallv at scale " + std::to_string(scale));
    }
    b->barrier();
  }, milliseconds(60'000));
  expect_all_ok(outcomes);
}

// Two sets over the same three processes, each driven by its own thread,
// with large and small allreduces interleaved.
TEST(ShmProcesses, TwoSetsOverTheSameRanksRunConcurrently) {
  test_support::TemporaryDirectory dir;
  const int n = 3;
  auto outcomes = run_processes(n, [&](int rank) {
    Attached a, b;
    std::thread make_b([&] { b = attach(dir.path(), "B", n, rank); });
    a = attach(dir.path(), "A", n, rank);
    make_b.join();
    std::string error;
    auto drive = [&](Backend& set, size_t count, float base) {
      try {
        std::vector<float> v(count);
        for (int it = 0; it < 30; ++it) {
          std::fill(v.begin(), v.end(), base + static_cast<float>(rank + it));
          set.allreduce(v.data(), v.size(), DataType::kFloat32, ReduceOp::kSum);
          const float want = 3 * base + 3 + 3 * static_cast<float>(it);
          if (std::count(v.begin(), v.end(), want) != static_cast<std::ptrdiff_t>(v.size()))
            throw std::runtime_error("set with base " + std::to_string(base) + ": wrong sum in iteration " + std::to_string(it));
        }
        set.barrier();
      } catch (const std::exception& e) {
        error = e.what();
      }
    };
    std::thread side([&] { drive(*b, 5, 1000); });
    drive(*a, 400'000, 0);
    side.join();
    require(error.empty(), error);
  }, milliseconds(60'000));
  expect_all_ok(outcomes);
  expect_segment_unlinked(dir.path(), "A");
  expect_segment_unlinked(dir.path(), "B");
}

// Rank 1 is killed in the middle of a stream of large allreduces: the
// others fail within a second, naming it; the coordinator's control plane
// reports it closed; nothing stays in /dev/shm.
TEST(ShmProcesses, KilledMemberFailsTheSetWithinOneSecond) {
  test_support::TemporaryDirectory dir;
  const int n = 3;
  // Shared with the children: when the kill happened, and how many ranks
  // are running allreduces.
  auto* shared = static_cast<std::atomic<int64_t>*>(
      mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0));
  auto* killed_at = new (shared) std::atomic<int64_t>(0);
  auto* running = new (shared + 1) std::atomic<int64_t>(0);
  auto since_kill = [&] {
    while (killed_at->load() == 0) std::this_thread::sleep_for(milliseconds(1));
    return milliseconds((Clock::now().time_since_epoch().count() - killed_at->load()) / 1'000'000);
  };
  auto outcomes = run_processes(n, [&](int rank) {
    auto b = attach(dir.path(), "set", n, rank, milliseconds(60'000));
    std::vector<float> v(1 << 20, 1.0f);
    b->barrier();
    running->fetch_add(1);
    try {
      for (;;) b->allreduce(v.data(), v.size(), DataType::kFloat32, ReduceOp::kSum);
    } catch (const PeerFailure& e) {
      const milliseconds late = since_kill();
      require(late < milliseconds(1000), "failed " + std::to_string(late.count()) + " ms after the kill");
      require(std::string(e.what()).find("global rank(s) [1]") != std::string::npos, e.what());
    }
    if (rank != 0) return;
    const auto start = Clock::now();
    for (;;) {
      auto message = b.control().receive(Clock::now() + milliseconds(2000));
      require(message.has_value(), "no closure reported for rank 1");
      if (message->closed && message->from == 1) break;
    }
    require(Clock::now() - start < milliseconds(1000), "closure reported late");
  }, milliseconds(60'000), [&](const std::vector<pid_t>& pids) {
    const auto give_up = Clock::now() + milliseconds(30'000);
    while (running->load() < n && Clock::now() < give_up) std::this_thread::sleep_for(milliseconds(1));
    std::this_thread::sleep_for(milliseconds(200));
    kill(pids[1], SIGKILL);
    killed_at->store(Clock::now().time_since_epoch().count());
  });
  EXPECT_TRUE(outcomes[1].killed);
  EXPECT_EQ(outcomes[0].error, "");
  EXPECT_EQ(outcomes[2].error, "");
  expect_segment_unlinked(dir.path(), "set");
  munmap(shared, 4096);
}

// Rank 1 gives the set up while ranks 0 and 2 sleep in a collective that
// waits for it: they wake and fail at once with its reason.
TEST(ShmProcesses, AbortWakesPeersBlockedInACollective) {
  test_support::TemporaryDirectory dir;
  const int n = 3;
  auto* aborted_at = static_cast<std::atomic<int64_t>*>(
      mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0));
  new (aborted_at) std::atomic<int64_t>(0);
  auto outcomes = run_processes(n, [&](int rank) {
    auto b = attach(dir.path(), "set", n, rank, milliseconds(60'000));
    b->barrier();
    if (rank == 1) {
      std::this_thread::sleep_for(milliseconds(300));
      aborted_at->store(Clock::now().time_since_epoch().count());
      b->abort("test abort");
      return;
    }
    float v = 1;
    try {
      b->allreduce(&v, 1, DataType::kFloat32, ReduceOp::kSum);
      throw std::runtime_error("the allreduce succeeded");
    } catch (const PeerFailure& e) {
      const auto late = milliseconds((Clock::now().time_since_epoch().count() - aborted_at->load()) / 1'000'000);
      require(aborted_at->load() != 0 && late < milliseconds(500), "failed " + std::to_string(late.count()) + " ms after the abort");
      require(std::string(e.what()).find("test abort") != std::string::npos, e.what());
    }
    // Later collectives fail at once too.
    const auto start = Clock::now();
    try {
      b->barrier();
      throw std::runtime_error("the barrier succeeded");
    } catch (const PeerFailure&) {
      require(Clock::now() - start < milliseconds(100), "a later barrier waited");
    }
  }, milliseconds(60'000));
  expect_all_ok(outcomes);
  munmap(aborted_at, 4096);
}

// The same through the Runtime (negotiation, the engine's failure
// protocol): the survivors' pending op fails within a second with the
// set's verdict naming the killed rank.
TEST(ShmProcesses, KilledRankFailsTheRuntimesSetWithinOneSecond) {
  test_support::TemporaryDirectory dir;
  const int n = 3;
  auto* shared = static_cast<std::atomic<int64_t>*>(
      mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0));
  auto* killed_at = new (shared) std::atomic<int64_t>(0);
  auto* running = new (shared + 1) std::atomic<int64_t>(0);
  auto outcomes = run_processes(n, [&](int rank) {
    RuntimeConfig config;
    config.rank = rank;
    config.size = n;
    config.timeout = milliseconds(60'000);
    config.start_timeout = milliseconds(60'000);
    Runtime runtime(config, std::make_shared<test_support::DirectoryStore>(dir.path()),
                    make_transport_planner(make_gloo_backend_factory("127.0.0.1"), {ShmOptions{}}), {});
    std::vector<float> v(1 << 16, 1.0f);
    OpArgs args;
    args.input = TensorView{v.data(), DataType::kFloat32, {static_cast<int64_t>(v.size())}};
    args.output = args.input;
    try {
      for (int step = 0;; ++step) {
        args.name = "grad";
        runtime.enqueue(0, args)->wait();
        if (step == 3) running->fetch_add(1);
      }
    } catch (const PeerFailure& e) {
      while (killed_at->load() == 0) std::this_thread::sleep_for(milliseconds(1));
      const auto late = milliseconds((Clock::now().time_since_epoch().count() - killed_at->load()) / 1'000'000);
      require(late < milliseconds(1000), "failed " + std::to_string(late.count()) + " ms after the kill");
      require(std::string(e.what()).find("missing global rank(s) [1]") != std::string::npos, e.what());
    }
  }, milliseconds(60'000), [&](const std::vector<pid_t>& pids) {
    const auto give_up = Clock::now() + milliseconds(30'000);
    while (running->load() < n && Clock::now() < give_up) std::this_thread::sleep_for(milliseconds(1));
    std::this_thread::sleep_for(milliseconds(100));
    kill(pids[1], SIGKILL);
    killed_at->store(Clock::now().time_since_epoch().count());
  });
  EXPECT_TRUE(outcomes[1].killed);
  EXPECT_EQ(outcomes[0].error, "");
  EXPECT_EQ(outcomes[2].error, "");
  expect_segment_unlinked(dir.path(), "process_set.0");
  munmap(shared, 4096);
}

// ------------------------------------------------ choice of path, fallback

// Ranks as threads (one hash store): which backend each member's planner
// chose, and whether an allreduce through it is right.
std::vector<bool> shm_chosen(int n, const std::function<ShmOptions(int rank)>& options_of) {
  auto store = make_hash_store();
  std::vector<char> chosen(n, 0);  // not vector<bool>: each thread writes its own byte
  std::vector<std::thread> threads;
  for (int rank = 0; rank < n; ++rank) {
    threads.emplace_back([&, rank] {
      try {
        auto planner = make_transport_planner(make_local_backend_factory(), {options_of(rank)});
        SetTransports set = planner->connect(first_ranks(n), rank, store, kTimeout);
        chosen[rank] = shm::is_shm_backend(*set.backend);
        EXPECT_EQ(set.fast_lane != nullptr, chosen[rank] != 0);
        Backend* b = set.backend.get();
        int64_t v = rank + 1;
        b->allreduce(&v, 1, DataType::kInt64, ReduceOp::kSum);
        EXPECT_EQ(v, n * (n + 1) / 2);
        b->barrier();
      } catch (const std::exception& e) {
        ADD_FAILURE() << "rank " << rank << ": " << e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  return std::vector<bool>(chosen.begin(), chosen.end());
}

TEST(ShmChoice, ASetNamingARankBeyondTheJobIsRefusedAtOnce) {
  ShmOptions options;
  options.world_size = 4;
  auto planner = make_transport_planner(make_local_backend_factory(), {options});
  // Refused before any member is awaited (a wait would end in Timeout).
  try {
    planner->connect({0, 9}, 0, make_hash_store(), milliseconds(60'000));
    FAIL() << "a set naming global rank 9 of 4 was made";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("global rank 9 is not in the job's 4 ranks"), std::string::npos) << e.what();
  }
}

TEST(ShmChoice, MembersOnOneHostShareMemory) {
  EXPECT_EQ(shm_chosen(3, [](int) { return ShmOptions{}; }), std::vector<bool>(3, true));
}

TEST(ShmChoice, MembersOnTwoHostsGetNoOneHostSegment) {
  auto chosen = shm_chosen(4, [](int rank) { return ShmOptions{true, 0, rank < 2 ? "host-a" : "host-b"}; });
  EXPECT_EQ(chosen, std::vector<bool>(4, false));
}

TEST(ShmChoice, OneMemberWithSharedMemoryOffTurnsItOffForTheSet) {
  auto chosen = shm_chosen(3, [](int rank) { return ShmOptions{rank != 1, 0, ""}; });
  EXPECT_EQ(chosen, std::vector<bool>(3, false));
}

// Planners for ranks 0..n-1 (threads of this process) that have made a
// first set together, which taught each the others' host: a later set's
// rank 0 then makes its segment ahead, in prepare().
std::vector<std::unique_ptr<TransportPlanner>> factories_that_met(int n) {
  std::vector<std::unique_ptr<TransportPlanner>> factories;
  for (int r = 0; r < n; ++r) factories.push_back(make_transport_planner(make_local_backend_factory(), {ShmOptions{}}));
  auto store = make_hash_store();
  std::vector<SetTransports> made(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r)
    threads.emplace_back([&, r] { made[r] = factories[r]->connect(first_ranks(n), r, store, kTimeout); });
  for (auto& t : threads) t.join();
  return factories;
}

// A member that attached, had nothing to do and left before set rank 0
// looked at the segment did attach: set rank 0 gets its backend at once
// (not a Timeout at the end of its wait), and its first op names the member
// that left.
TEST(ShmChoice, AMemberThatAttachedAndLeftBeforeSetRankZeroLookedCountsAsAttached) {
  auto factories = factories_that_met(2);
  TransportPlanner* f0 = factories[0].get();
  TransportPlanner* f1 = factories[1].get();
  auto store = make_hash_store();
  std::shared_ptr<void> head = f0->prepare({0, 1}, 0, store);
  ASSERT_NE(head, nullptr);
  SetTransports gone = f1->connect({0, 1}, 1, store, kTimeout);
  ASSERT_TRUE(shm::is_shm_backend(*gone.backend));
  gone = {};  // leaves the set before set rank 0 has looked

  const auto start = Clock::now();
  SetTransports set = f0->connect({0, 1}, 0, store, milliseconds(5'000));
  EXPECT_LT(Clock::now() - start, milliseconds(2'000));
  ASSERT_TRUE(shm::is_shm_backend(*set.backend));
  Backend* b = set.backend.get();
  try {
    b->barrier();
    ADD_FAILURE() << "a barrier with a member that left completed";
  } catch (const PeerFailure& e) {
    EXPECT_NE(std::string(e.what()).find("global rank(s) [1] (pid " + std::to_string(getpid()) + ") left the process set"), std::string::npos) << e.what();
  }
}

// Set rank 0 sees its members arrive in the segment it made ahead: true
// once every member has attached (one attaching while it waits), false
// when one has not within the time given; nothing to wait on without a
// head start.
TEST(ShmChoice, SetRankZeroSeesItsMembersArriveInTheSegment) {
  auto factories = factories_that_met(3);
  auto store = make_hash_store();
  std::shared_ptr<void> head = factories[0]->prepare({0, 1, 2}, 0, store);
  EXPECT_FALSE(factories[0]->await_arrival(nullptr, milliseconds(50)));
  EXPECT_FALSE(factories[0]->await_arrival(head, milliseconds(50)));  // nobody else yet
  SetTransports b1, b2;
  std::thread first([&] { b1 = factories[1]->connect({0, 1, 2}, 1, store, kTimeout); });
  EXPECT_FALSE(factories[0]->await_arrival(head, milliseconds(50)));  // rank 2 has not come
  std::thread second([&] {
    std::this_thread::sleep_for(milliseconds(20));
    b2 = factories[2]->connect({0, 1, 2}, 2, store, kTimeout);
  });
  EXPECT_TRUE(factories[0]->await_arrival(head, milliseconds(10'000)));
  SetTransports b0 = factories[0]->connect({0, 1, 2}, 0, store, kTimeout);
  first.join();
  second.join();
  std::vector<std::thread> threads;
  std::vector<Backend*> all{b0.backend.get(), b1.backend.get(), b2.backend.get()};
  std::vector<int64_t> sums(3);
  for (int r = 0; r < 3; ++r) {
    threads.emplace_back([&, r] {
      sums[r] = r + 1;
      all[r]->allreduce(&sums[r], 1, DataType::kInt64, ReduceOp::kSum);
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(sums, (std::vector<int64_t>{6, 6, 6}));
}

// A member whose set store holds set rank 0's segment record (carried with
// the set's id) maps the segment and marks itself attached in prepare(),
// before connect(); without the record it waits for connect(). A member that
// drops its head start unused (its connection given up) leaves the set, so
// set rank 0's first op fails at once naming it.
TEST(ShmChoice, AMemberMapsTheCarriedSegmentInPrepareAndLeavesIfItGivesUp) {
  auto factories = factories_that_met(2);
  TransportPlanner* f0 = factories[0].get();
  TransportPlanner* f1 = factories[1].get();
  auto base = make_hash_store();
  auto lowest = std::make_shared<CarriedStore>(base);
  std::shared_ptr<void> head0 = f0->prepare({0, 1}, 0, lowest);
  const StoreEntries carried = lowest->take_written();

  std::shared_ptr<void> uncarried = f1->prepare({0, 1}, 1, std::make_shared<CarriedStore>(make_hash_store()));
  EXPECT_FALSE(f1->await_arrival(uncarried, milliseconds(0)));

  auto member = std::make_shared<CarriedStore>(base);
  member->keep(carried);
  std::shared_ptr<void> head1 = f1->prepare({0, 1}, 1, member);
  EXPECT_TRUE(f1->await_arrival(head1, milliseconds(0)));
  EXPECT_TRUE(f0->await_arrival(head0, milliseconds(0)));

  head1.reset();  // rank 1 gives up before connect()
  SetTransports b0 = f0->connect({0, 1}, 0, lowest, kTimeout);
  ASSERT_TRUE(shm::is_shm_backend(*b0.backend));
  try {
    b0.backend->barrier();
    ADD_FAILURE() << "a barrier with a member that gave up completed";
  } catch (const PeerFailure& e) {
    EXPECT_NE(std::string(e.what()).find("left the process set"), std::string::npos) << e.what();
  }
}

// Slots of 16 GiB for 3 members need 96 GiB: more than /dev/shm has here,
// so the set falls back to the network path (with one warning).
TEST(ShmChoice, SegmentLargerThanDevShmFallsBackToTheNetwork) {
  auto chosen = shm_chosen(3, [](int) { return ShmOptions{true, size_t{16} << 30, ""}; });
  EXPECT_EQ(chosen, std::vector<bool>(3, false));
}

// HORA_SHM, HORA_SHM_SLOT_BYTES and HORA_HOST_IDENTITY reach the config.
TEST(ShmChoice, EnvironmentTurnsThePathOffAndSizesIt) {
  EXPECT_TRUE(runtime_config_from_env().shm);
  ::setenv("HORA_SHM", "0", 1);
  ::setenv("HORA_SHM_SLOT_BYTES", "65536", 1);
  ::setenv("HORA_HOST_IDENTITY", "host-b", 1);
  const RuntimeConfig config = runtime_config_from_env();
  EXPECT_FALSE(config.shm);
  EXPECT_EQ(config.shm_slot_bytes, 65536u);
  EXPECT_EQ(config.host_identity, "host-b");
  ::setenv("HORA_SHM_SLOT_BYTES", "-1", 1);
  EXPECT_THROW(runtime_config_from_env(), InvalidArgument);
  ::unsetenv("HORA_SHM");
  ::unsetenv("HORA_SHM_SLOT_BYTES");
  ::unsetenv("HORA_HOST_IDENTITY");
}

// ----------------------------------------------------------- the segment

// A valid segment made here, removed at the end of the test.
struct ScratchSegment {
  std::string name = shm::random_segment_name();
  shm::SegmentLayout layout = shm::plan_layout(2, 4096, 4096);
  shm::Segment segment = shm::Segment::create(name, layout);
  ~ScratchSegment() { shm::unlink_segment(name); }
  std::string path() const { return "/dev/shm/" + name; }
};

std::string refusal(const std::string& name, uint32_t ranks, uint64_t bytes) {
  try {
    shm::Segment::open(name, ranks, bytes);
  } catch (const Internal& e) {
    return e.what();
  }
  return "";
}

TEST(ShmSegment, OpensWhatCreateMade) {
  ScratchSegment made;
  EXPECT_EQ(refusal(made.name, 2, made.layout.total_bytes), "");
  EXPECT_NE(refusal(made.name, 3, made.layout.total_bytes), "");
  EXPECT_NE(refusal(made.name, 2, made.layout.total_bytes + 4096).find("bytes, expected"), std::string::npos);
  EXPECT_NE(refusal("hora-0-../../etc/passwd", 2, made.layout.total_bytes).find("refused segment name"), std::string::npos);
}

TEST(ShmSegment, RefusesASegmentOfAnotherUser) {
  ScratchSegment made;
  if (geteuid() == 0) {
    ASSERT_EQ(chown(made.path().c_str(), 65534, 65534), 0);
    EXPECT_NE(refusal(made.name, 2, made.layout.total_bytes).find("owned by uid 65534"), std::string::npos);
  }
  ASSERT_EQ(chmod(made.path().c_str(), 0644), 0);
  EXPECT_NE(refusal(made.name, 2, made.layout.total_bytes), "");
}

TEST(ShmSegment, RefusesASymlink) {
  ScratchSegment made;
  const std::string link = shm::random_segment_name();
  ASSERT_EQ(symlink(made.path().c_str(), ("/dev/shm/" + link).c_str()), 0);
  const std::string why = refusal(link, 2, made.layout.total_bytes);
  unlink(("/dev/shm/" + link).c_str());
  EXPECT_NE(why, "");
}

TEST(ShmSegment, CreateRefusesAnExistingName) {
  ScratchSegment made;
  EXPECT_THROW(shm::Segment::create(made.name, made.layout), Internal);
}

TEST(ShmSegment, DecodeHeaderChecksEveryField) {
  const shm::SegmentLayout layout = shm::plan_layout(4, 8192, 4096);
  std::vector<uint8_t> header(128, 0);
  shm::write_header(header.data(), layout);
  EXPECT_EQ(shm::decode_header(header.data(), layout.total_bytes).total_bytes, layout.total_bytes);
  EXPECT_THROW(shm::decode_header(header.data(), 16), Internal);                      // too short
  EXPECT_THROW(shm::decode_header(header.data(), layout.total_bytes - 1), Internal);  // does not fit
  // Each field in turn: magic, version, ranks, slot, ring, total.
  for (size_t offset : {size_t{0}, size_t{8}, size_t{12}, size_t{16}, size_t{24}, size_t{32}}) {
    std::vector<uint8_t> bad = header;
    bad[offset] ^= 0x01;
    bad[offset + 3] ^= 0x40;
    EXPECT_THROW(shm::decode_header(bad.data(), uint64_t{1} << 40), Internal) << "offset " << offset;
  }
}

}  // namespace
}  // namespace hora
