// The TCP store client against the rendezvous server (src/store/
// tcp_store_server.cc), which horarun runs for each job and an MPI job's
// rank 0 runs inside its process.

#include <dirent.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

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
#include "store/tcp_store_server.h"


namespace hora {
namespace {

using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

const char* const kSecret = "test-secret-0123456789abcdef";

std::vector<uint8_t> bytes_of(const std::string& s) { return {s.begin(), s.end()}; }

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// A port on which nothing listens (bound, read, released).
int unused_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address);
  socklen_t len = sizeof address;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &len);
  ::close(fd);
  return ntohs(address.sin_port);
}

// A client that speaks raw bytes to a server, as a broken or hostile one
// would.
class RawConnection {
 public:
  explicit RawConnection(int port) : fd_(::socket(AF_INET, SOCK_STREAM, 0)) {
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_port = htons(static_cast<uint16_t>(port));
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::connect(fd_, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0) {
      throw std::runtime_error("cannot connect to the rendezvous server");
    }
    timeval timeout{10, 0};  // a server that never answers fails the test instead of hanging it
    ::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
  }
  ~RawConnection() { ::close(fd_); }
  void send(const std::vector<uint8_t>& bytes) {
    ASSERT_EQ(::send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL), static_cast<ssize_t>(bytes.size()));
  }
  // Reads the server's challenge and answers it with a proof of `secret`;
  // returns the status of the server's answer.
  store_protocol::Status handshake(const std::string& secret) {
    const std::vector<uint8_t> challenge = read(store_protocol::kChallengeBytes);
    const net::Nonce server_nonce = store_protocol::decode_challenge(challenge);
    const net::Nonce client_nonce = net::random_nonce();
    const auto proof = store_protocol::encode_proof(secret, server_nonce, client_nonce);
    send({proof.begin(), proof.end()});
    const std::vector<uint8_t> answer = read(store_protocol::kAnswerBytes);
    return store_protocol::check_answer(answer, secret, server_nonce, client_nonce);
  }
  // Whether the server closes the connection within `timeout` (instead of
  // sending anything or leaving it open).
  bool closed_within(std::chrono::milliseconds timeout) {
    pollfd p{fd_, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(timeout.count())) <= 0) return false;
    uint8_t byte = 0;
    return ::recv(fd_, &byte, 1, MSG_DONTWAIT) == 0;
  }
  // The next reply frame, decoded; then the server must close.
  store_protocol::Reply refusal_then_close() {
    std::vector<uint8_t> header = read(4);
    const uint32_t length = uint32_t{header[0]} | uint32_t{header[1]} << 8 | uint32_t{header[2]} << 16 |
                            uint32_t{header[3]} << 24;
    store_protocol::Reply reply = store_protocol::decode_reply(read(length));
    uint8_t extra = 0;
    EXPECT_EQ(::recv(fd_, &extra, 1, 0), 0) << "the server did not close the connection";
    return reply;
  }
  std::vector<uint8_t> read(size_t n) {
    std::vector<uint8_t> out(n);
    for (size_t got = 0; got < n;) {
      const ssize_t r = ::recv(fd_, out.data() + got, n - got, 0);
      if (r <= 0) throw std::runtime_error("the server closed or timed out before replying");
      got += static_cast<size_t>(r);
    }
    return out;
  }

 private:
  int fd_;
};

std::vector<uint8_t> framed(const std::vector<uint8_t>& payload) {
  std::vector<uint8_t> frame(4);
  for (int i = 0; i < 4; ++i) frame[i] = static_cast<uint8_t>(payload.size() >> (8 * i));
  frame.insert(frame.end(), payload.begin(), payload.end());
  return frame;
}

class TcpStoreTest : public ::testing::Test {
 protected:
  int port() const { return server_.port(); }
  std::shared_ptr<Store> connect(const std::string& secret = kSecret) {
    return make_tcp_store("127.0.0.1", port(), secret);
  }
  TcpStoreServer server_{"127.0.0.1", kSecret};
};

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

