// The rendezvous server against clients that do not hold the job's secret,
// stall, flood it or outlive it: authentication before anything is read or
// allocated, deadlines, the connection limit, no thread per connection.

#include <dirent.h>
#include <sys/resource.h>
#include <sys/wait.h>

#include <chrono>
#include <cstdio>
#include <memory>
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
#include "store_clients.h"

namespace hora {
namespace {

using namespace store_test;

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

}  // namespace
}  // namespace hora
