// The MPI backend on 4 real processes: ctest runs this under mpiexec -n 4.
// Every rank runs every test in the same order; a test that needs fewer
// ranks uses sets of the ranks it names.

#include <algorithm>
#include <atomic>
#include <cstring>
#include <numeric>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "collectives/collectives.h"
#include "core/half.h"
#include "hora/errors.h"
#include "hora/runtime_config.h"
#include "transport/registry.h"

namespace hora {
namespace {

using std::chrono::milliseconds;
constexpr milliseconds kTimeout{60000};

// The job, opened once per process (MPI can be initialised only once).
JobTransport& job() {
  static JobTransport* opened = [] {
    RuntimeConfig config = runtime_config_from_env();
    config.backend = "mpi";
    return new JobTransport(open_job_transport(config));
  }();
  return *opened;
}

int me() { return job().config.rank; }

// A backend for `ranks` (members only); `name` keeps each test's store keys apart.
std::unique_ptr<Backend> connect(const std::vector<int>& ranks, const std::string& name) {
  return job().factory->create(ranks, me(), make_prefix_store(name, job().store), kTimeout);
}

bool member(const std::vector<int>& ranks) { return std::find(ranks.begin(), ranks.end(), me()) != ranks.end(); }

TEST(MpiBackend, JobSpansFourRanksOnTheMpiBackend) {
  EXPECT_EQ(job().config.size, 4);
  EXPECT_EQ(job().config.backend, "mpi");
  EXPECT_EQ(job().factory->name(), "mpi");
  EXPECT_TRUE(mpi_threads_supported());
}

TEST(MpiBackend, AllreduceNativeTypesEveryOp) {
  auto backend = connect({0, 1, 2, 3}, "native");
  std::vector<float> f(5, static_cast<float>(me() + 1));
  backend->allreduce(f.data(), f.size(), DataType::kFloat32, ReduceOp::kSum);
  EXPECT_EQ(f, std::vector<float>(5, 10.0f));
  std::vector<int64_t> i(3, me() + 1);
  backend->allreduce(i.data(), i.size(), DataType::kInt64, ReduceOp::kProduct);
  EXPECT_EQ(i, std::vector<int64_t>(3, 24));
  std::vector<int32_t> lo(2, me()), hi(2, me());
  backend->allreduce(lo.data(), lo.size(), DataType::kInt32, ReduceOp::kMin);
  backend->allreduce(hi.data(), hi.size(), DataType::kInt32, ReduceOp::kMax);
  EXPECT_EQ(lo, std::vector<int32_t>(2, 0));
  EXPECT_EQ(hi, std::vector<int32_t>(2, 3));
}

TEST(MpiBackend, AllreduceSixteenBitIntegersAsTheirType) {
  auto backend = connect({0, 1, 2, 3}, "sixteen_bit");
  std::vector<uint16_t> u(3, static_cast<uint16_t>(30000 + me()));
  backend->allreduce(u.data(), u.size(), DataType::kUInt16, ReduceOp::kSum);  // 120006 wraps
  EXPECT_EQ(u, std::vector<uint16_t>(3, static_cast<uint16_t>(120006 - 65536)));
  std::vector<int16_t> i(2, static_cast<int16_t>(me() % 2 ? -32768 : 7));
  backend->allreduce(i.data(), i.size(), DataType::kInt16, ReduceOp::kMin);
  EXPECT_EQ(i, std::vector<int16_t>(2, -32768));
}

TEST(MpiBackend, AdasumOfFusedTensors) {
  auto backend = connect({0, 1, 2, 3}, "adasum");
  // Tensor 0 orthogonal across ranks (they add), tensor 1 the same on every
  // rank (it stays itself).
  std::vector<float> unit(4, 0.0f), same = {1.5f, -2.0f, 4.0f};
  unit[me()] = 2.0f;
  std::vector<AllreducePart> parts = {
      {{unit.data(), DataType::kFloat32, {4}}, {unit.data(), DataType::kFloat32, {4}}},
      {{same.data(), DataType::kFloat32, {3}}, {same.data(), DataType::kFloat32, {3}}}};
  FusionBuffer fusion;
  allreduce(*backend, parts, AllreduceOptions{DataType::kFloat32, ReduceOp::kAdasum, 1.0, 1.0}, fusion);
  EXPECT_EQ(unit, std::vector<float>(4, 2.0f));
  EXPECT_EQ(same, (std::vector<float>{1.5f, -2.0f, 4.0f}));
}

TEST(MpiBackend, AllreduceHalfPrecisionAndBoolWithHorasKernels) {
  auto backend = connect({0, 1, 2, 3}, "hora_ops");
  std::vector<uint16_t> h(4, float_to_fp16(0.5f * (me() + 1)));
  backend->allreduce(h.data(), h.size(), DataType::kFloat16, ReduceOp::kSum);
  for (uint16_t v : h) EXPECT_EQ(fp16_to_float(v), 5.0f);
  std::vector<uint16_t> b(4, float_to_bf16(static_cast<float>(me() + 1)));
  backend->allreduce(b.data(), b.size(), DataType::kBFloat16, ReduceOp::kMax);
  for (uint16_t v : b) EXPECT_EQ(bf16_to_float(v), 4.0f);
  std::vector<uint8_t> any(2, me() == 2), all(2, me() != 2);
  backend->allreduce(any.data(), any.size(), DataType::kBool, ReduceOp::kSum);  // logical or
  backend->allreduce(all.data(), all.size(), DataType::kBool, ReduceOp::kProduct);  // logical and
  EXPECT_EQ(any, std::vector<uint8_t>(2, 1));
  EXPECT_EQ(all, std::vector<uint8_t>(2, 0));
}

TEST(MpiBackend, AllgathervBroadcastAlltoallvBarrierOnASubset) {
  const std::vector<int> ranks = {1, 2, 3};
  if (!member(ranks)) return;
  auto backend = connect(ranks, "subset");
  const int r = backend->rank();
  ASSERT_EQ(backend->size(), 3);
  // Member i contributes i+1 bytes of value 10+i.
  std::vector<size_t> sizes = {1, 2, 3};
  std::vector<uint8_t> in(sizes[r], static_cast<uint8_t>(10 + r)), out(6);
  backend->allgatherv(in.data(), out.data(), sizes);
  EXPECT_EQ(out, (std::vector<uint8_t>{10, 11, 11, 12, 12, 12}));
  std::vector<int32_t> value(3, 100 * me());
  backend->broadcast(value.data(), value.size() * sizeof(int32_t), 2);
  EXPECT_EQ(value, std::vector<int32_t>(3, 300));
  // Member r sends one byte (r*10 + to) to every member.
  std::vector<uint8_t> send(3), recv(3);
  for (int to = 0; to < 3; ++to) send[to] = static_cast<uint8_t>(r * 10 + to);
  backend->alltoallv(send.data(), {1, 1, 1}, recv.data(), {1, 1, 1});
  EXPECT_EQ(recv, (std::vector<uint8_t>{static_cast<uint8_t>(r), static_cast<uint8_t>(10 + r),
                                        static_cast<uint8_t>(20 + r)}));
  backend->barrier();
}

// Each rank builds its sets on threads of their own, all at once, as
// engines do; overlapping sets then reduce concurrently.
TEST(MpiBackend, OverlappingSetsAreCreatedAndUsedConcurrently) {
  const std::vector<std::vector<int>> sets = {{0, 1, 2}, {1, 2, 3}, {0, 1, 2, 3}, {0, 3}};
  std::vector<std::thread> threads;
  std::atomic<int> done{0};
  for (size_t s = 0; s < sets.size(); ++s) {
    if (!member(sets[s])) continue;
    threads.emplace_back([&, s] {
      auto backend = connect(sets[s], "concurrent." + std::to_string(s));
      const int expected = std::accumulate(sets[s].begin(), sets[s].end(), 0) * 20;
      for (int step = 0; step < 20; ++step) {
        int64_t value = me();
        backend->allreduce(&value, 1, DataType::kInt64, ReduceOp::kSum);
        EXPECT_EQ(value * 20, expected);
      }
      ++done;
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(done.load(), static_cast<int>(threads.size()));
}

TEST(MpiBackend, ASetOfOneNeedsNobody) {
  auto backend = connect({me()}, "alone." + std::to_string(me()));
  double x = 2.5;
  backend->allreduce(&x, 1, DataType::kFloat64, ReduceOp::kSum);
  EXPECT_EQ(x, 2.5);
  backend->barrier();
}

TEST(MpiBackend, AbortFailsLaterCollectivesAtOnce) {
  const std::vector<int> pair = me() < 2 ? std::vector<int>{0, 1} : std::vector<int>{2, 3};
  auto backend = connect(pair, "aborted." + std::to_string(pair[0]));
  backend->abort("test abort");
  int32_t x = 1;
  try {
    backend->allreduce(&x, 1, DataType::kInt32, ReduceOp::kSum);
    FAIL() << "a collective ran on an aborted set";
  } catch (const PeerFailure& e) {
    EXPECT_NE(std::string(e.what()).find("test abort"), std::string::npos) << e.what();
  }
}

// A member that gives the set up (stop, shutdown) never strands another
// inside MPI: the collective that waits for it ends on abort() or timeout.
TEST(MpiBackend, ACollectiveAMemberNeverJoinsEndsOnAbortOrTimeout) {
  const std::vector<int> pair = me() < 2 ? std::vector<int>{0, 1} : std::vector<int>{2, 3};
  const bool waits = me() == pair[0];
  {
    auto backend = connect(pair, "abandoned." + std::to_string(pair[0]));
    if (waits) {
      std::thread aborter([&] {
        std::this_thread::sleep_for(milliseconds(300));
        backend->abort("the set was stopped");
      });
      const auto start = std::chrono::steady_clock::now();
      int32_t x = 1;
      EXPECT_THROW(backend->allreduce(&x, 1, DataType::kInt32, ReduceOp::kSum), PeerFailure);
      EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
      aborter.join();
    }
  }
  auto backend = job().factory->create(pair, me(), make_prefix_store("late." + std::to_string(pair[0]), job().store),
                                       milliseconds(1000));
  if (waits) {
    const auto start = std::chrono::steady_clock::now();
    int32_t x = 1;
    EXPECT_THROW(backend->allreduce(&x, 1, DataType::kInt32, ReduceOp::kSum), Timeout);
    EXPECT_GE(std::chrono::steady_clock::now() - start, milliseconds(900));
    EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
    // The set stays broken.
    EXPECT_THROW(backend->barrier(), Error);
  }
}

TEST(MpiBackend, CreateRejectsANonMemberAndUnsortedRanks) {
  const int other = (me() + 1) % 4;
  EXPECT_THROW(job().factory->create({other}, me(), job().store, kTimeout), InvalidArgument);
  EXPECT_THROW(job().factory->create({3, 0}, me(), job().store, kTimeout), InvalidArgument);
  EXPECT_THROW(job().factory->create({0, 9}, me(), job().store, kTimeout), InvalidArgument);
}

}  // namespace
}  // namespace hora
