// The rendezvous server's side of docs/rendezvous.md, in C++: it decodes
// requests with store_protocol::decode_request and answers with its
// encoders.
#include "store/tcp_store_server.h"

#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <charconv>
#include <condition_variable>
#include <cstring>
#include <list>
#include <map>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "hora/errors.h"
#include "store/store_protocol.h"

namespace hora {
namespace {

using Clock = std::chrono::steady_clock;

using store_protocol::Command;
using store_protocol::Refusal;
using store_protocol::Request;
using store_protocol::Status;
using store_protocol::kMaxFrameBytes;
using store_protocol::kMaxSecretBytes;
using store_protocol::kNoTimeoutMs;

// One reply frame: the u32 payload length, then the payload.
std::vector<uint8_t> reply_frame(Status status, std::vector<uint8_t> value) {
  const std::vector<uint8_t> payload = store_protocol::encode_reply({status, std::move(value)});
  std::vector<uint8_t> frame(4);
  for (int i = 0; i < 4; ++i) frame[i] = static_cast<uint8_t>(payload.size() >> (8 * i));
  frame.insert(frame.end(), payload.begin(), payload.end());
  return frame;
}

// A decimal integer, surrounding whitespace allowed (as the Python server).
int64_t parse_integer(const std::vector<uint8_t>& bytes, const char* what) {
  std::string text(bytes.begin(), bytes.end());
  const size_t first = text.find_first_not_of(" \t\r\n");
  const size_t last = text.find_last_not_of(" \t\r\n");
  text = first == std::string::npos ? "" : text.substr(first, last - first + 1);
  if (!text.empty() && text[0] == '+') text.erase(0, 1);
  int64_t value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size()) {
    throw Refusal{Status::kBadRequest, std::string(what) + " '" + text.substr(0, 40) + "' is not a decimal integer"};
  }
  return value;
}

bool recv_exact(int fd, uint8_t* out, size_t n) {
  size_t got = 0;
  while (got < n) {
    const ssize_t r = ::recv(fd, out + got, n - got, 0);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    got += static_cast<size_t>(r);
  }
  return true;
}

bool send_all(int fd, const std::vector<uint8_t>& bytes) {
  size_t sent = 0;
  while (sent < bytes.size()) {
    const ssize_t n = ::send(fd, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    sent += static_cast<size_t>(n);
  }
  return true;
}

int listen_on(const std::string& host) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* addresses = nullptr;
  const int rc = ::getaddrinfo(host.c_str(), "0", &hints, &addresses);
  if (rc != 0) throw InvalidArgument("rendezvous server: cannot resolve '" + host + "': " + gai_strerror(rc));
  std::string error = "no address";
  for (const addrinfo* a = addresses; a != nullptr; a = a->ai_next) {
    const int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    const int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (::bind(fd, a->ai_addr, a->ai_addrlen) == 0 && ::listen(fd, SOMAXCONN) == 0) {
      ::freeaddrinfo(addresses);
      return fd;
    }
    error = std::strerror(errno);
    ::close(fd);
  }
  ::freeaddrinfo(addresses);
  throw InvalidArgument("rendezvous server: cannot listen on '" + host + "': " + error);
}

}  // namespace

struct TcpStoreServer::State {
  std::string secret;
  int listen_fd = -1;
  int stop_fd = -1;
  int port = 0;
  std::thread acceptor;

  std::mutex mutex;
  std::condition_variable changed;
  bool stopping = false;
  std::map<std::string, std::vector<uint8_t>> data;  // guarded by mutex
  struct Connection {
    int fd;
    std::thread thread;
    bool done = false;
  };
  std::list<Connection> connections;  // guarded by mutex

  void accept_loop();
  void serve(Connection* connection);
  std::pair<Status, std::vector<uint8_t>> execute(const Request& request);
  std::vector<std::string> wait_for(const std::vector<std::string>& keys, uint32_t timeout_ms);
  void reap_finished();  // mutex held
};

void TcpStoreServer::State::accept_loop() {
  for (;;) {
    pollfd fds[2] = {{listen_fd, POLLIN, 0}, {stop_fd, POLLIN, 0}};
    if (::poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      return;
    }
    if (fds[1].revents != 0) return;
    const int fd = ::accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) continue;
    const int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    std::lock_guard<std::mutex> lock(mutex);
    if (stopping) {
      ::close(fd);
      return;
    }
    reap_finished();
    Connection& connection = connections.emplace_back(Connection{fd, {}, false});
    connection.thread = std::thread([this, c = &connection] { serve(c); });
  }
}

void TcpStoreServer::State::reap_finished() {
  for (auto it = connections.begin(); it != connections.end();) {
    if (!it->done) {
      ++it;
      continue;
    }
    it->thread.join();
    ::close(it->fd);
    it = connections.erase(it);
  }
}

