// What the rendezvous store's tests share: a server per test with a client
// of it (TcpStoreTest), and raw connections that speak the protocol's bytes
// as a broken or hostile client would.
#pragma once

#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "hora/errors.h"
#include "hora/store.h"
#include "net/hmac.h"
#include "store/store_protocol.h"
#include "store/tcp_store_server.h"

namespace hora::store_test {

using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;


inline constexpr const char* kSecret = "test-secret-0123456789abcdef";

inline std::vector<uint8_t> bytes_of(const std::string& s) { return {s.begin(), s.end()}; }

inline double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// A port on which nothing listens (bound, read, released).
inline int unused_port() {
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

inline std::vector<uint8_t> framed(const std::vector<uint8_t>& payload) {
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

// A client that holds the secret is served.
inline void expect_serving(int port) {
  auto store = make_tcp_store("127.0.0.1", port, kSecret);
  store->set("serving", bytes_of("yes"));
  EXPECT_EQ(store->get("serving", milliseconds(1000)), bytes_of("yes"));
}

// `n` connections to the server at `port`, each past its challenge, and
// past the handshake too when `secret` is given.
inline std::vector<std::unique_ptr<RawConnection>> open_connections(int port, int n, const char* secret = nullptr) {
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

}  // namespace hora::store_test