TEST_F(TcpStoreTest, AClientWithoutTheSecretIsRefusedAtTheHandshake) {
  RawConnection raw(port());
  EXPECT_EQ(raw.handshake("not-the-job-secret"), store_protocol::Status::kBadSecret);
  EXPECT_TRUE(raw.closed_within(milliseconds(5000)));
  // A proof made for another connection's challenge is refused too.
  RawConnection first(port()), second(port());
  const net::Nonce first_nonce = store_protocol::decode_challenge(first.read(store_protocol::kChallengeBytes));
  second.read(store_protocol::kChallengeBytes);
  const auto proof = store_protocol::encode_proof(kSecret, first_nonce, net::random_nonce());
  second.send({proof.begin(), proof.end()});
  EXPECT_EQ(second.read(store_protocol::kAnswerBytes)[0], static_cast<uint8_t>(store_protocol::Status::kBadSecret));
  EXPECT_TRUE(second.closed_within(milliseconds(5000)));
}

// A client that holds the secret is served.
void expect_serving(int port) {
  auto store = make_tcp_store("127.0.0.1", port, kSecret);
  store->set("serving", bytes_of("yes"));
  EXPECT_EQ(store->get("serving", milliseconds(1000)), bytes_of("yes"));
}

// `n` connections to the server at `port`, each past its challenge, and
// past the handshake too when `secret` is given.
std::vector<std::unique_ptr<RawConnection>> open_connections(int port, int n, const char* secret = nullptr) {
  std::vector<std::unique_ptr<RawConnection>> connections;
  for (int i = 0; i < n; ++i) {
    connections.push_back(std::make_unique<RawConnection>(port));
    if (secret) {
      EXPECT_EQ(connections.back()->handshake(secret), store_protocol::Status::kOk);
    } else {
      connections.back()->read(store_protocol::kChallengeBytes);
    }
  }
  return connections;
}

// Resident memory of this process (the server runs in it), in bytes.
size_t resident_bytes() {
  FILE* statm = std::fopen("/proc/self/statm", "r");
  unsigned long size = 0, resident = 0;
  if (statm == nullptr || std::fscanf(statm, "%lu %lu", &size, &resident) != 2) ADD_FAILURE() << "no /proc/self/statm";
  if (statm) std::fclose(statm);
  return resident * static_cast<size_t>(sysconf(_SC_PAGESIZE));
}

size_t thread_count() {
  size_t n = 0;
  DIR* dir = opendir("/proc/self/task");
  while (dirent* entry = dir ? readdir(dir) : nullptr) n += entry->d_name[0] != '.';
  if (dir) closedir(dir);
  return n;
}

TEST_F(TcpStoreTest, FramesOfTheLargestSizeFromClientsWithoutTheSecretCostNoMemory) {
  const size_t before = resident_bytes();
  std::vector<std::unique_ptr<RawConnection>> clients;
  for (int i = 0; i < 8; ++i) {
    clients.push_back(std::make_unique<RawConnection>(port()));
    // A frame header announcing the largest payload, and its first byte.
    const uint32_t length = static_cast<uint32_t>(store_protocol::kMaxFrameBytes);
    clients.back()->send({static_cast<uint8_t>(length), static_cast<uint8_t>(length >> 8),
                          static_cast<uint8_t>(length >> 16), static_cast<uint8_t>(length >> 24), 0});
  }
  std::this_thread::sleep_for(milliseconds(300));
  EXPECT_LT(resident_bytes(), before + (size_t{1} << 20));
  expect_serving(port());
}

TEST(TcpStoreServerTest, IdleConnectionsCostNoThreadAndAreClosedAfterTheHandshakeDeadline) {
  // Both ends of 1,000 connections live in this process.
  rlimit files{};
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &files), 0);
  if (files.rlim_cur < 2200 && files.rlim_max >= 2200) {
    files.rlim_cur = 2200;
    ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &files), 0);
  }
  StoreServerLimits limits;
  limits.handshake_timeout = milliseconds(1000);
  TcpStoreServer server("127.0.0.1", kSecret, 0, limits);
  const size_t threads = thread_count();
  // Each is sent the challenge, and then closed for saying nothing.
  auto idle = open_connections(server.port(), 1000);
  EXPECT_LE(thread_count(), threads);
  for (auto& connection : idle) EXPECT_TRUE(connection->closed_within(milliseconds(10000)));
  expect_serving(server.port());
}