void TcpStoreServer::State::serve(Connection* connection) {
  const int fd = connection->fd;
  try {
    for (;;) {
      uint8_t header[4];
      if (!recv_exact(fd, header, 4)) break;
      const uint32_t length = uint32_t{header[0]} | uint32_t{header[1]} << 8 | uint32_t{header[2]} << 16 |
                              uint32_t{header[3]} << 24;
      std::optional<Refusal> refusal;
      std::pair<Status, std::vector<uint8_t>> reply;
      if (length > kMaxFrameBytes) {
        refusal = Refusal{Status::kBadRequest, "frame of " + std::to_string(length) + " bytes exceeds " +
                                                  std::to_string(kMaxFrameBytes) + " bytes"};
      } else {
        std::vector<uint8_t> payload(length);
        if (!recv_exact(fd, payload.data(), length)) break;
        try {
          reply = execute(store_protocol::decode_request(payload, secret));
        } catch (const Refusal& r) {
          refusal = r;
        }
      }
      if (refusal) {
        send_all(fd, reply_frame(refusal->status, {refusal->message.begin(), refusal->message.end()}));
        ::shutdown(fd, SHUT_WR);  // the client reads the refusal, then sees the close
        break;
      }
      if (!send_all(fd, reply_frame(reply.first, std::move(reply.second)))) break;
    }
  } catch (...) {
    // A misbehaving client (or no memory for its request): drop it, keep serving others.
  }
  std::lock_guard<std::mutex> lock(mutex);
  connection->done = true;
}

std::pair<Status, std::vector<uint8_t>> TcpStoreServer::State::execute(const Request& request) {
  const std::string key = request.keys.empty() ? "" : request.keys[0];
  switch (request.command) {
    case Command::kPing:
      return {Status::kOk, {}};
    case Command::kSet: {
      std::lock_guard<std::mutex> lock(mutex);
      data[key] = request.value;
      changed.notify_all();
      return {Status::kOk, {}};
    }
    case Command::kAdd: {
      const int64_t delta = parse_integer(request.value, "ADD delta");
      std::lock_guard<std::mutex> lock(mutex);
      auto it = data.find(key);
      const int64_t current = it == data.end() ? 0 : parse_integer(it->second, "value of the key");
      const std::string text = std::to_string(current + delta);
      data[key] = std::vector<uint8_t>(text.begin(), text.end());
      changed.notify_all();
      return {Status::kOk, data[key]};
    }
    default:
      break;
  }
  const std::vector<std::string> missing = wait_for(request.keys, request.timeout_ms);
  if (request.command == Command::kGet) {
    if (!missing.empty()) return {request.timeout_ms == 0 ? Status::kNotFound : Status::kTimeout, {}};
    std::lock_guard<std::mutex> lock(mutex);
    return {Status::kOk, data[key]};
  }
  if (!missing.empty()) return {Status::kTimeout, store_protocol::encode_keys(missing)};
  return {Status::kOk, {}};
}

std::vector<std::string> TcpStoreServer::State::wait_for(const std::vector<std::string>& keys,
                                                         uint32_t timeout_ms) {
  const auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
  std::unique_lock<std::mutex> lock(mutex);
  for (;;) {
    std::vector<std::string> missing;
    for (const std::string& key : keys)
      if (data.count(key) == 0) missing.push_back(key);
    if (missing.empty() || stopping) return missing;
    if (timeout_ms == kNoTimeoutMs) {
      changed.wait(lock);
    } else if (Clock::now() >= deadline) {
      return missing;
    } else {
      changed.wait_until(lock, deadline);
    }
  }
}

TcpStoreServer::TcpStoreServer(const std::string& host, std::string secret) : state_(std::make_unique<State>()) {
  if (secret.empty() || secret.size() > kMaxSecretBytes) {
    throw InvalidArgument("rendezvous server: the secret must be 1.." + std::to_string(kMaxSecretBytes) + " bytes");
  }
  state_->secret = std::move(secret);
  state_->listen_fd = listen_on(host);
  sockaddr_storage address{};
  socklen_t length = sizeof address;
  ::getsockname(state_->listen_fd, reinterpret_cast<sockaddr*>(&address), &length);
  state_->port = ntohs(address.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&address)->sin6_port
                                                     : reinterpret_cast<sockaddr_in*>(&address)->sin_port);
  state_->stop_fd = ::eventfd(0, EFD_CLOEXEC);
  if (state_->stop_fd < 0) {
    ::close(state_->listen_fd);
    throw Internal(std::string("rendezvous server: eventfd: ") + std::strerror(errno));
  }
  state_->acceptor = std::thread([s = state_.get()] { s->accept_loop(); });
}

TcpStoreServer::~TcpStoreServer() {
  State& s = *state_;
  {
    std::lock_guard<std::mutex> lock(s.mutex);
    s.stopping = true;
    s.changed.notify_all();
    for (auto& connection : s.connections) ::shutdown(connection.fd, SHUT_RDWR);
  }
  const uint64_t one = 1;
  [[maybe_unused]] ssize_t written = ::write(s.stop_fd, &one, sizeof one);
  if (s.acceptor.joinable()) s.acceptor.join();
  // No new connection can appear now; serving threads end on the shutdown.
  for (auto& connection : s.connections) {
    if (connection.thread.joinable()) connection.thread.join();
    ::close(connection.fd);
  }
  ::close(s.listen_fd);
  ::close(s.stop_fd);
}

int TcpStoreServer::port() const { return state_->port; }

}  // namespace hora
