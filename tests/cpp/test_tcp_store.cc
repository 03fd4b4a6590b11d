// The TCP store client against the rendezvous server (src/store/
// tcp_store_server.cc), which horarun runs for each job and an MPI job's
// rank 0 runs inside its process: what a rank's store does.

#include <atomic>
#include <chrono>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "hora/errors.h"
#include "hora/store.h"
#include "net/hmac.h"
#include "net/socket.h"
#include "store/store_protocol.h"
#include "store/tcp_store.h"
#include "store/tcp_store_server.h"
#include "store_clients.h"

namespace hora {
namespace {

using namespace store_test;

TEST_F(TcpStoreTest, GetReturnsTheBytesLastSet) {
  auto store = connect();
  const std::vector<uint8_t> binary = {0, 1, 0xff, 0, 42};
  store->set("binary", binary);
  store->set("empty", {});
  store->set("twice", bytes_of("first"));
  store->set("twice", bytes_of("second"));
  EXPECT_EQ(store->get("binary", milliseconds(1000)), binary);
  EXPECT_TRUE(store->get("empty", milliseconds(1000)).empty());
  EXPECT_EQ(store->get("twice", milliseconds(1000)), bytes_of("second"));
  // A second client of the same job sees the same data.
  EXPECT_EQ(connect()->get("binary", milliseconds(1000)), binary);
}

TEST_F(TcpStoreTest, PostedValuesAreSeenByEveryClientAndKeepTheirOrder) {
  auto store = connect();
  auto other = connect();
  // Many posts on one connection, then calls: each call reads the replies
  // owed before its own.
  for (int i = 0; i < 100; ++i) store->post("posted." + std::to_string(i), bytes_of(std::to_string(i)));
  store->post("twice", bytes_of("first"));
  store->post("twice", bytes_of("second"));
  EXPECT_EQ(store->add("counter", 5), 5);
  EXPECT_EQ(store->get("twice", milliseconds(1000)), bytes_of("second"));
  for (int i = 0; i < 100; i += 33)
    EXPECT_EQ(other->get("posted." + std::to_string(i), milliseconds(1000)), bytes_of(std::to_string(i)));
  // A post another client waits for.
  std::thread poster([&] {
    std::this_thread::sleep_for(milliseconds(50));
    store->post("late", bytes_of("here"));
  });
  other->wait({"late"}, milliseconds(5000));
  poster.join();
  EXPECT_EQ(other->get("late", milliseconds(0)), bytes_of("here"));
}

TEST_F(TcpStoreTest, APostWithoutTheSecretFailsAtOnce) {
  auto store = connect("not-the-job-secret");
  try {
    store->post("k", bytes_of("v"));  // the handshake comes before the post
    FAIL() << "a post without the secret was accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("secret"), std::string::npos) << e.what();
  }
  EXPECT_THROW(store->post(std::string(5000, 'k'), bytes_of("v")), InvalidArgument);
  EXPECT_THROW(connect()->post("k", std::vector<uint8_t>(65 << 20)), InvalidArgument);
  EXPECT_THROW(connect()->get("k", milliseconds(0)), Timeout);  // nothing was stored
}

TEST_F(TcpStoreTest, PrefixStoresPostUnderTheirPrefix) {
  auto store = connect();
  make_prefix_store("set.7", store)->post("presence/3", bytes_of("1"));
  EXPECT_EQ(connect()->get("set.7/presence/3", milliseconds(1000)), bytes_of("1"));
}

TEST_F(TcpStoreTest, LargeValuesRoundTrip) {
  auto store = connect();
  std::vector<uint8_t> big(8 << 20);
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<uint8_t>(i * 131);
  store->set("big", big);
  EXPECT_EQ(store->get("big", milliseconds(5000)), big);
}

TEST_F(TcpStoreTest, GetBlocksUntilAnotherClientSets) {
  auto reader = connect();
  auto writer = connect();
  const auto start = Clock::now();
  std::thread later([&] {
    std::this_thread::sleep_for(milliseconds(300));
    writer->set("late", bytes_of("here"));
  });
  EXPECT_EQ(reader->get("late", milliseconds(10000)), bytes_of("here"));
  later.join();
  EXPECT_GE(seconds_since(start), 0.25);
  EXPECT_LT(seconds_since(start), 5.0);
}

TEST_F(TcpStoreTest, BlockingGetDoesNotHoldUpOtherThreadsOfTheSameStore) {
  // The process sets of one rank rendezvous on their own threads through one
  // store: a get waiting for a peer must not stop this rank's own set().
  auto store = connect();
  std::thread waiting([&] { EXPECT_EQ(store->get("ping", milliseconds(10000)), bytes_of("1")); });
  std::this_thread::sleep_for(milliseconds(100));
  const auto start = Clock::now();
  store->set("unrelated", bytes_of("x"));
  EXPECT_EQ(store->get("unrelated", milliseconds(1000)), bytes_of("x"));
  EXPECT_LT(seconds_since(start), 2.0);
  store->set("ping", bytes_of("1"));
  waiting.join();
}

TEST_F(TcpStoreTest, GetTimesOutNamingTheKey) {
  auto store = connect();
  const auto start = Clock::now();
  try {
    store->get("never-set", milliseconds(300));
    FAIL() << "get of a missing key returned";
  } catch (const Timeout& e) {
    EXPECT_NE(std::string(e.what()).find("'never-set'"), std::string::npos) << e.what();
  }
  EXPECT_GE(seconds_since(start), 0.29);
  EXPECT_LT(seconds_since(start), 5.0);
  // The connection stays usable after a timeout.
  store->set("after", bytes_of("ok"));
  EXPECT_EQ(store->get("after", milliseconds(1000)), bytes_of("ok"));
}

TEST_F(TcpStoreTest, AddCountsFromZeroAndAcceptsNegativeDeltas) {
  auto store = connect();
  EXPECT_EQ(store->add("counter", 5), 5);
  EXPECT_EQ(store->add("counter", -7), -2);
  EXPECT_EQ(store->add("counter", 0), -2);
  // Counters are stored as decimal text.
  EXPECT_EQ(store->get("counter", milliseconds(1000)), bytes_of("-2"));
}

TEST_F(TcpStoreTest, AddIsAtomicAcrossClients) {
  constexpr int kClients = 4, kAddsEach = 50;
  std::vector<std::vector<int64_t>> seen(kClients);
  std::vector<std::thread> threads;
  for (int c = 0; c < kClients; ++c) {
    threads.emplace_back([&, c] {
      auto store = connect();
      for (int i = 0; i < kAddsEach; ++i) seen[c].push_back(store->add("shared", 1));
    });
  }
  for (auto& t : threads) t.join();
  std::set<int64_t> all;
  for (const auto& values : seen) all.insert(values.begin(), values.end());
  // Every add returned a distinct value: 1..200 exactly once each.
  ASSERT_EQ(all.size(), size_t{kClients * kAddsEach});
  EXPECT_EQ(*all.begin(), 1);
  EXPECT_EQ(*all.rbegin(), kClients * kAddsEach);
  EXPECT_EQ(connect()->add("shared", 0), kClients * kAddsEach);
}

TEST_F(TcpStoreTest, WaitReturnsOnceEveryKeyIsSet) {
  auto waiter = connect();
  auto writer = connect();
  std::thread later([&] {
    writer->set("a", bytes_of("1"));
    std::this_thread::sleep_for(milliseconds(200));
    writer->set("b", bytes_of("2"));
  });
  const auto start = Clock::now();
  waiter->wait({"a", "b"}, milliseconds(10000));
  later.join();
  EXPECT_GE(seconds_since(start), 0.15);
  waiter->wait({}, milliseconds(0));   // nothing to wait for
}

TEST_F(TcpStoreTest, WaitTimesOutNamingOnlyTheMissingKeys) {
  auto store = connect();
  store->set("present", bytes_of("x"));
  try {
    store->wait({"present", "absent"}, milliseconds(200));
    FAIL() << "wait for a missing key returned";
  } catch (const Timeout& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("'absent'"), std::string::npos) << message;
    EXPECT_EQ(message.find("'present'"), std::string::npos) << message;
  }
}

TEST_F(TcpStoreTest, WrongSecretIsAClearError) {
  auto store = connect("not-the-job-secret");
  try {
    store->set("k", bytes_of("v"));
    FAIL() << "the server accepted a wrong secret";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("secret"), std::string::npos) << e.what();
  }
  // The server still serves clients that know the secret.
  auto good = connect();
  good->set("k", bytes_of("v"));
  EXPECT_EQ(good->get("k", milliseconds(1000)), bytes_of("v"));
}