TEST(TcpStoreServerTest, AClientThatStallsInsideAFrameIsDropped) {
  StoreServerLimits limits;
  limits.frame_timeout = milliseconds(300);
  TcpStoreServer server("127.0.0.1", kSecret, 0, limits);
  RawConnection stalled(server.port()), after_length(server.port()), idle(server.port());
  ASSERT_EQ(stalled.handshake(kSecret), store_protocol::Status::kOk);
  ASSERT_EQ(after_length.handshake(kSecret), store_protocol::Status::kOk);
  ASSERT_EQ(idle.handshake(kSecret), store_protocol::Status::kOk);
  stalled.send({0x10, 0x00});  // half a length prefix
  after_length.send({0x00, 0x00, 0x00, 0x04});  // a whole length of 64 MiB, then nothing
  EXPECT_TRUE(stalled.closed_within(milliseconds(5000)));
  EXPECT_TRUE(after_length.closed_within(milliseconds(5000)));
  // An authenticated client between requests may stay as long as it likes.
  EXPECT_FALSE(idle.closed_within(milliseconds(500)));
}

TEST(TcpStoreServerTest, AtTheLimitANewcomerTakesThePlaceOfAConnectionThatHasNotProvedTheSecret) {
  StoreServerLimits limits;
  limits.max_connections = 3;
  TcpStoreServer server("127.0.0.1", kSecret, 0, limits);
  auto strangers = open_connections(server.port(), 3);
  testing::internal::CaptureStderr();
  // A rank of the job still gets in, in place of the oldest stranger.
  expect_serving(server.port());
  const std::string warning = testing::internal::GetCapturedStderr();
  EXPECT_NE(warning.find("3 connections are open, its limit; closing the oldest that has not proved the secret"),
            std::string::npos)
      << warning;
  EXPECT_TRUE(strangers[0]->closed_within(milliseconds(5000)));
}

TEST(TcpStoreServerTest, AtTheLimitWithEveryConnectionProvenNewOnesAreClosedWithAWarning) {
  StoreServerLimits limits;
  limits.max_connections = 2;
  TcpStoreServer server("127.0.0.1", kSecret, 0, limits);
  auto ranks = open_connections(server.port(), 2, kSecret);
  testing::internal::CaptureStderr();
  RawConnection extra(server.port());
  const bool closed = extra.closed_within(milliseconds(5000));
  const std::string warning = testing::internal::GetCapturedStderr();
  EXPECT_TRUE(closed);
  EXPECT_NE(warning.find("2 connections are open, its limit, and all have proved the secret"), std::string::npos)
      << warning;
  // A client keeps trying until a place is free.
  std::thread later([&] {
    std::this_thread::sleep_for(milliseconds(300));
    ranks.clear();
  });
  expect_serving(server.port());
  later.join();
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

TEST(TcpStoreServerTest, AServerThatCannotProveTheSecretIsRefusedByTheClient) {
  // An impostor: it sends a challenge and claims to accept any proof.
  net::Listener listener("127.0.0.1");
  std::thread impostor([&] {
    net::Socket socket = listener.accept(Clock::now() + std::chrono::seconds(10));
    if (!socket.valid()) return;
    const auto challenge = store_protocol::encode_challenge(net::random_nonce());
    std::vector<uint8_t> proof(store_protocol::kProofBytes);
    try {
      socket.send_all(challenge, Clock::now() + std::chrono::seconds(5), "test client");
      socket.recv_exact(proof.data(), proof.size(), Clock::now() + std::chrono::seconds(5), "test client");
      std::vector<uint8_t> answer(store_protocol::kAnswerBytes, 0x5a);
      answer[0] = 0;  // OK, with a proof that is not one
      socket.send_all(answer, Clock::now() + std::chrono::seconds(5), "test client");
      uint8_t byte;
      socket.recv_exact(&byte, 1, Clock::now() + std::chrono::seconds(5), "test client");
    } catch (const Error&) {
    }
  });
  auto store = make_tcp_store("127.0.0.1", listener.port(), kSecret);
  try {
    store->set("k", bytes_of("v"));
    ADD_FAILURE() << "the client trusted a server without the secret";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("could not prove that it holds the job secret"), std::string::npos)
        << e.what();
  }
  impostor.join();
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

#if !defined(__SANITIZE_THREAD__)
// The server runs in a child process as an unprivileged user whose thread
// limit is nearly reached: a server that started a thread per connection
// would fail to, and die (it did: "terminate called after throwing an
// instance of 'std::system_error'"). ThreadSanitizer does not support
// starting threads after fork in a process that had threads.
TEST(TcpStoreServerTest, KeepsServingWhenNoThreadCanBeStarted) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root, to run the server as another user under a thread limit";
  int pipe_fds[2];
  ASSERT_EQ(pipe(pipe_fds), 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    ::close(pipe_fds[0]);
    if (setgid(65534) != 0 || setuid(65534) != 0) _exit(3);
    try {
      TcpStoreServer server("127.0.0.1", kSecret);
      // The server's own thread is started; now no process of this user may
      // start another.
      const rlim_t tasks = 1;
      rlimit limit{tasks, tasks};
      if (setrlimit(RLIMIT_NPROC, &limit) != 0) _exit(4);
      const int port = server.port();
      if (write(pipe_fds[1], &port, sizeof(port)) != sizeof(port)) _exit(6);
      for (;;) pause();
    } catch (...) {
      _exit(7);
    }
  }
  ::close(pipe_fds[1]);
  int port = 0;
  ASSERT_EQ(read(pipe_fds[0], &port, sizeof(port)), static_cast<ssize_t>(sizeof(port)));
  ::close(pipe_fds[0]);
  // Many clients at once, each on connections of its own.
  std::vector<std::shared_ptr<Store>> clients;
  for (int i = 0; i < 20; ++i) {
    clients.push_back(make_tcp_store("127.0.0.1", port, kSecret));
    clients.back()->set("k" + std::to_string(i), bytes_of("v"));
  }
  for (int i = 0; i < 20; ++i) EXPECT_EQ(clients[0]->get("k" + std::to_string(i), milliseconds(1000)), bytes_of("v"));
  int status = 0;
  EXPECT_EQ(waitpid(child, &status, WNOHANG), 0) << "the server's process ended";
  kill(child, SIGKILL);
  waitpid(child, &status, 0);
}
#endif

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

