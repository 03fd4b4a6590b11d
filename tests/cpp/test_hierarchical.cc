// Process sets across hosts: ranks are forked processes that claim host
// identities (ShmOptions.host_identity), so that one machine holds two
// simulated hosts. The hierarchical backend must give the numbers a flat
// set gives, and fail as a whole when a member dies.
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <functional>
#include <thread>

#include "control/host_agreement.h"
#include "core/half.h"
#include "hora/errors.h"
#include "hora/runtime.h"
#include "ranks_as_processes.h"
#include "planner/transport_planner.h"
#include "transport/backend.h"
#include "transport/hierarchical/hierarchical_backend.h"
#include "transport/shm/segment_setup.h"
#include "transport/shm/shm_backend.h"
#include "util/caller_waits.h"

namespace hora {
namespace {

using hierarchical::HierarchicalBackend;
using std::chrono::milliseconds;
using test_support::require;
using test_support::run_processes;
using Clock = std::chrono::steady_clock;

constexpr milliseconds kTimeout(20'000);
constexpr int kRanks = 4;

std::vector<int> first_ranks(int n) {
  std::vector<int> ranks(n);
  for (int i = 0; i < n; ++i) ranks[i] = i;
  return ranks;
}

// Which host each global rank claims.
using Hosts = std::vector<std::string>;
const Hosts kBlocks = {"host-a", "host-a", "host-b", "host-b"};       // [0, 1] / [2, 3]
const Hosts kInterleaved = {"host-a", "host-b", "host-a", "host-b"};  // [0, 2] / [1, 3]
const Hosts kOneAlone = {"host-a", "host-b", "host-b", "host-b"};     // [0] / [1, 2, 3]

// Slots of 64 KiB unless said, so that the larger messages below take
// several chunks; hora's own TCP between the hosts, as jobs under horarun
// have.
std::unique_ptr<TransportPlanner> factory_for(const Hosts& hosts, int rank, size_t slot_bytes = 64 << 10) {
  return make_transport_planner(make_tcp_backend_factory(TcpOptions{}), {ShmOptions{true, slot_bytes, hosts[rank]}});
}

// One member's transports of a set, used through its data plane (->).
struct Attached {
  SetTransports set;
  Backend* operator->() const { return set.backend.get(); }
  Backend& operator*() const { return *set.backend; }
  ControlPlane& control() const { return *set.control; }
};

// In a forked rank: the backend of the set of every rank over the
// directory store at `dir`, checked to be hierarchical with shared memory
// inside each host of two members or more.
Attached attach(const std::string& dir, const Hosts& hosts, int rank, milliseconds timeout = kTimeout,
                size_t slot_bytes = 64 << 10) {
  auto store = make_prefix_store("set", std::make_shared<test_support::DirectoryStore>(dir));
  Attached member{factory_for(hosts, rank, slot_bytes)->connect(first_ranks(kRanks), rank, store, timeout)};
  const Backend& backend = *member.set.backend;
  require(hierarchical::is_hierarchical_backend(backend), "the set did not get a hierarchical backend");
  require(member.set.fast_lane == nullptr, "a set across hosts got a fast lane");
  const Backend* local = static_cast<const HierarchicalBackend&>(backend).local_part();
  const bool alone = std::count(hosts.begin(), hosts.end(), hosts[rank]) == 1;
  require(alone ? local == nullptr : local != nullptr && shm::is_shm_backend(*local),
          "the part inside the host is not shared memory");
  return member;
}

void expect_all_ok(const std::vector<test_support::RankOutcome>& outcomes) {
  for (size_t r = 0; r < outcomes.size(); ++r) EXPECT_EQ(outcomes[r].error, "") << "rank " << r;
}

// ------------------------------------------------------------ collectives

// Small integers, exact in every type used, whose product over four ranks
// (at most 5^4) is exact in float16 too.
double input_value(int rank, size_t i) { return static_cast<double>((rank + i) % 5 + 1); }

double flat_reduction(ReduceOp op, size_t i) {
  double out = input_value(0, i);
  for (int r = 1; r < kRanks; ++r) {
    const double v = input_value(r, i);
    if (op == ReduceOp::kSum) out += v;
    else if (op == ReduceOp::kProduct) out *= v;
    else if (op == ReduceOp::kMin) out = std::min(out, v);
    else out = std::max(out, v);
  }
  return out;
}

template <typename T, typename ToT, typename FromT>
void check_allreduce(Backend& b, DataType dtype, size_t count, ReduceOp op, ToT to, FromT from) {
  std::vector<T> buf(count + 1);
  for (size_t i = 0; i < count; ++i) buf[i] = to(input_value(b.rank(), i));
  b.allreduce(buf.data(), count, dtype, op);
  for (size_t i = 0; i < count; ++i) {
    if (from(buf[i]) != flat_reduction(op, i))
      throw std::runtime_error(std::string(dtype_name(dtype)) + " " + reduce_op_name(op).data() + " count " +
                               std::to_string(count) + " element " + std::to_string(i) + ": got " +
                               std::to_string(from(buf[i])) + ", expected " + std::to_string(flat_reduction(op, i)));
  }
}

// Counts: zero, one, not divisible by the set size, and past a 64 KiB slot.
void check_allreduces(Backend& b) {
  auto same = [](double v) { return v; };
  for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMin, ReduceOp::kMax, ReduceOp::kProduct}) {
    // 700,001 elements: past HierarchicalBackend::kPipelineBytes, pipelined
    // in 2 (float32) or 5 (int64) chunks that do not divide evenly.
    for (size_t count : {size_t{0}, size_t{1}, size_t{7}, size_t{40'001}, size_t{700'001}}) {
      check_allreduce<float>(b, DataType::kFloat32, count, op, [](double v) { return static_cast<float>(v); }, same);
      check_allreduce<int64_t>(b, DataType::kInt64, count, op, [](double v) { return static_cast<int64_t>(v); },
                               [](int64_t v) { return static_cast<double>(v); });
    }
    check_allreduce<uint16_t>(b, DataType::kFloat16, 1001, op, [](double v) { return float_to_fp16(static_cast<float>(v)); },
                              [](uint16_t v) { return static_cast<double>(fp16_to_float(v)); });
  }
}

uint8_t gathered_byte(int rank, size_t i) { return static_cast<uint8_t>(rank * 50 + i % 41); }

// Unequal inputs: member 0 (a leader) gives nothing, member 3 more than a
// slot; members 1 and 2 both give some, so that host order differs from
// set-rank order when hosts interleave.
void check_allgatherv(Backend& b) {
  auto count = [](int r) { return r == 0 ? size_t{0} : r == 3 ? size_t{150'001} : size_t(r + 1) * 1000; };
  std::vector<uint8_t> in(count(b.rank()) + 1);
  for (size_t i = 0; i < count(b.rank()); ++i) in[i] = gathered_byte(b.rank(), i);
  std::vector<size_t> sizes;
  std::vector<uint8_t> want;
  for (int r = 0; r < kRanks; ++r) {
    sizes.push_back(count(r));
    for (size_t i = 0; i < count(r); ++i) want.push_back(gathered_byte(r, i));
  }
  std::vector<uint8_t> out(want.size() + 1, 0xEE);
  b.allgatherv(in.data(), out.data(), sizes);
  require(out.back() == 0xEE, "allgatherv wrote past its output");
  out.pop_back();
  require(out == want, "allgatherv: wrong bytes");
}

// From every root, leaders or not, small and past a slot.
void check_broadcasts(Backend& b) {
  for (size_t bytes : {size_t{5}, size_t{200'003}}) {
    for (int root = 0; root < kRanks; ++root) {
      std::vector<uint8_t> data(bytes, 0xEE);
      if (b.rank() == root)
        for (size_t i = 0; i < bytes; ++i) data[i] = static_cast<uint8_t>(root + i % 97);
      b.broadcast(data.data(), bytes, root);
      for (size_t i = 0; i < bytes; ++i)
        if (data[i] != static_cast<uint8_t>(root + i % 97))
          throw std::runtime_error("broadcast of " + std::to_string(bytes) + " bytes from " + std::to_string(root));
    }
  }
}

// Block from a to b: (a + b) % 3 * 1000 bytes, some empty.
void check_alltoallv(Backend& b) {
  auto block = [](int from, int to) { return static_cast<size_t>((from + to) % 3) * 1000; };
  auto byte = [](int from, int to, size_t i) { return static_cast<uint8_t>(from * 16 + to + i % 7); };
  std::vector<uint8_t> send, expect;
  std::vector<size_t> send_bytes, recv_bytes;
  for (int peer = 0; peer < kRanks; ++peer) {
    for (size_t i = 0; i < block(b.rank(), peer); ++i) send.push_back(byte(b.rank(), peer, i));
    for (size_t i = 0; i < block(peer, b.rank()); ++i) expect.push_back(byte(peer, b.rank(), i));
    send_bytes.push_back(block(b.rank(), peer));
    recv_bytes.push_back(block(peer, b.rank()));
  }
  send.push_back(0);
  std::vector<uint8_t> received(expect.size() + 1, 0xEE);
  b.alltoallv(send.data(), send_bytes, received.data(), recv_bytes);
  received.pop_back();
  require(received == expect, "alltoallv: wrong bytes");
}

// Nobody leaves a barrier before everyone has entered it: each member
// counts itself in (the last after a pause) and must see all counted.
void check_barrier(Backend& b, std::atomic<int>* entered) {
  for (int round = 1; round <= 3; ++round) {
    if (b.rank() == (round + 1) % kRanks) std::this_thread::sleep_for(milliseconds(50));
    entered->fetch_add(1);
    b.barrier();
    require(entered->load() >= round * kRanks, "a member left barrier " + std::to_string(round) + " early");
    b.barrier();  // nobody counts into the next round before all have checked
  }
}

// Every collective on a set over the claimed `hosts`.
void check_every_collective(const Hosts& hosts) {
  test_support::TemporaryDirectory dir;
  auto* entered = static_cast<std::atomic<int>*>(
      mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0));
  new (entered) std::atomic<int>(0);
  auto outcomes = run_processes(kRanks, [&](int rank) {
    auto b = attach(dir.path(), hosts, rank);
    check_allreduces(*b);
    check_allgatherv(*b);
    check_broadcasts(*b);
    check_alltoallv(*b);
    check_barrier(*b, entered);
  }, milliseconds(60'000));
  expect_all_ok(outcomes);
  munmap(entered, 4096);
}

TEST(HierarchicalProcesses, TwoHostsOfConsecutiveRanksGiveTheFlatNumbers) { check_every_collective(kBlocks); }

// Slots of 256 KiB: each host's part of an allreduce (a reduce to its
// leader, then a broadcast) takes the reduce-scatter path inside the host
// (chunks past the one-sync limit, 64 KiB by default), pipelined and not;
// with the 64 KiB slots of the other tests no chunk is past it.
TEST(HierarchicalProcesses, LargeSlotsReduceScatterInsideEachHost) {
  test_support::TemporaryDirectory dir;
  auto outcomes = run_processes(kRanks, [&](int rank) {
    auto b = attach(dir.path(), kInterleaved, rank, kTimeout, 256 << 10);
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax})
      for (size_t count : {size_t{40'001}, size_t{700'001}})
        check_allreduce<float>(*b, DataType::kFloat32, count, op, [](double v) { return static_cast<float>(v); },
                               [](double v) { return v; });
  }, milliseconds(60'000));
  expect_all_ok(outcomes);
}

TEST(HierarchicalProcesses, TwoHostsOfInterleavedRanksGiveTheFlatNumbers) { check_every_collective(kInterleaved); }

TEST(HierarchicalProcesses, AMemberAloneOnItsHostGivesTheFlatNumbers) { check_every_collective(kOneAlone); }

// ------------------------------------------------------------- failures

// A clock that forked ranks share: when something happened, and how many
// ranks are running.
struct SharedClock {
  std::atomic<int64_t> at{0};
  std::atomic<int64_t> running{0};

  static SharedClock* make() {
    void* memory = mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    return new (memory) SharedClock();
  }
  void release() { munmap(this, 4096); }
  void mark() { at.store(Clock::now().time_since_epoch().count()); }
  // Waits for mark(), then says how long ago it was.
  milliseconds since_mark() const {
    while (at.load() == 0) std::this_thread::sleep_for(milliseconds(1));
    return milliseconds((Clock::now().time_since_epoch().count() - at.load()) / 1'000'000);
  }
  void kill_when_all_run(pid_t victim, int ranks) {
    const auto give_up = Clock::now() + milliseconds(30'000);
    while (running.load() < ranks && Clock::now() < give_up) std::this_thread::sleep_for(milliseconds(1));
    std::this_thread::sleep_for(milliseconds(200));
    kill(victim, SIGKILL);
    mark();
  }
};

// Rank 3 (not a leader, on the host without the coordinator) is killed in
// a stream of allreduces: every survivor, on either host, fails with
// PeerFailure within a second, and the coordinator's control plane
// reports rank 3 closed.
void check_killed_member_fails_the_set(size_t count) {
  test_support::TemporaryDirectory dir;
  SharedClock* clock = SharedClock::make();
  auto outcomes = run_processes(kRanks, [&](int rank) {
    auto b = attach(dir.path(), kBlocks, rank, milliseconds(60'000));
    std::vector<float> v(count, 1.0f);
    b->barrier();
    clock->running.fetch_add(1);
    try {
      for (;;) b->allreduce(v.data(), v.size(), DataType::kFloat32, ReduceOp::kSum);
    } catch (const PeerFailure& e) {
      const milliseconds late = clock->since_mark();
      require(late < milliseconds(1000), "failed " + std::to_string(late.count()) + " ms after the kill: " + e.what());
    }
    const auto start = Clock::now();
    try {
      b->barrier();
      throw std::runtime_error("a barrier after the failure succeeded");
    } catch (const PeerFailure&) {
      require(Clock::now() - start < milliseconds(100), "a later barrier waited");
    }
    if (rank != 0) return;
    for (;;) {
      auto message = b.control().receive(Clock::now() + milliseconds(2000));
      require(message.has_value(), "no closure reported for rank 3");
      if (message->closed && message->from == 3) break;
    }
  }, milliseconds(60'000), [&](const std::vector<pid_t>& pids) { clock->kill_when_all_run(pids[3], kRanks); });
  EXPECT_TRUE(outcomes[3].killed);
  for (int r : {0, 1, 2}) EXPECT_EQ(outcomes[r].error, "") << "rank " << r;
  clock->release();
}

TEST(HierarchicalProcesses, KilledMemberFailsTheSetOnEveryHost) { check_killed_member_fails_the_set(1 << 16); }

// The same in pipelined allreduces (4 MiB, 4 chunks): a leader's courier
// inside the part between hosts ends too, and nothing waits for it.
TEST(HierarchicalProcesses, KilledMemberFailsAPipelinedAllreduceOnEveryHost) {
  check_killed_member_fails_the_set(1 << 20);
}

// A rank's Runtime on kInterleaved hosts over the directory store at `dir`.
Runtime interleaved_runtime(const std::string& dir, int rank, const std::vector<std::vector<int>>& sets,
                            milliseconds op_timeout = milliseconds(60'000),
                            milliseconds divergence_timeout = RuntimeConfig{}.divergence_timeout) {
  RuntimeConfig config;
  config.rank = rank;
  config.size = kRanks;
  config.timeout = op_timeout;
  config.divergence_timeout = divergence_timeout;
  config.start_timeout = milliseconds(60'000);
  return Runtime(config, std::make_shared<test_support::DirectoryStore>(dir), factory_for(kInterleaved, rank), sets);
}

// Through the Runtime (negotiation, the engine's failure protocol): the
// survivors' pending op fails with the set's verdict naming the killed
// member, on the coordinator's host too.
TEST(HierarchicalProcesses, KilledMemberIsNamedByTheRuntime) {
  test_support::TemporaryDirectory dir;
  SharedClock* clock = SharedClock::make();
  auto outcomes = run_processes(kRanks, [&](int rank) {
    Runtime runtime = interleaved_runtime(dir.path(), rank, {});
    std::vector<float> v(1 << 12, 1.0f);
    OpArgs args;
    args.input = TensorView{v.data(), DataType::kFloat32, {static_cast<int64_t>(v.size())}};
    args.output = args.input;
    try {
      for (int step = 0;; ++step) {
        std::fill(v.begin(), v.end(), 1.0f);
        args.name = "grad";
        runtime.enqueue(0, args)->wait();
        require(v[0] == kRanks, "wrong sum through the runtime: " + std::to_string(v[0]));
        if (step == 3) clock->running.fetch_add(1);
      }
    } catch (const PeerFailure& e) {
      const milliseconds late = clock->since_mark();
      require(late < milliseconds(3000), "failed " + std::to_string(late.count()) + " ms after the kill");
      require(std::string(e.what()).find("missing global rank(s) [3]") != std::string::npos, e.what());
    }
  }, milliseconds(60'000), [&](const std::vector<pid_t>& pids) { clock->kill_when_all_run(pids[3], kRanks); });
  EXPECT_TRUE(outcomes[3].killed);
  for (int r : {0, 1, 2}) EXPECT_EQ(outcomes[r].error, "") << "rank " << r;
  clock->release();
}

// Repeated ops through the Runtime on a set across hosts (the stream
// agreement over the control channel): a caller that waits looks for the
// records itself and keeps the set lent between its ops; an op nobody
// waits for yet, a pause longer than the lending and a member that comes
// late (rank 0, which relays the records) all still complete, with the
// right sums, in both the set of every rank and a set of one rank per host.
TEST(HierarchicalProcesses, RepeatedOpsThatCallersWaitForAndOnesTheyDoNot) {
  test_support::TemporaryDirectory dir;
  auto outcomes = run_processes(kRanks, [&](int rank) {
    Runtime runtime = interleaved_runtime(dir.path(), rank, {{0, 1}});
    auto op = [](std::vector<float>& v, const char* name, bool caller_waits) {
      OpArgs args;
      args.input = TensorView{v.data(), DataType::kFloat32, {static_cast<int64_t>(v.size())}};
      args.output = args.input;
      args.name = name;
      args.caller_waits = caller_waits;
      return args;
    };
    for (int step = 0; step < 40; ++step) {
      for (int32_t set : {0, 1}) {
        if (set == 1 && rank > 1) continue;
        const float members = set == 0 ? kRanks : 2;
        std::vector<float> small(3, float(rank + step)), large(5000, 1.0f);
        auto later = runtime.enqueue(set, op(large, "large", false));
        if (step % 10 == 5) std::this_thread::sleep_for(milliseconds(rank == 0 ? 20 : 5));
        runtime.enqueue(set, op(small, "small", true))->wait();
        later->wait();
        const float expected = set == 0 ? 6.0f + kRanks * step : 1.0f + 2 * step;
        require(small == std::vector<float>(3, expected),
                "set " + std::to_string(set) + " step " + std::to_string(step) + ": small sum " +
                    std::to_string(small[0]) + ", expected " + std::to_string(expected));
        require(large == std::vector<float>(5000, members), "set " + std::to_string(set) + ": wrong large sum");
      }
    }
  }, milliseconds(60'000));
  expect_all_ok(outcomes);
}

// A set over hosts that each have a segment of two members or more agrees
// through the hosts' lanes and leaders (the lowest set rank of each host);
// one with a member alone on its host, by every member's records.
TEST(HierarchicalProcesses, SetsWhoseHostsAllShareASegmentAgreeThroughTheLeaders) {
  for (const Hosts* hosts : {&kInterleaved, &kOneAlone}) {
    test_support::TemporaryDirectory dir;
    auto outcomes = run_processes(kRanks, [&](int rank) {
      Attached member = attach(dir.path(), *hosts, rank);
      const auto* agreement = dynamic_cast<const control::HostAgreement*>(member.set.agreement.get());
      if (hosts == &kOneAlone) {
        require(agreement == nullptr, "a set with a member alone on its host got a host agreement");
      } else {
        require(agreement != nullptr, "the set did not get a host agreement");
        require(agreement->leader() == (rank < 2), "set rank " + std::to_string(rank) + " leads wrongly");
      }
      member->barrier();
    }, milliseconds(60'000));
    expect_all_ok(outcomes);
  }
}

// Through the Runtime over two hosts of two members (the hosts' lanes and
// leaders): small ops whose sums the agreement carries, in several types
// and reductions, ops on the data plane, ops the engine runs and ones their
// callers run, and a mismatch of a cached op in the middle (diverted on
// both hosts), which fails on every member; afterwards the ops are agreed
// in the hosts' lanes again (counted as fast-path hits), not through the
// coordinator.
TEST(HierarchicalProcesses, RepeatedOpsAndAMismatchAgreedThroughTheHostsLeaders) {
  test_support::TemporaryDirectory dir;
  auto outcomes = run_processes(kRanks, [&](int rank) {
    Runtime runtime = interleaved_runtime(dir.path(), rank, {});
    auto op = [](TensorView view, const char* name, ReduceOp reduce, bool caller_waits) {
      OpArgs args;
      args.input = view;
      args.output = view;
      args.name = name;
      args.reduce_op = reduce;
      args.caller_waits = caller_waits;
      return args;
    };
    constexpr int kSteps = 30, kMismatch = 12, kOpsAStep = 4;
    int64_t fast_before_mismatch = 0, fast_after_mismatch = 0;
    for (int step = 0; step < kSteps; ++step) {
      if (step == kMismatch) fast_before_mismatch = runtime.metrics(0).fast_path_hits;
      if (step == kMismatch + 1) fast_after_mismatch = runtime.metrics(0).fast_path_hits;
      std::vector<float> average(3, float(rank + step));
      std::vector<int64_t> most(2, int64_t{10} * rank - step);
      std::vector<double> sum(5, 0.25 * (rank + 1));
      std::vector<float> large(5000, float(rank));
      if (step == kMismatch) {
        // Rank 3 sends 'average' with another shape: every member's fails.
        std::vector<float> odd(rank == 3 ? 4 : 3, 1.0f);
        try {
          runtime.enqueue(0, op(TensorView{odd.data(), DataType::kFloat32, {int64_t(odd.size())}}, "average",
                                ReduceOp::kAverage, true))->wait();
          require(false, "a mismatched op succeeded on rank " + std::to_string(rank));
        } catch (const Mismatch&) {
        }
        continue;
      }
      auto in_background = runtime.enqueue(
          0, op(TensorView{large.data(), DataType::kFloat32, {5000}}, "large", ReduceOp::kSum, false));
      auto engine_runs = runtime.enqueue(
          0, op(TensorView{most.data(), DataType::kInt64, {2}}, "most", ReduceOp::kMax, false));
      runtime.enqueue(0, op(TensorView{average.data(), DataType::kFloat32, {3}}, "average", ReduceOp::kAverage,
                            step % 2 == 0))->wait();
      runtime.enqueue(0, op(TensorView{sum.data(), DataType::kFloat64, {5}}, "sum", ReduceOp::kSum, true))->wait();
      engine_runs->wait();
      in_background->wait();
      const std::string at = "step " + std::to_string(step) + ", rank " + std::to_string(rank);
      require(average == std::vector<float>(3, float(step) + 1.5f), at + ": average " + std::to_string(average[0]));
      require(most == std::vector<int64_t>(2, 30 - step), at + ": max " + std::to_string(most[0]));
      require(sum == std::vector<double>(5, 2.5), at + ": sum " + std::to_string(sum[0]));
      require(large == std::vector<float>(5000, 6.0f), at + ": large " + std::to_string(large[0]));
    }
    // Step 0 is negotiated, the rest of the ops before the mismatch agree in
    // the lanes. After it, "average" goes through the coordinator until its
    // slot is given back, a few instances at most. (It used to stay there
    // on the coordinator's host, ranks 0 and 2, whose own bits took the
    // other host's row back at every instance; that host's members count
    // their submissions into the row given back, so theirs fall short only
    // by the instances before it was.)
    const std::string where = "rank " + std::to_string(rank);
    require(fast_before_mismatch >= kOpsAStep * (kMismatch - 2),
            where + ": " + std::to_string(fast_before_mismatch) + " fast-path hits before the mismatch");
    const int64_t after = runtime.metrics(0).fast_path_hits - fast_after_mismatch;
    constexpr int kInstancesToGiveBack = 8;
    require(after >= kOpsAStep * (kSteps - kMismatch - 1) - kInstancesToGiveBack,
            where + ": " + std::to_string(after) + " fast-path hits after the mismatch, of " +
                std::to_string(kOpsAStep * (kSteps - kMismatch - 1)));
  }, milliseconds(60'000));
  expect_all_ok(outcomes);
}

// Rank 3 (on the other host than the coordinator's) runs out of data
// first and joins: the others' repeated op goes on with zeros from it (the
// coordinator runs every op while a member has joined); once all have
// joined, the repeats agree in the hosts' lanes again (the count that
// falls short without it is the coordinator's host's).
TEST(HierarchicalProcesses, AJoinedMemberStandsInAndTheOpsReturnToTheLanes) {
  test_support::TemporaryDirectory dir;
  auto outcomes = run_processes(kRanks, [&](int rank) {
    Runtime runtime = interleaved_runtime(dir.path(), rank, {});
    auto step_once = [&](const std::string& at, float expected) {
      std::vector<float> g(6, 1.0f);
      OpArgs args;
      args.input = TensorView{g.data(), DataType::kFloat32, {6}};
      args.output = args.input;
      args.name = "g";
      args.caller_waits = true;
      runtime.enqueue(0, args)->wait();
      for (float v : g) require(v == expected, at + ", rank " + std::to_string(rank) + ": " + std::to_string(v));
    };
    const int steps = rank == 3 ? 3 : 10;
    for (int step = 0; step < steps; ++step) step_once("step " + std::to_string(step), step < 3 ? 4.0f : 3.0f);
    OpArgs join;
    join.op = OpType::kJoin;
    std::shared_ptr<Work> joined = runtime.enqueue(0, join);
    joined->wait();
    int32_t last = -1;
    std::memcpy(&last, joined->output_data(), sizeof last);
    require(last != 3, "rank 3 joined first but was named last");
    constexpr int kAfterJoin = 12, kInstancesToGiveBack = 4;
    const int64_t fast_before = runtime.metrics(0).fast_path_hits;
    for (int step = 0; step < kAfterJoin; ++step) step_once("after the join, step " + std::to_string(step), 4.0f);
    const int64_t after = runtime.metrics(0).fast_path_hits - fast_before;
    require(after >= kAfterJoin - kInstancesToGiveBack,
            "rank " + std::to_string(rank) + ": " + std::to_string(after) + " fast-path hits after the join");
  }, milliseconds(60'000));
  expect_all_ok(outcomes);
}

// Right after a mismatch of "x" (its slot being given back, the other
// host's row first), rank 3 goes on with "y" while the others submit "x",
// rank 1 late enough that its row was given back: its "x" waits there, out
// of the coordinator's sight, until the coordinator takes the slot back
// before reporting. Every member is then seen waiting on an op: both ops
// fail as diverged (rank 1 is not called missing), and the set goes on.
TEST(HierarchicalProcesses, MembersThatDivergeWhileASlotIsGivenBackAreToldSo) {
  test_support::TemporaryDirectory dir;
  auto outcomes = run_processes(kRanks, [&](int rank) {
    Runtime runtime = interleaved_runtime(dir.path(), rank, {}, milliseconds(8000), milliseconds(1000));
    auto allreduce = [&](const char* name, size_t count) {
      std::vector<float> v(count, 1.0f);
      OpArgs args;
      args.input = TensorView{v.data(), DataType::kFloat32, {static_cast<int64_t>(count)}};
      args.output = args.input;
      args.name = name;
      args.caller_waits = true;
      runtime.enqueue(0, args)->wait();
      return v[0];
    };
    const std::string at = "rank " + std::to_string(rank);
    for (int step = 0; step < 4; ++step) require(allreduce("x", 4) == kRanks, at + ": x");
    try {
      allreduce("x", rank == 3 ? 5 : 4);
      require(false, at + ": a mismatched x succeeded");
    } catch (const Mismatch&) {
    }
    if (rank == 1) std::this_thread::sleep_for(milliseconds(300));
    try {
      allreduce(rank == 3 ? "y" : "x", 4);
      require(false, at + ": an op of diverged members succeeded");
    } catch (const std::exception& e) {
      require(std::string(e.what()).find("diverged") != std::string::npos, at + ": " + e.what());
    }
    require(allreduce("z", 4) == kRanks, at + ": z after the divergence");
  }, milliseconds(60'000));
  expect_all_ok(outcomes);
}

// Rank 3 (on the host without the coordinator, whose leader is rank 1)
// stops submitting a repeated op that the others go on with: rank 1's bit
// waits in its host's row, out of the coordinator's sight, until the
// coordinator takes the op back; the op then fails at the op timeout on
// every member that submitted it, naming rank 3 alone.
TEST(HierarchicalProcesses, AnOpAMemberNeverSubmitsFailsNamingOnlyThatMember) {
  test_support::TemporaryDirectory dir;
  SharedClock* clock = SharedClock::make();
  auto outcomes = run_processes(kRanks, [&](int rank) {
    Runtime runtime = interleaved_runtime(dir.path(), rank, {}, milliseconds(1500));
    std::vector<float> v(4);
    OpArgs args;
    args.input = TensorView{v.data(), DataType::kFloat32, {4}};
    args.output = args.input;
    args.name = "grad";
    for (int step = 0; step < 5; ++step) {
      std::fill(v.begin(), v.end(), 1.0f);
      runtime.enqueue(0, args)->wait();
      require(v[0] == kRanks, "wrong sum: " + std::to_string(v[0]));
    }
    if (rank == 3) {
      const auto give_up = Clock::now() + milliseconds(30'000);
      while (clock->running.load() < kRanks - 1 && Clock::now() < give_up) std::this_thread::sleep_for(milliseconds(5));
      return;
    }
    try {
      runtime.enqueue(0, args)->wait();
      clock->running.fetch_add(1);
      require(false, "an op that rank 3 never submitted succeeded");
    } catch (const std::exception& e) {
      clock->running.fetch_add(1);
      require(std::string(e.what()).find("missing global rank(s) [3]") != std::string::npos, e.what());
    }
  }, milliseconds(60'000));
  expect_all_ok(outcomes);
  clock->release();
}

// Rank 1 gives the set up while the others wait in an allreduce that needs
// it: they all fail at once, on both hosts.
TEST(HierarchicalProcesses, AbortFailsPeersOnEveryHost) {
  test_support::TemporaryDirectory dir;
  SharedClock* clock = SharedClock::make();
  auto outcomes = run_processes(kRanks, [&](int rank) {
    auto b = attach(dir.path(), kBlocks, rank, milliseconds(60'000));
    b->barrier();
    if (rank == 1) {
      std::this_thread::sleep_for(milliseconds(300));
      clock->mark();
      b->abort("test abort");
      try {
        b->barrier();
      } catch (const PeerFailure& e) {
        require(std::string(e.what()).find("test abort") != std::string::npos, e.what());
        return;
      }
      throw std::runtime_error("a barrier after abort() succeeded");
    }
    float v = 1;
    try {
      b->allreduce(&v, 1, DataType::kFloat32, ReduceOp::kSum);
      throw std::runtime_error("the allreduce succeeded");
    } catch (const PeerFailure& e) {
      const milliseconds late = clock->since_mark();
      require(late < milliseconds(1000), "failed " + std::to_string(late.count()) + " ms after the abort: " + e.what());
    }
  }, milliseconds(60'000));
  expect_all_ok(outcomes);
  clock->release();
}

// ------------------------------------------------------- choice of backend

enum class Kind { kShm, kHierarchical, kNetwork };

// Ranks as threads over one hash store, the local backend as the network:
// each member's planner connects the set of every rank, and `inspect` looks
// at what it chose (it may connect more sets through the same planner, over
// the store it is given).
using Inspect = std::function<void(int rank, TransportPlanner& planner, const std::shared_ptr<Store>& store,
                                   SetTransports& world)>;
void each_member(const Hosts& hosts, const std::vector<bool>& shm_on, const Inspect& inspect) {
  const int n = static_cast<int>(hosts.size());
  auto store = make_hash_store();
  std::vector<std::thread> threads;
  for (int rank = 0; rank < n; ++rank) {
    threads.emplace_back([&, rank] {
      try {
        auto planner = make_transport_planner(make_local_backend_factory(), {ShmOptions{shm_on[rank], 0, hosts[rank]}});
        SetTransports world = planner->connect(first_ranks(n), rank, make_prefix_store("world", store), kTimeout);
        inspect(rank, *planner, store, world);
        world.backend->barrier();
      } catch (const std::exception& e) {
        ADD_FAILURE() << "rank " << rank << ": " << e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
}

// What each member's planner chose, and whether an allreduce through it is
// right.
std::vector<Kind> chosen(const Hosts& hosts, const std::vector<bool>& shm_on) {
  const int n = static_cast<int>(hosts.size());
  std::vector<Kind> kinds(n, Kind::kNetwork);
  each_member(hosts, shm_on, [&](int rank, TransportPlanner&, const std::shared_ptr<Store>&, SetTransports& set) {
    Backend* b = set.backend.get();
    kinds[rank] = shm::is_shm_backend(*b)                        ? Kind::kShm
                  : hierarchical::is_hierarchical_backend(*b) ? Kind::kHierarchical
                                                               : Kind::kNetwork;
    int64_t v = rank + 1;
    b->allreduce(&v, 1, DataType::kInt64, ReduceOp::kSum);
    EXPECT_EQ(v, n * (n + 1) / 2);
  });
  return kinds;
}

TEST(HierarchicalChoice, OnlyHostsWithSharedMembersAreComposed) {
  const std::vector<bool> on(4, true);
  EXPECT_EQ(chosen({"a", "a", "a", "a"}, on), std::vector<Kind>(4, Kind::kShm));
  EXPECT_EQ(chosen(kBlocks, on), std::vector<Kind>(4, Kind::kHierarchical));
  EXPECT_EQ(chosen(kInterleaved, on), std::vector<Kind>(4, Kind::kHierarchical));
  EXPECT_EQ(chosen({"a", "b", "c", "d"}, on), std::vector<Kind>(4, Kind::kNetwork));
  EXPECT_EQ(chosen({"a", "b"}, {true, true}), std::vector<Kind>(2, Kind::kNetwork));
}

TEST(HierarchicalChoice, OneMemberWithSharedMemoryOffKeepsTheSetFlat) {
  EXPECT_EQ(chosen(kBlocks, {true, true, false, true}), std::vector<Kind>(4, Kind::kNetwork));
}

// The spin of a set's waits, as a member's planner tuned it: the part
// inside its host's (shared memory; zero where there is none) and its
// agreement's.
struct Spins {
  std::chrono::nanoseconds local{0}, agreement{0};
  std::chrono::nanoseconds look{0};  // a caller's look at its host's log, yielding between looks
};

Spins spins_of(const SetTransports& set) {
  Spins spins;
  const Backend* local = set.backend.get();
  if (hierarchical::is_hierarchical_backend(*local)) local = static_cast<const HierarchicalBackend&>(*local).local_part();
  if (local && shm::is_shm_backend(*local)) {
    spins.local = static_cast<const shm::ShmBackend&>(*local).tuning().spin;
    spins.look = static_cast<const shm::ShmBackend&>(*local).tuning().yield_look;
  }
  spins.agreement = set.agreement_spin;
  return spins;
}

// Each member's spins in the set of every rank.
std::vector<Spins> spins_chosen(const Hosts& hosts, const std::vector<bool>& shm_on) {
  std::vector<Spins> spins(hosts.size());
  each_member(hosts, shm_on, [&](int rank, TransportPlanner&, const std::shared_ptr<Store>&, SetTransports& set) {
    spins[rank] = spins_of(set);
  });
  return spins;
}

// Hosts that are containers or network namespaces of one machine share its
// cores: where the job's ranks on the machine outnumber them, the waits in
// a host's shared memory spin only briefly as well, though no host has
// more members than cores (a spinning member would hold a core that a rank
// of the other host needs), and so does the agreement of a set whose own
// members do not outnumber the cores; a caller waiting for its host's log
// looks for it a while, yielding its core between looks, before it sleeps.
TEST(HierarchicalChoice, WaitsSpinBrieflyWhereTheMachinesRanksOutnumberItsCores) {
  const long cores = sysconf(_SC_NPROCESSORS_ONLN);
  if (cores < 2)
    GTEST_SKIP() << "on " << cores << " core any two members outnumber the cores, so the machine's count "
                 << "changes nothing that could be seen";
  if (cores > 16)
    GTEST_SKIP() << "more ranks than " << cores << " cores would take " << cores + 2 << " threads, each with a "
                 << "segment; the choice is the same arithmetic as on 2 to 16 cores";
  // Two hosts of at most `cores` members each, more than `cores` in all.
  const int per_host = static_cast<int>(std::max<long>(2, (cores + 2) / 2));
  Hosts hosts(per_host, "host-a");
  hosts.insert(hosts.end(), per_host, "host-b");
  ASSERT_GT(static_cast<long>(hosts.size()), cores);
  ASSERT_LE(per_host, cores);
  const std::vector<bool> on(hosts.size(), true);
  // And a set of one member of each host (the network path), connected
  // after the job's first set taught every rank's host.
  const std::vector<int> pair = {0, per_host};
  std::vector<Spins> spins(hosts.size()), pair_spins(2);
  each_member(hosts, on, [&](int rank, TransportPlanner& planner, const std::shared_ptr<Store>& store, SetTransports& set) {
    spins[rank] = spins_of(set);
    const auto at = std::find(pair.begin(), pair.end(), rank);
    if (at == pair.end()) return;
    SetTransports across = planner.connect(pair, rank, make_prefix_store("pair", store), kTimeout);
    pair_spins[at - pair.begin()] = spins_of(across);
    across.backend->barrier();
  });
  for (const Spins& spin : spins) {
    EXPECT_EQ(spin.local, std::chrono::microseconds(2));
    EXPECT_EQ(spin.agreement, kUnwatchedSpin);
    EXPECT_EQ(spin.look, std::chrono::microseconds(200)) << "a caller waiting for its host's log sleeps at once";
  }
  for (const Spins& spin : pair_spins) EXPECT_EQ(spin.agreement, kUnwatchedSpin);
  // The machine's ranks within its cores: the waits spin long, and look
  // without yielding.
  for (const Spins& spin : spins_chosen({"host-a", "host-a"}, {true, true})) {
    EXPECT_GT(spin.local, std::chrono::microseconds(2));
    EXPECT_EQ(spin.look, std::chrono::nanoseconds(0));
  }
}

// A member with shared memory off still names its machine: every set is
// then flat, and its agreement still counts the machine's ranks.
TEST(HierarchicalChoice, AMemberWithSharedMemoryOffStillCountsOnItsMachine) {
  const long cores = sysconf(_SC_NPROCESSORS_ONLN);
  ASSERT_GE(cores, 1) << "the number of online cores cannot be read";
  if (cores > 16)
    GTEST_SKIP() << "more ranks than " << cores << " cores would take " << cores + 1 << " threads; the choice "
                 << "is the same arithmetic as on 1 to 16 cores";
  const int n = static_cast<int>(cores + 1);
  Hosts hosts(n, "host-a");
  std::vector<bool> on(n, true);
  on[1] = false;
  for (const Spins& spin : spins_chosen(hosts, on)) {
    EXPECT_EQ(spin.local, std::chrono::nanoseconds(0));  // no shared memory
    EXPECT_EQ(spin.agreement, kUnwatchedSpin);
  }
}

// Hosts that are network namespaces or containers of one machine have
// their own host names but share its boot, and so its cores.
TEST(HierarchicalLayout, HostsOfOneMachineShareItsBoot) {
  const std::string here = shm::this_host_identity("host-a");
  EXPECT_NE(here, shm::this_host_identity("host-b"));
  EXPECT_EQ(shm::machine_of(here), shm::machine_of(shm::this_host_identity("host-b")));
  EXPECT_FALSE(shm::machine_of(here).empty());
  EXPECT_EQ(shm::machine_of("boot-1|node-7|64|4026531836|"), "boot-1");
  EXPECT_NE(shm::machine_of("boot-1|node-7|64|1|"), shm::machine_of("boot-2|node-7|64|1|"));
}

TEST(HierarchicalLayout, HostsAreNumberedByTheirLowestMember) {
  const hierarchical::HostLayout blocks = hierarchical::plan_hosts(kBlocks);
  EXPECT_EQ(blocks.hosts, (std::vector<std::vector<int>>{{0, 1}, {2, 3}}));
  EXPECT_TRUE(blocks.contiguous);
  const hierarchical::HostLayout mixed = hierarchical::plan_hosts({"y", "x", "y", "z", "x"});
  EXPECT_EQ(mixed.hosts, (std::vector<std::vector<int>>{{0, 2}, {1, 4}, {3}}));
  EXPECT_EQ(mixed.host_of, (std::vector<int>{0, 1, 0, 2, 1}));
  EXPECT_EQ(mixed.local_rank_of, (std::vector<int>{0, 0, 1, 0, 1}));
  EXPECT_FALSE(mixed.contiguous);
  EXPECT_TRUE(mixed.is_leader(1));
  EXPECT_FALSE(mixed.is_leader(4));
  EXPECT_TRUE(hierarchical::worth_composing(mixed));
  EXPECT_FALSE(hierarchical::worth_composing(hierarchical::plan_hosts({"x", "x", "x"})));
  EXPECT_FALSE(hierarchical::worth_composing(hierarchical::plan_hosts({"x", "y", "z"})));
}

}  // namespace
}  // namespace hora