TEST_F(TcpStoreTest, MalformedFramesAreRefusedAndClosedWhileOthersAreServed) {
  using store_protocol::Status;
  auto good = connect();
  good->set("before", bytes_of("1"));
  const std::vector<uint8_t> set_frame = store_protocol::encode_request({store_protocol::Command::kSet, 0, {"k"}, {'v'}});
  const std::vector<uint8_t> payload(set_frame.begin() + 4, set_frame.end());
  struct Case {
    std::string name;
    std::vector<uint8_t> frame;
    Status status;
  };
  std::vector<uint8_t> unknown_command = payload, truncated(payload.begin(), payload.end() - 1);
  unknown_command[1] = 99;
  const std::vector<Case> cases = {
      {"garbage", framed(std::vector<uint8_t>(40, 0xde)), Status::kBadRequest},
      {"empty payload", framed({}), Status::kBadRequest},
      {"unknown command", framed(unknown_command), Status::kBadRequest},
      {"truncated", framed(truncated), Status::kBadRequest},
      {"oversized frame", {0xff, 0xff, 0xff, 0x7f}, Status::kBadRequest},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    RawConnection raw(port());
    ASSERT_EQ(raw.handshake(kSecret), Status::kOk);
    raw.send(c.frame);
    const store_protocol::Reply reply = raw.refusal_then_close();
    EXPECT_EQ(reply.status, c.status) << std::string(reply.value.begin(), reply.value.end());
    EXPECT_FALSE(reply.value.empty());
  }
  {
    RawConnection half(port());
    ASSERT_EQ(half.handshake(kSecret), Status::kOk);
    half.send({0x10, 0x00});  // half a length prefix, then gone
  }
  // Nothing was stored, and the client that was connected all along, and a
  // new one, are still served.
  EXPECT_THROW(good->get("k", milliseconds(0)), Timeout);
  EXPECT_EQ(good->get("before", milliseconds(1000)), bytes_of("1"));
  EXPECT_EQ(connect()->get("before", milliseconds(1000)), bytes_of("1"));
}

