// Every transport ("local": ranks as threads sharing memory, in-process
// mailboxes; "gloo": Gloo's TCP on 127.0.0.1, the TCP star; "tcp": hora's
// own TCP data plane, the TCP star; "shm": a shared-memory
// segment each thread maps itself, its rings) runs the same tests of its
// data plane and its control plane: ranks are threads sharing one hash
// store, each with its own planner, as separate processes would have.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <functional>
#include <future>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "core/half.h"
#include "hora/errors.h"
#include "hora/store.h"
#include "planner/transport_planner.h"
#include "transport/backend.h"

namespace hora {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;
constexpr milliseconds kTimeout(5000);

std::unique_ptr<TransportPlanner> make_planner(const std::string& kind) {
  if (kind == "shm") return make_transport_planner(make_local_backend_factory(), {ShmOptions{}});
  if (kind == "tcp") return make_transport_planner(make_tcp_backend_factory(TcpOptions{}));
  return make_transport_planner(kind == "gloo" ? make_gloo_backend_factory("127.0.0.1") : make_local_backend_factory());
}

std::vector<int> first_ranks(int n) {
  std::vector<int> ranks(n);
  for (int i = 0; i < n; ++i) ranks[i] = i;
  return ranks;
}

std::vector<uint8_t> bytes(const std::string& text) { return {text.begin(), text.end()}; }
std::string text(const std::vector<uint8_t>& value) { return {value.begin(), value.end()}; }

using Body = std::function<void(Backend& backend, ControlPlane& control, int global_rank)>;

struct MemberOptions {
  milliseconds timeout = kTimeout;
  bool final_barrier = true;  // keeps every backend alive until all bodies end
};

// Runs `body` on one thread per global rank of `members`, each with its own
// planner and transports over `store`. An exception in any thread fails the test.
void run_members(const std::string& kind, const std::vector<int>& members,
                 const std::shared_ptr<Store>& store, const Body& body,
                 MemberOptions options = {}) {
  std::vector<std::thread> threads;
  for (int global_rank : members) {
    threads.emplace_back([&, global_rank] {
      try {
        auto planner = make_planner(kind);
        SetTransports set = planner->connect(members, global_rank, store, options.timeout);
        body(*set.backend, *set.control, global_rank);
        if (options.final_barrier) set.backend->barrier();
      } catch (const std::exception& e) {
        ADD_FAILURE() << kind << " global rank " << global_rank << ": " << e.what();
      }
    });
  }
  for (auto& thread : threads) thread.join();
}

// Runs `call`, expecting it to throw `E`, and returns the message.
template <typename E, typename Call>
std::string error_message(Call&& call) {
  try {
    call();
  } catch (const E& e) {
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "wrong exception: " << e.what();
    return "";
  }
  ADD_FAILURE() << "no exception";
  return "";
}

class BackendParamTest : public ::testing::TestWithParam<std::tuple<std::string, int>> {
 protected:
  std::string kind() const { return std::get<0>(GetParam()); }
  int size() const { return std::get<1>(GetParam()); }
  void run(const Body& body) {
    run_members(kind(), first_ranks(size()), make_prefix_store("set", make_hash_store()), body);
  }
};

std::string param_name(const ::testing::TestParamInfo<std::tuple<std::string, int>>& info) {
  return std::get<0>(info.param) + "_" + std::to_string(std::get<1>(info.param));
}

// ---------------------------------------------------------------- data plane

class BackendCollectives : public BackendParamTest {};

TEST_P(BackendCollectives, AllreduceFloat32SumAndMax) {
  run([](Backend& b, ControlPlane& c, int) {
    const int n = b.size();
    const int r = b.rank();
    std::vector<float> sum(1000);
    for (size_t i = 0; i < sum.size(); ++i) sum[i] = static_cast<float>((r + 1) * (i % 7 + 1));
    b.allreduce(sum.data(), sum.size(), DataType::kFloat32, ReduceOp::kSum);
    for (size_t i = 0; i < sum.size(); ++i) {
      ASSERT_EQ(sum[i], static_cast<float>(n * (n + 1) / 2 * (i % 7 + 1))) << "element " << i;
    }
    std::vector<float> max(5);
    for (int i = 0; i < 5; ++i) max[i] = static_cast<float>(r * 10 - i);
    b.allreduce(max.data(), max.size(), DataType::kFloat32, ReduceOp::kMax);
    for (int i = 0; i < 5; ++i) EXPECT_EQ(max[i], static_cast<float>((n - 1) * 10 - i));
  });
}

// Every backend reduces to any root (shared memory in its own way, the
// others by allreduce), over shared memory's one-sync and reduce-scatter
// sizes, and a root outside the set is refused by name.
TEST_P(BackendCollectives, ReduceGivesTheRootTheSum) {
  run([](Backend& b, ControlPlane& c, int) {
    const int n = b.size();
    for (size_t count : {size_t{3}, size_t{70'001}}) {
      for (int root = 0; root < n; ++root) {
        std::vector<float> v(count);
        for (size_t i = 0; i < count; ++i) v[i] = static_cast<float>((b.rank() + 1) * (i % 5 + 1));
        b.reduce(v.data(), count, DataType::kFloat32, ReduceOp::kSum, root);
        if (b.rank() != root) continue;
        size_t wrong = 0;  // every member goes on to the next reduce either way
        for (size_t i = 0; i < count; ++i) wrong += v[i] != static_cast<float>(n * (n + 1) / 2 * (i % 5 + 1));
        EXPECT_EQ(wrong, 0u) << "root " << root << ", " << count << " elements";
      }
    }
    float one = 1;
    for (int root : {n, -1}) {
      const std::string refused =
          error_message<InvalidArgument>([&] { b.reduce(&one, 1, DataType::kFloat32, ReduceOp::kSum, root); });
      EXPECT_NE(refused.find("reduce root " + std::to_string(root)), std::string::npos) << refused;
    }
  });
}

TEST_P(BackendCollectives, AllreduceInt64Product) {
  run([](Backend& b, ControlPlane& c, int) {
    std::vector<int64_t> values(9);
    // Four factors near 4e4 multiply past 2^53: exact only in integer math.
    auto factor = [](int r, int i) { return int64_t{40000} + 97 * r + i; };
    for (int i = 0; i < 9; ++i) values[i] = factor(b.rank(), i);
    b.allreduce(values.data(), values.size(), DataType::kInt64, ReduceOp::kProduct);
    for (int i = 0; i < 9; ++i) {
      int64_t expected = 1;
      for (int r = 0; r < b.size(); ++r) expected *= factor(r, i);
      EXPECT_EQ(values[i], expected) << "element " << i;
    }
  });
}

TEST_P(BackendCollectives, AllreduceFloat16Sum) {
  run([](Backend& b, ControlPlane& c, int) {
    const int n = b.size();
    std::vector<uint16_t> values(8);
    for (int i = 0; i < 8; ++i) values[i] = float_to_fp16(0.5f * (b.rank() + 1) + i);
    b.allreduce(values.data(), values.size(), DataType::kFloat16, ReduceOp::kSum);
    for (int i = 0; i < 8; ++i) {
      EXPECT_EQ(fp16_to_float(values[i]), 0.25f * n * (n + 1) + static_cast<float>(n * i));
    }
  });
}

TEST_P(BackendCollectives, AllgathervConcatenatesUnevenInputsInRankOrder) {
  run([](Backend& b, ControlPlane& c, int) {
    auto count = [](int r) { return r == 1 ? 0 : r + 1; };  // member 1 sends nothing
    std::vector<int32_t> in(count(b.rank()));
    for (size_t j = 0; j < in.size(); ++j) in[j] = 100 * b.rank() + static_cast<int32_t>(j);
    std::vector<size_t> recv_bytes;
    std::vector<int32_t> expected;
    for (int r = 0; r < b.size(); ++r) {
      recv_bytes.push_back(count(r) * sizeof(int32_t));
      for (int j = 0; j < count(r); ++j) expected.push_back(100 * r + j);
    }
    std::vector<int32_t> out(expected.size(), -1);
    b.allgatherv(in.data(), out.data(), recv_bytes);
    EXPECT_EQ(out, expected);
  });
}

TEST_P(BackendCollectives, BroadcastFromEveryRoot) {
  run([](Backend& b, ControlPlane& c, int) {
    for (int root = 0; root < b.size(); ++root) {
      std::vector<int32_t> buf(6, -1);
      if (b.rank() == root) {
        for (int i = 0; i < 6; ++i) buf[i] = 1000 * root + i;
      }
      b.broadcast(buf.data(), buf.size() * sizeof(int32_t), root);
      for (int i = 0; i < 6; ++i) EXPECT_EQ(buf[i], 1000 * root + i) << "root " << root;
    }
  });
}

TEST_P(BackendCollectives, AlltoallvDeliversUnevenSplits) {
  run([](Backend& b, ControlPlane& c, int) {
    const int me = b.rank();
    auto count = [](int from, int to) { return (from + to) % 3; };  // includes empty splits
    auto value = [](int from, int to, int k) { return from * 1000 + to * 10 + k; };
    std::vector<int32_t> in;
    std::vector<size_t> send_bytes;
    std::vector<int32_t> expected;
    std::vector<size_t> recv_bytes;
    for (int peer = 0; peer < b.size(); ++peer) {
      for (int k = 0; k < count(me, peer); ++k) in.push_back(value(me, peer, k));
      send_bytes.push_back(count(me, peer) * sizeof(int32_t));
      for (int k = 0; k < count(peer, me); ++k) expected.push_back(value(peer, me, k));
      recv_bytes.push_back(count(peer, me) * sizeof(int32_t));
    }
    in.push_back(0);  // keeps data() valid when this member sends nothing
    std::vector<int32_t> out(expected.size() + 1, -1);
    b.alltoallv(in.data(), send_bytes, out.data(), recv_bytes);
    out.pop_back();
    EXPECT_EQ(out, expected);
  });
}

// Large enough for the ring allreduce and the chain broadcast of the TCP
// data plane (above TcpBackend::kSmallBytes; two members exchange whole
// buffers up to kPairExchangeBytes, the ring beyond), with counts that do
// not divide among the members; float sums that depend on the order of
// addition must still leave every member with the same bits.
TEST_P(BackendCollectives, LargeBuffersReduceAndBroadcastToTheSameBits) {
  constexpr size_t kCount = (1 << 20) / 4 + 7;
  std::mutex mutex;
  std::vector<std::vector<float>> results;
  run([&](Backend& b, ControlPlane& c, int) {
    const int r = b.rank(), n = b.size();
    std::vector<float> sum;
    for (size_t count : {size_t{256 << 10} / 4 + 7, kCount}) {
      sum.assign(count, 0.0f);
      for (size_t i = 0; i < count; ++i)
        sum[i] = 1.0f / static_cast<float>(3 + (i * 7 + static_cast<size_t>(r) * 13) % 101);
      b.allreduce(sum.data(), count, DataType::kFloat32, ReduceOp::kSum);
      for (size_t i = 0; i < count; i += 997) {
        double expected = 0;
        for (int k = 0; k < n; ++k) expected += 1.0 / static_cast<double>(3 + (i * 7 + static_cast<size_t>(k) * 13) % 101);
        ASSERT_NEAR(sum[i], expected, 1e-5) << count << " elements: element " << i;
      }
    }
    std::vector<int32_t> min(kCount);
    for (size_t i = 0; i < kCount; ++i) min[i] = static_cast<int32_t>((i + static_cast<size_t>(r) * 5) % 11);
    b.allreduce(min.data(), kCount, DataType::kInt32, ReduceOp::kMin);
    for (size_t i = 0; i < kCount; ++i) {
      int32_t expected = 11;
      for (int k = 0; k < n; ++k) expected = std::min(expected, static_cast<int32_t>((i + static_cast<size_t>(k) * 5) % 11));
      ASSERT_EQ(min[i], expected) << "element " << i;
    }
    std::vector<uint8_t> bytes(3 * kCount + 1, 0);
    const int root = n - 1;
    if (r == root)
      for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<uint8_t>(i * 31 + 7);
    b.broadcast(bytes.data(), bytes.size(), root);
    for (size_t i = 0; i < bytes.size(); ++i) ASSERT_EQ(bytes[i], static_cast<uint8_t>(i * 31 + 7)) << "byte " << i;
    std::lock_guard<std::mutex> lock(mutex);
    results.push_back(std::move(sum));
  });
  for (const auto& result : results) EXPECT_EQ(std::memcmp(result.data(), results[0].data(), kCount * 4), 0);
}

TEST_P(BackendCollectives, BarrierReleasesNobodyBeforeEveryoneArrives) {
  std::atomic<int> arrived{0};
  run([&](Backend& b, ControlPlane& c, int) {
    std::this_thread::sleep_for(milliseconds(20 * b.rank()));
    arrived.fetch_add(1);
    b.barrier();
    EXPECT_EQ(arrived.load(), b.size());
  });
}

INSTANTIATE_TEST_SUITE_P(Backends, BackendCollectives,
                         ::testing::Combine(::testing::Values("local", "gloo", "tcp", "shm"),
                                            ::testing::Values(1, 2, 3, 4)),
                         param_name);

// ------------------------------------------------------------- control plane

class BackendControl : public BackendParamTest {};
// The star needs peers: sets of two or more.
class BackendStar : public BackendParamTest {};

TEST_P(BackendStar, StarMessagesArriveWithSenderAndBytes) {
  const std::vector<uint8_t> big = [] {
    std::vector<uint8_t> v(300 * 1024);  // larger than a socket buffer: partial writes
    for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<uint8_t>(i * 7 + 3);
    return v;
  }();
  run([&](Backend& b, ControlPlane& c, int) {
    const int n = b.size();
    if (b.rank() != 0) {
      auto message = c.receive(Clock::now() + kTimeout);
      ASSERT_TRUE(message.has_value());
      EXPECT_EQ(message->from, 0);
      EXPECT_EQ(text(message->bytes), "to " + std::to_string(b.rank()));
      c.send(0, bytes("from " + std::to_string(b.rank())));
      c.send(0, big);
      if (n >= 3) {  // members talk only to the coordinator
        EXPECT_THROW(c.send(b.rank() == 1 ? 2 : 1, bytes("x")), InvalidArgument);
      }
      return;
    }
    EXPECT_THROW(c.send(0, bytes("self")), InvalidArgument);
    for (int to = 1; to < n; ++to) c.send(to, bytes("to " + std::to_string(to)));
    std::map<int, int> seen;  // sender -> messages received so far
    for (int i = 0; i < 2 * (n - 1); ++i) {
      auto message = c.receive(Clock::now() + kTimeout);
      ASSERT_TRUE(message.has_value());
      ASSERT_GT(message->from, 0);
      ASSERT_LT(message->from, n);
      if (seen[message->from]++ == 0) {
        EXPECT_EQ(text(message->bytes), "from " + std::to_string(message->from));
      } else {
        EXPECT_TRUE(message->bytes == big) << "large message from " << message->from;
      }
    }
    EXPECT_EQ(seen.size(), static_cast<size_t>(n - 1));
  });
}

TEST_P(BackendControl, WakeEndsABlockedReceive) {
  run([](Backend& b, ControlPlane& c, int) {
    const auto start = Clock::now();
    std::thread waker([&] {
      std::this_thread::sleep_for(milliseconds(50));
      c.wake();
    });
    auto message = c.receive(Clock::now() + std::chrono::seconds(20));
    waker.join();
    EXPECT_FALSE(message.has_value());
    EXPECT_GE(Clock::now() - start, milliseconds(40));
    EXPECT_LT(Clock::now() - start, milliseconds(3000));
    // A wake that comes before the receive is not lost.
    c.wake();
    const auto again = Clock::now();
    EXPECT_FALSE(c.receive(Clock::now() + std::chrono::seconds(20)).has_value());
    EXPECT_LT(Clock::now() - again, milliseconds(1000));
  });
}

TEST_P(BackendControl, DeadlineExpiryReturnsNothing) {
  run([](Backend& b, ControlPlane& c, int) {
    const auto start = Clock::now();
    EXPECT_FALSE(c.receive(start + milliseconds(100)).has_value());
    EXPECT_GE(Clock::now() - start, milliseconds(100));
    EXPECT_LT(Clock::now() - start, milliseconds(2000));
    EXPECT_FALSE(c.receive(Clock::now() - milliseconds(1)).has_value());
  });
}

INSTANTIATE_TEST_SUITE_P(Backends, BackendControl,
                         ::testing::Combine(::testing::Values("local", "gloo", "tcp", "shm"),
                                            ::testing::Values(1, 2, 3, 4)),
                         param_name);
INSTANTIATE_TEST_SUITE_P(Backends, BackendStar,
                         ::testing::Combine(::testing::Values("local", "gloo", "tcp", "shm"),
                                            ::testing::Values(2, 3, 4)),
                         param_name);

// ---------------------------------------- overlapping sets and failures

class BackendSets : public ::testing::TestWithParam<std::string> {};

// Global ranks 0..3 form set A; 1 and 3 also form set B. Each of ranks 1 and
// 3 drives B from a second thread while its first thread drives A.
TEST_P(BackendSets, OverlappingSetsRunConcurrently) {
  const std::string kind = GetParam();
  auto base = make_hash_store();
  const std::vector<int> a_ranks = {0, 1, 2, 3};
  const std::vector<int> b_ranks = {1, 3};
  std::vector<std::thread> threads;
  for (int g : a_ranks) {
    threads.emplace_back([&, g] {
      try {
        auto planner = make_planner(kind);
        SetTransports a = planner->connect(a_ranks, g, make_prefix_store("A", base), kTimeout);
        SetTransports b;
        if (g % 2 == 1) b = planner->connect(b_ranks, g, make_prefix_store("B", base), kTimeout);
        std::thread side([&] {
          if (!b.backend) return;
          for (int it = 0; it < 20; ++it) {
            int64_t v = g * 100 + it;
            b.backend->allreduce(&v, 1, DataType::kInt64, ReduceOp::kSum);
            EXPECT_EQ(v, 400 + 2 * it);
            if (b.backend->rank() == 1) b.control->send(0, bytes("b" + std::to_string(it)));
            if (b.backend->rank() == 0) {
              auto m = b.control->receive(Clock::now() + kTimeout);
              ASSERT_TRUE(m.has_value());
              EXPECT_EQ(text(m->bytes), "b" + std::to_string(it));
            }
          }
          b.backend->barrier();
        });
        for (int it = 0; it < 20; ++it) {
          float v = static_cast<float>(g + it);
          a.backend->allreduce(&v, 1, DataType::kFloat32, ReduceOp::kSum);
          EXPECT_EQ(v, static_cast<float>(6 + 4 * it));
        }
        side.join();
        a.backend->barrier();
      } catch (const std::exception& e) {
        ADD_FAILURE() << kind << " global rank " << g << ": " << e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
}

TEST_P(BackendSets, DestroyedControlPeerIsReportedOnceAfterItsLastMessage) {
  const std::string kind = GetParam();
  for (int leaver : {5, 3}) {  // a member leaves, then the coordinator leaves
    const int stayer = leaver == 5 ? 3 : 5;
    MemberOptions options;
    options.final_barrier = false;
    run_members(kind, {3, 5}, make_hash_store(), [&](Backend& b, ControlPlane& c, int g) {
      b.barrier();
      if (g == leaver) {
        c.send(1 - b.rank(), bytes("goodbye"));
        return;  // destroys its transports
      }
      EXPECT_EQ(g, stayer);
      auto last = c.receive(Clock::now() + kTimeout);
      ASSERT_TRUE(last.has_value());
      EXPECT_FALSE(last->closed);
      EXPECT_EQ(text(last->bytes), "goodbye");
      auto closure = c.receive(Clock::now() + kTimeout);
      ASSERT_TRUE(closure.has_value());
      EXPECT_TRUE(closure->closed);
      EXPECT_EQ(closure->from, 1 - b.rank());
      EXPECT_TRUE(closure->bytes.empty());
      // Reported once: later receives wait for other news until the deadline.
      EXPECT_FALSE(c.receive(Clock::now() + milliseconds(100)).has_value());
    }, options);
  }
}

TEST_P(BackendSets, AbortFromAnotherThreadEndsABlockedCollectiveAtOnce) {
  const std::string kind = GetParam();
  std::promise<void> aborted;
  auto done = aborted.get_future().share();
  MemberOptions options;
  options.timeout = milliseconds(60'000);
  options.final_barrier = false;
  run_members(kind, {0, 1}, make_hash_store(), [&](Backend& b, ControlPlane& c, int g) {
    if (g == 1) {
      // Stays out of the collective until rank 0 has aborted; then its own
      // collectives fail at once instead of waiting out the timeout.
      done.wait();
      const auto start = Clock::now();
      // The barrier rank 0 had entered may still complete with what it sent
      // before it aborted (hora's TCP reads what arrived); the next fails.
      bool failed = false;
      for (int attempt = 0; attempt < 2 && !failed; ++attempt) {
        try {
          b.barrier();
        } catch (const PeerFailure&) {
          failed = true;
        }
      }
      EXPECT_TRUE(failed);
      EXPECT_LT(Clock::now() - start, options.timeout);
      auto message = c.receive(Clock::now() + kTimeout);
      ASSERT_TRUE(message.has_value());
      EXPECT_EQ(text(message->bytes), "still here");
      return;
    }
    std::thread aborter([&] {
      std::this_thread::sleep_for(milliseconds(200));
      b.abort("test abort");
    });
    float v = 1;
    const auto start = Clock::now();
    error_message<PeerFailure>([&] { b.allreduce(&v, 1, DataType::kFloat32, ReduceOp::kSum); });
    aborter.join();
    EXPECT_LT(Clock::now() - start, options.timeout);
    // Later collectives fail at once, naming the abort; the control plane works.
    const std::string again = error_message<PeerFailure>([&] { b.barrier(); });
    EXPECT_NE(again.find("test abort"), std::string::npos) << again;
    b.abort("a second abort changes nothing");
    EXPECT_NE(error_message<PeerFailure>([&] { b.barrier(); }).find("test abort"), std::string::npos);
    c.send(1, bytes("still here"));
    aborted.set_value();
  }, options);
}

TEST_P(BackendSets, CreateGivesUpWhenCancelled) {
  auto planner = make_planner(GetParam());
  std::atomic<bool> cancelled{false};
  std::thread canceller([&] {
    std::this_thread::sleep_for(milliseconds(200));
    cancelled = true;
  });
  const auto start = Clock::now();
  const milliseconds timeout(60'000);
  const std::string message = error_message<InvalidArgument>(
      [&] { planner->connect({0, 1}, 0, make_hash_store(), timeout, cancelled); });
  canceller.join();
  EXPECT_NE(message.find("cancelled"), std::string::npos) << message;
  EXPECT_LT(Clock::now() - start, timeout);
  // A member (not the coordinator) waiting for the coordinator gives up too.
  std::atomic<bool> now{true};
  EXPECT_THROW(planner->connect({0, 1}, 1, make_hash_store(), timeout, now), InvalidArgument);
}

TEST_P(BackendSets, CollectiveTimesOutWhenAMemberNeverArrives) {
  const std::string kind = GetParam();
  std::promise<void> rank0_done;
  auto done = rank0_done.get_future().share();
  MemberOptions options;
  options.timeout = milliseconds(300);
  options.final_barrier = false;
  run_members(kind, {0, 1}, make_hash_store(), [&](Backend& b, ControlPlane& c, int g) {
    if (g == 1) {
      done.wait();
      return;
    }
    const auto start = Clock::now();
    const std::string message = error_message<Timeout>([&] { b.barrier(); });
    EXPECT_GE(Clock::now() - start, milliseconds(250));
    EXPECT_LT(Clock::now() - start, milliseconds(4000));
    EXPECT_NE(message.find("[0, 1]"), std::string::npos) << message;
    // The set is broken from now on, and says so at once.
    EXPECT_THROW(b.barrier(), PeerFailure);
    rank0_done.set_value();
  }, options);
}

TEST_P(BackendSets, CollectiveFailsWhenAPeerLeaves) {
  const std::string kind = GetParam();
  MemberOptions options;
  options.final_barrier = false;
  run_members(kind, {2, 7}, make_hash_store(), [&](Backend& b, ControlPlane& c, int g) {
    b.barrier();
    if (g == 7) return;  // destroys its transports
    const auto start = Clock::now();
    float v = 1;
    const std::string message = error_message<PeerFailure>(
        [&] { b.allreduce(&v, 1, DataType::kFloat32, ReduceOp::kSum); });
    EXPECT_LT(Clock::now() - start, milliseconds(3000));
    EXPECT_NE(message.find("[2, 7]"), std::string::npos) << message;
    EXPECT_TRUE(message.find("global rank(s) [7]") != std::string::npos ||
                message.find("global rank 7 ") != std::string::npos)
        << message;
  }, options);
}

TEST_P(BackendSets, CreateTimesOutWhenAMemberNeverJoins) {
  auto planner = make_planner(GetParam());
  const auto start = Clock::now();
  EXPECT_THROW(planner->connect({0, 1}, 0, make_hash_store(), milliseconds(200)), Timeout);
  EXPECT_GE(Clock::now() - start, milliseconds(150));
  EXPECT_LT(Clock::now() - start, milliseconds(3000));
}

TEST_P(BackendSets, CreateRejectsANonMember) {
  auto planner = make_planner(GetParam());
  EXPECT_THROW(planner->connect({0, 1}, 2, make_hash_store(), kTimeout), InvalidArgument);
  EXPECT_THROW(planner->connect({1, 0}, 0, make_hash_store(), kTimeout), InvalidArgument);
}

INSTANTIATE_TEST_SUITE_P(Backends, BackendSets, ::testing::Values("local", "gloo", "tcp", "shm"),
                         [](const auto& info) { return std::string(info.param); });

}  // namespace
}  // namespace hora
