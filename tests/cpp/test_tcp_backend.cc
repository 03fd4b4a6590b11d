// hora's TCP data plane (transport/tcp/): its connections admit only the
// members their hello proves, in the range each member listens for; a
// stranger on a member's data port neither takes a member's place nor
// keeps the set from connecting. (Its collectives run in test_backends.cc
// under the "tcp" kind.)
#include <gtest/gtest.h>

#include <sys/socket.h>

#include <array>
#include <atomic>
#include <chrono>
#include <future>
#include <stdexcept>
#include <thread>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "hora/errors.h"
#include "hora/store.h"
#include "net/codec.h"
#include "net/hello.h"
#include "net/socket.h"
#include "transport/backend.h"
#include "transport/tcp/links.h"
#include "transport/tcp/tcp_backend.h"

namespace hora {
namespace {

using std::chrono::milliseconds;
constexpr milliseconds kWait(5000);

struct Stranger {
  net::Socket socket;
  net::Nonce nonce{};
};

// Connects to `set_rank`'s published data address and reads its challenge.
Stranger dial(Store& store, int set_rank) {
  const net::AddressRecord record =
      net::decode_address_record(store.get("tcp/address/" + std::to_string(set_rank), kWait));
  const auto [host, port] = net::split_address(record.address);
  net::ConnectOptions options;
  options.deadline = net::Clock::now() + kWait;
  Stranger stranger{net::connect_to(host, port, "a member", options)};
  std::array<uint8_t, net::kChallengeBytes> challenge;
  stranger.socket.recv_exact(challenge.data(), challenge.size(), net::Clock::now() + kWait, "a member");
  stranger.nonce = net::decode_challenge(challenge);
  return stranger;
}

// Whether the member closes `socket` within kWait.
bool dropped(net::Socket& socket) {
  uint8_t byte;
  try {
    socket.recv_exact(&byte, 1, net::Clock::now() + kWait, "a member");
  } catch (const PeerFailure&) {
    return true;
  } catch (const Timeout&) {
  }
  return false;
}

TEST(TcpDataPlane, StrangersOnADataPortAreDroppedAndTheSetConnects) {
  const std::vector<int> ranks = {0, 3, 5};
  auto store = make_hash_store();
  auto factory = make_tcp_backend_factory(TcpOptions{});
  auto first = std::async(std::launch::async, [&] { return factory->create(ranks, 0, store, kWait); });

  const std::string context = describe_set(ranks) + " tcp data";
  // A forged mac, a member's answer with the control channel's context, and
  // set rank 0 (the listener's own: nobody below it connects to it).
  Stranger forged = dial(*store, 0);
  std::vector<uint8_t> wrong(net::kAnswerBytes, 0x5a);
  net::store_u32_le(wrong.data(), net::kAnswerMagic);
  net::store_u32_le(wrong.data() + 4, 1);
  forged.socket.send_all(wrong, net::Clock::now() + kWait, "a member");
  EXPECT_TRUE(dropped(forged.socket));

  const net::AddressRecord record = net::decode_address_record(store->get("tcp/address/0", kWait));
  Stranger replayed = dial(*store, 0);
  replayed.socket.send_all(net::encode_answer(record.key, describe_set(ranks), 1, replayed.nonce),
                           net::Clock::now() + kWait, "a member");
  EXPECT_TRUE(dropped(replayed.socket));
  Stranger itself = dial(*store, 0);
  itself.socket.send_all(net::encode_answer(record.key, context, 0, itself.nonce), net::Clock::now() + kWait,
                         "a member");
  EXPECT_TRUE(dropped(itself.socket));

  auto second = std::async(std::launch::async, [&] { return factory->create(ranks, 3, store, kWait); });
  auto third = std::async(std::launch::async, [&] { return factory->create(ranks, 5, store, kWait); });
  std::vector<std::unique_ptr<Backend>> backends;
  backends.push_back(first.get());
  backends.push_back(second.get());
  backends.push_back(third.get());
  std::vector<std::future<float>> sums;
  for (auto& backend : backends) {
    sums.push_back(std::async(std::launch::async, [&backend] {
      float value = static_cast<float>(backend->rank() + 1);
      backend->allreduce(&value, 1, DataType::kFloat32, ReduceOp::kSum);
      return value;
    }));
  }
  for (auto& sum : sums) EXPECT_EQ(sum.get(), 6.0f);
}

TEST(TcpDataPlane, AMemberThatNeverPublishesIsNamedAtTheTimeout) {
  auto store = make_hash_store();
  auto factory = make_tcp_backend_factory(TcpOptions{});
  try {
    factory->create({2, 4}, 4, store, milliseconds(300));
    FAIL() << "connected without its peer";
  } catch (const Timeout& e) {
    EXPECT_NE(std::string(e.what()).find("global rank 2 did not publish its data address"), std::string::npos)
        << e.what();
  }
}

TEST(TcpDataPlane, AJoinerWaitingForAChallengeGivesUpWhenCancelled) {
  // Global rank 0's address leads to a listener that never admits anyone:
  // the joiner's connection is accepted by the kernel and gets no challenge.
  auto store = make_hash_store();
  net::Listener silent("127.0.0.1");
  store->set("tcp/address/0", net::encode_address_record({net::HelloKey{}, silent.address()}));
  auto factory = make_tcp_backend_factory(TcpOptions{});
  std::atomic<bool> cancelled{false};
  const auto start = std::chrono::steady_clock::now();
  std::thread canceller([&] {
    std::this_thread::sleep_for(milliseconds(100));
    cancelled = true;
  });
  EXPECT_THROW(factory->create({0, 1}, 1, store, milliseconds(30'000), cancelled), InvalidArgument);
  canceller.join();
  EXPECT_LT(std::chrono::steady_clock::now() - start, milliseconds(5000));
}

// Two members' links over a socket pair: rank 0 here, rank 1 played by the
// test writing raw bytes into the other end.
struct LinkedPair {
  tcp_transport::Links links;
  net::Socket far;

  static LinkedPair make(milliseconds timeout) {
    int fds[2];
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, fds) != 0) throw std::runtime_error("socketpair");
    std::vector<net::Socket> sockets(2);
    sockets[1] = net::Socket(fds[0]);
    tcp_transport::Waiting waiting;
    waiting.timeout = timeout;
    return LinkedPair{tcp_transport::Links({4, 9}, 0, std::move(sockets), waiting), net::Socket(fds[1])};
  }
  void send_far(size_t bytes) {
    std::vector<uint8_t> data(bytes, 7);
    far.send_all(data, net::Clock::now() + kWait, "the test");
  }
};

TEST(TcpDataPlane, ARoundLastsAsLongAsBytesKeepMoving) {
  auto pair = LinkedPair::make(milliseconds(300));
  std::thread slow_peer([&] {
    for (int piece = 0; piece < 4; ++piece) {
      std::this_thread::sleep_for(milliseconds(150));
      pair.send_far(100);
    }
  });
  std::vector<uint8_t> into(400);
  tcp_transport::Move receive[] = {tcp_transport::Move::from(1, into.data(), into.size())};
  EXPECT_NO_THROW(pair.links.run(receive, "broadcast"));  // 600 ms in all, never 300 ms without a byte
  slow_peer.join();

  tcp_transport::Move stalled[] = {tcp_transport::Move::from(1, into.data(), into.size())};
  try {
    pair.links.run(stalled, "broadcast");
    FAIL() << "a round without a byte ended";
  } catch (const Timeout& e) {
    EXPECT_NE(std::string(e.what()).find("no byte moved for 300 ms"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("receiving from global rank 9"), std::string::npos) << e.what();
  }
}

TEST(TcpDataPlane, AReductionThatThrowsMidRoundGivesTheLinksUp) {
  auto pair = LinkedPair::make(milliseconds(5000));
  pair.send_far(64);
  std::vector<uint8_t> into(64);
  tcp_transport::Move receive[] = {tcp_transport::Move::from(1, into.data(), into.size())};
  receive[0].arrived = [](void*, size_t) { throw std::runtime_error("no kernel for this op"); };
  EXPECT_THROW(pair.links.run(receive, "allreduce"), std::runtime_error);
  // The stream is out of step with the peer now: nothing may use it.
  tcp_transport::Move again[] = {tcp_transport::Move::from(1, into.data(), into.size())};
  try {
    pair.links.run(again, "allreduce");
    FAIL() << "the links were used after a round failed";
  } catch (const PeerFailure& e) {
    EXPECT_NE(std::string(e.what()).find("no kernel for this op"), std::string::npos) << e.what();
  }
}

// Two members exchange their buffers and reduce what arrives into their
// own, which they are still sending: bytes of the peer's that arrive before
// this member's own have left (the peer started first; this member's send
// buffer is full) must not be reduced into what is still to go. Set rank 1
// here runs the backend over a socket pair with a small send buffer; the
// test plays set rank 0, writing its whole input before it reads anything.
TEST(TcpDataPlane, AnExchangeSendsTheMembersOwnBytesEvenWhenThePeersArriveFirst) {
  for (const size_t count : {size_t{4096}, size_t{65536}, size_t{200000}}) {
    int fds[2];
    ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, fds), 0);
    const int small = 4096;
    ASSERT_EQ(setsockopt(fds[0], SOL_SOCKET, SO_SNDBUF, &small, sizeof small), 0);
    std::vector<net::Socket> sockets(2);
    sockets[0] = net::Socket(fds[0]);
    net::Socket far(fds[1]);
    tcp_transport::Waiting waiting;
    waiting.timeout = milliseconds(10'000);
    tcp_transport::TcpBackend member({4, 9}, 1, std::move(sockets), waiting);

    std::vector<float> theirs(count, 2.0f), mine(count, 1.0f), received(count, 0.0f);
    std::thread peer([&] {
      far.send_all(std::span(reinterpret_cast<const uint8_t*>(theirs.data()), count * sizeof(float)),
                   net::Clock::now() + kWait, "the test");
    });
    std::thread reduce([&] { member.allreduce(mine.data(), count, DataType::kFloat32, ReduceOp::kSum); });
    std::this_thread::sleep_for(milliseconds(100));  // everything of set rank 0's arrives first
    far.recv_exact(reinterpret_cast<uint8_t*>(received.data()), count * sizeof(float), net::Clock::now() + kWait,
                   "the test");
    peer.join();
    reduce.join();
    size_t sums_sent = 0;
    for (float value : received) sums_sent += value != 1.0f;
    EXPECT_EQ(sums_sent, 0u) << count << " floats: set rank 1 sent sums instead of its input";
    EXPECT_EQ(mine, std::vector<float>(count, 3.0f)) << count << " floats";
  }
}

}  // namespace
}  // namespace hora