TEST_F(TcpStoreTest, PostedValuesReachTheServerWhenTheStoreClosesAtOnce) {
  {
    auto store = connect();
    for (int i = 0; i < 200; ++i) store->post("posted/" + std::to_string(i), bytes_of(std::to_string(i)));
  }  // closed with replies owed
  auto reader = connect();
  for (int i = 0; i < 200; ++i) {
    EXPECT_EQ(reader->get("posted/" + std::to_string(i), milliseconds(0)), bytes_of(std::to_string(i)));
  }
}

TEST_F(TcpStoreTest, AnAddThatWouldOverflowIsRefusedAndChangesNothing) {
  auto store = connect();
  EXPECT_EQ(store->add("counter", INT64_MAX), INT64_MAX);
  try {
    store->add("counter", 1);
    ADD_FAILURE() << "the overflowing ADD was accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("overflows a 64-bit integer"), std::string::npos) << e.what();
  }
  EXPECT_EQ(connect()->get("counter", milliseconds(1000)), bytes_of(std::to_string(INT64_MAX)));
  EXPECT_EQ(connect()->add("counter", -1), INT64_MAX - 1);
}

TEST_F(TcpStoreTest, OversizedKeysAndValuesAreRefusedBeforeSending) {
  auto store = connect();
  EXPECT_THROW(store->set(std::string(5000, 'k'), bytes_of("v")), InvalidArgument);
  EXPECT_THROW(store->get(std::string(5000, 'k'), milliseconds(10)), InvalidArgument);
  EXPECT_THROW(store->wait(std::vector<std::string>(5000, "k"), milliseconds(10)), InvalidArgument);
  store->set(std::string(4096, 'k'), bytes_of("limit"));
  EXPECT_EQ(store->get(std::string(4096, 'k'), milliseconds(1000)), bytes_of("limit"));
}