TEST(TcpStoreServerTest, StoppingTheServerEndsBlockedRequests) {
  auto server = std::make_unique<TcpStoreServer>("127.0.0.1", kSecret);
  auto store = make_tcp_store("127.0.0.1", server->port(), kSecret);
  store->set("k", bytes_of("v"));
  std::thread blocked([&] { EXPECT_THROW(store->get("never", milliseconds(3000)), Error); });
  std::this_thread::sleep_for(milliseconds(100));
  // The destructor neither waits for the client's timeout nor for its request.
  const auto start = Clock::now();
  server.reset();
  EXPECT_LT(seconds_since(start), 1.0);
  blocked.join();
}

TEST(TcpStoreServerTest, RefusesAnEmptySecret) {
  EXPECT_THROW(TcpStoreServer("127.0.0.1", ""), InvalidArgument);
}

TEST(TcpStoreServerTest, RefusesAPortInUseNamingIt) {
  TcpStoreServer first("127.0.0.1", kSecret);
  try {
    TcpStoreServer second("127.0.0.1", kSecret, first.port());
    FAIL() << "a second server bound port " << first.port();
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find(":" + std::to_string(first.port())), std::string::npos) << e.what();
  }
  EXPECT_THROW(TcpStoreServer("127.0.0.1", kSecret, 70000), InvalidArgument);
}

TEST(TcpStoreServerTest, TheOwnerSetsKeysAndListsThemByPrefix) {
  TcpStoreServer server("127.0.0.1", kSecret);
  auto store = make_tcp_store("127.0.0.1", server.port(), kSecret);
  std::thread reader([&] { EXPECT_EQ(store->get("hora.watch", milliseconds(5000)), bytes_of("1")); });
  std::this_thread::sleep_for(milliseconds(50));
  server.set("hora.watch", bytes_of("1"));  // wakes the client's blocked get
  reader.join();
  store->set("hora.process.1", bytes_of("exited"));
  store->set("hora.process.0", bytes_of("alive"));
  store->set("hora.processes", bytes_of("not this one"));
  const auto items = server.items_with_prefix("hora.process.");
  ASSERT_EQ(items.size(), 2u);
  EXPECT_EQ(items[0].first, "hora.process.0");
  EXPECT_EQ(items[0].second, bytes_of("alive"));
  EXPECT_EQ(items[1].first, "hora.process.1");
  EXPECT_EQ(server.items_with_prefix("").size(), 4u);
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

}  // namespace
}  // namespace hora