TEST_F(TcpStoreTest, InvalidArgumentsAreRefused) {
  EXPECT_THROW(make_tcp_store("", 1234, kSecret), InvalidArgument);
  EXPECT_THROW(make_tcp_store("127.0.0.1", 0, kSecret), InvalidArgument);
  EXPECT_THROW(make_tcp_store("127.0.0.1", 70000, kSecret), InvalidArgument);
  EXPECT_THROW(make_tcp_store("127.0.0.1", 1234, ""), InvalidArgument);
}

TEST(TcpStoreReconnectTest, ReconnectsWhenTheServerRestarts) {
  auto first = std::make_unique<TcpStoreServer>("127.0.0.1", kSecret);
  const int port = first->port();
  auto store = make_tcp_store("127.0.0.1", port, kSecret);
  store->set("before", bytes_of("1"));
  first.reset();   // the connection the store holds is now dead
  TcpStoreServer second("127.0.0.1", kSecret, port);
  store->set("after", bytes_of("2"));
  EXPECT_EQ(store->get("after", milliseconds(1000)), bytes_of("2"));
}

TEST(TcpStoreReconnectTest, UnreachableServerTimesOut) {
  auto store = make_tcp_store("127.0.0.1", unused_port(), kSecret);
  const auto start = Clock::now();
  EXPECT_THROW(store->get("k", milliseconds(1500)), Timeout);
  EXPECT_GE(seconds_since(start), 1.0);
  EXPECT_LT(seconds_since(start), 10.0);
}

// The client Python uses (hora.runner.rendezvous.RendezvousClient).

TEST_F(TcpStoreTest, AConnectedClientHasPassedTheHandshakeWhenItIsReturned) {
  auto store = connect_tcp_store("127.0.0.1", port(), kSecret, milliseconds(5000));
  store->ping();
  store->set("k", bytes_of("v"));
  EXPECT_EQ(store->get("k", milliseconds(1000)), bytes_of("v"));
  EXPECT_THROW(connect_tcp_store("127.0.0.1", port(), "not-the-job-secret", milliseconds(5000)), SecretRefused);
}

TEST_F(TcpStoreTest, AConnectedClientTellsTheServersRefusalsApart) {
  auto store = connect_tcp_store("127.0.0.1", port(), kSecret, milliseconds(5000));
  store->add("max", INT64_MAX);
  EXPECT_THROW(store->add("max", 1), RequestRefused);
  EXPECT_THROW(store->get("never", milliseconds(0)), Timeout);
}

TEST(TcpStoreConnectTest, AConnectedClientFailsAtOnceWhenTheServerGoesAway) {
  auto server = std::make_unique<TcpStoreServer>("127.0.0.1", kSecret);
  const int port = server->port();
  auto store = connect_tcp_store("127.0.0.1", port, kSecret, milliseconds(5000));
  store->set("before", bytes_of("1"));
  std::thread stopper([&] {
    std::this_thread::sleep_for(milliseconds(100));
    server.reset();
  });
  const auto start = Clock::now();
  EXPECT_THROW(store->get("never", milliseconds(60000)), Error);   // the stopping server ends the wait
  stopper.join();
  // The connection is gone: the next call fails at once instead of trying
  // to reconnect for the 30 s the runtime's stores give it.
  EXPECT_THROW(store->set("after", bytes_of("2")), PeerFailure);
  EXPECT_LT(seconds_since(start), 5.0);
}

TEST(TcpStoreConnectTest, AnUnreachableServerTimesOutWhileConnecting) {
  const auto start = Clock::now();
  EXPECT_THROW(connect_tcp_store("127.0.0.1", unused_port(), kSecret, milliseconds(1000)), Timeout);
  EXPECT_LT(seconds_since(start), 10.0);
}

}  // namespace
}  // namespace hora
