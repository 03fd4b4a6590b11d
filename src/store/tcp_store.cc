// Client of the launcher's rendezvous server. The wire protocol is described in
// docs/rendezvous.md; its encoding lives in store_protocol.{h,cc}.

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "hora/errors.h"
#include "hora/store.h"
#include "store/store_protocol.h"

namespace hora {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

using namespace store_protocol;

// How long SET and ADD keep trying to reach the server, and the least time
// GET and WAIT give a connection attempt however short their own timeout.
constexpr milliseconds kConnectTimeout{30000};
constexpr milliseconds kMinConnectTimeout{1000};
// How long past a request's own timeout the client waits for its reply.
constexpr milliseconds kReplySlack{30000};

// A live connection failed (reset, closed, refused a write). The store
// reconnects once when it sees this; it never escapes the file.
class ConnectionLost : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

Clock::time_point deadline_after(milliseconds duration) {
  // About a year is "forever"; capping keeps the addition from overflowing.
  const milliseconds cap = std::chrono::hours(24 * 365);
  return Clock::now() + std::clamp(duration, milliseconds{0}, cap);
}

uint32_t wire_timeout(milliseconds timeout) {
  if (timeout.count() <= 0) return 0;
  if (timeout.count() >= int64_t{kNoTimeoutMs}) return kNoTimeoutMs;
  return static_cast<uint32_t>(timeout.count());
}

// Printable form of a key for error messages: escapes bytes, cuts long keys.
std::string quote_key(const std::string& key) {
  std::string out = "'";
  for (size_t i = 0; i < key.size() && i < 120; ++i) {
    const auto c = static_cast<unsigned char>(key[i]);
    if (c >= 0x20 && c < 0x7f && c != '\'' && c != '\\') {
      out += static_cast<char>(c);
    } else {
      char escaped[8];
      std::snprintf(escaped, sizeof escaped, "\\x%02x", c);
      out += escaped;
    }
  }
  return out + (key.size() > 120 ? "...'" : "'");
}

std::string quote_keys(const std::vector<std::string>& keys) {
  std::string out;
  for (size_t i = 0; i < keys.size() && i < 8; ++i) out += (i ? ", " : "") + quote_key(keys[i]);
  if (keys.size() > 8) out += ", ... (" + std::to_string(keys.size()) + " keys)";
  return out;
}

// --- socket ----------------------------------------------------------------

// Waits until `fd` is ready for `events`; false when the deadline passes.
bool wait_ready(int fd, short events, Clock::time_point deadline) {
  while (true) {
    const auto left = std::chrono::duration_cast<milliseconds>(deadline - Clock::now());
    pollfd p{fd, events, 0};
    const int r = ::poll(&p, 1, static_cast<int>(std::clamp<int64_t>(left.count(), 0, 60000)));
    if (r > 0) return true;
    if (r < 0 && errno != EINTR) throw ConnectionLost(std::string("poll: ") + std::strerror(errno));
    if (r == 0 && Clock::now() >= deadline) return false;
  }
}

// One TCP connection to the server; owns the descriptor.
class Connection {
 public:
  explicit Connection(int fd) : fd_(fd) {}
  Connection(Connection&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  Connection& operator=(Connection&&) = delete;
  ~Connection() {
    if (fd_ >= 0) ::close(fd_);
  }

  void send_all(const std::vector<uint8_t>& bytes, Clock::time_point deadline) {
    size_t sent = 0;
    while (sent < bytes.size()) {
      if (!wait_ready(fd_, POLLOUT, deadline)) throw ConnectionLost("send timed out");
      const ssize_t n = ::send(fd_, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
      if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
      if (n <= 0) throw ConnectionLost(std::string("send: ") + std::strerror(errno));
      sent += static_cast<size_t>(n);
    }
  }

  // Returns the next frame's payload; throws ConnectionLost if the connection
  // breaks or the deadline passes (then timed_out() is true).
  std::vector<uint8_t> recv_frame(Clock::time_point deadline) {
    uint8_t header[4];
    recv_exact(header, 4, deadline);
    const uint32_t length = uint32_t{header[0]} | uint32_t{header[1]} << 8 |
                            uint32_t{header[2]} << 16 | uint32_t{header[3]} << 24;
    if (length > kMaxFrameBytes) throw Internal("oversized reply from the rendezvous server");
    std::vector<uint8_t> payload(length);
    recv_exact(payload.data(), length, deadline);
    return payload;
  }

  // Set when recv_frame gave up because the deadline passed.
  bool timed_out() const { return timed_out_; }

 private:
  void recv_exact(uint8_t* out, size_t n, Clock::time_point deadline) {
    size_t got = 0;
    while (got < n) {
      if (!wait_ready(fd_, POLLIN, deadline)) {
        timed_out_ = true;
        throw ConnectionLost("no reply in time");
      }
      const ssize_t r = ::recv(fd_, out + got, n - got, 0);
      if (r < 0 && (errno == EINTR || errno == EAGAIN)) continue;
      if (r == 0) throw ConnectionLost("the server closed the connection");
      if (r < 0) throw ConnectionLost(std::string("recv: ") + std::strerror(errno));
      got += static_cast<size_t>(r);
    }
  }

  int fd_;
  bool timed_out_ = false;
};

// One non-blocking connect attempt to one address; returns a descriptor or -1
// with `error` set.
int connect_once(const addrinfo& address, Clock::time_point deadline, std::string& error) {
  const int fd = ::socket(address.ai_family, address.ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK,
                          address.ai_protocol);
  if (fd < 0) {
    error = std::strerror(errno);
    return -1;
  }
  int status = ::connect(fd, address.ai_addr, address.ai_addrlen) == 0 ? 0 : errno;
  if (status == EINPROGRESS) {
    socklen_t len = sizeof status;
    status = ETIMEDOUT;
    if (wait_ready(fd, POLLOUT, std::max(deadline, Clock::now() + milliseconds{100}))) {
      ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &status, &len);
    }
  }
  if (status != 0) {
    error = std::strerror(status);
    ::close(fd);
    return -1;
  }
  const int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  return fd;
}

// Connects to host:port, retrying until `deadline`; throws hora::Timeout.
Connection open_connection(const std::string& host, int port, Clock::time_point deadline) {
  std::string error = "no address";
  milliseconds pause{20};
  while (true) {
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* addresses = nullptr;
    const int rc = ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &addresses);
    if (rc != 0) {
      error = ::gai_strerror(rc);
    } else {
      for (const addrinfo* a = addresses; a != nullptr; a = a->ai_next) {
        const int fd = connect_once(*a, deadline, error);
        if (fd >= 0) {
          ::freeaddrinfo(addresses);
          return Connection(fd);
        }
      }
      ::freeaddrinfo(addresses);
    }
    if (Clock::now() >= deadline) {
      throw Timeout("cannot reach the rendezvous server at " + host + ":" + std::to_string(port) +
                    ": " + error);
    }
    std::this_thread::sleep_for(std::min<Clock::duration>(pause, deadline - Clock::now()));
    pause = std::min(pause * 2, milliseconds{500});
  }
}

// --- the store -------------------------------------------------------------

// Store over connections to the rendezvous server. Any thread may call it;
// concurrent calls use separate connections, kept for reuse once idle.
class TcpStore final : public Store {
 public:
  TcpStore(std::string host, int port, std::string secret)
      : host_(std::move(host)), port_(port), secret_(std::move(secret)) {}

  void set(const std::string& key, const std::vector<uint8_t>& value) override {
    check_key(key);
    if (value.size() > kMaxValueBytes) {
      throw InvalidArgument("rendezvous value of " + std::to_string(value.size()) +
                            " bytes for key " + quote_key(key) + " exceeds the limit of " +
                            std::to_string(kMaxValueBytes) + " bytes");
    }
    call({Command::kSet, 0, {key}, value}, kConnectTimeout);
  }

  std::vector<uint8_t> get(const std::string& key, milliseconds timeout) override {
    check_key(key);
    Reply reply = call({Command::kGet, wire_timeout(timeout), {key}, {}}, timeout);
    if (reply.status != Status::kOk) {
      throw Timeout("rendezvous key " + quote_key(key) + " was not set within " +
                    std::to_string(timeout.count()) + " ms (server " + where() + ")");
    }
    return std::move(reply.value);
  }

  int64_t add(const std::string& key, int64_t delta) override {
    check_key(key);
    const std::string text = std::to_string(delta);
    const Reply reply = call({Command::kAdd, 0, {key}, {text.begin(), text.end()}}, kConnectTimeout);
    int64_t result = 0;
    const char* begin = reinterpret_cast<const char*>(reply.value.data());
    const auto [end, ec] = std::from_chars(begin, begin + reply.value.size(), result);
    if (ec != std::errc() || end != begin + reply.value.size()) {
      throw InvalidArgument("the counter at rendezvous key " + quote_key(key) +
                            " is not a 64-bit integer");
    }
    return result;
  }

  void wait(const std::vector<std::string>& keys, milliseconds timeout) override {
    if (keys.empty()) return;
    if (keys.size() > kMaxWaitKeys) {
      throw InvalidArgument("cannot wait for " + std::to_string(keys.size()) +
                            " rendezvous keys at once; the limit is " +
                            std::to_string(kMaxWaitKeys));
    }
    for (const std::string& key : keys) check_key(key);
    const Reply reply = call({Command::kWait, wire_timeout(timeout), keys, {}}, timeout);
    if (reply.status != Status::kOk) {
      std::vector<std::string> missing = decode_keys(reply.value);
      if (missing.empty()) missing = keys;
      throw Timeout("rendezvous keys " + quote_keys(missing) + " were not set within " +
                    std::to_string(timeout.count()) + " ms (server " + where() + ")");
    }
  }

 private:
  std::string where() const { return host_ + ":" + std::to_string(port_); }

  static void check_key(const std::string& key) {
    if (key.size() > kMaxKeyBytes) {
      throw InvalidArgument("rendezvous key " + quote_key(key) + " of " +
                            std::to_string(key.size()) + " bytes exceeds the limit of " +
                            std::to_string(kMaxKeyBytes) + " bytes");
    }
  }

  // Sends `request` and returns the reply (OK, NOT_FOUND or TIMEOUT); turns
  // BAD_SECRET and BAD_REQUEST into exceptions. `budget` is the request's own
  // timeout: it bounds connecting and, with kReplySlack, the wait for the reply.
  // Each call uses an idle connection of its own (opening one if none is
  // idle), so a blocking get() in one thread never holds up another thread.
  Reply call(const Request& request, milliseconds budget) {
    const std::vector<uint8_t> frame = encode_request(secret_, request);
    const auto connect_deadline = deadline_after(std::max(budget, kMinConnectTimeout));
    const auto reply_deadline = deadline_after(std::min(budget, milliseconds::max() - kReplySlack) +
                                               kReplySlack);
    std::optional<Connection> connection = take_idle();
    const bool reused = connection.has_value();
    if (!reused) connection.emplace(open_connection(host_, port_, connect_deadline));
    try {
      Reply reply = check_refusal(exchange(*connection, frame, reply_deadline));
      give_back(std::move(*connection));
      return reply;
    } catch (const ConnectionLost& lost) {
      if (connection->timed_out() || !reused) throw_lost_connection(lost, connection->timed_out());
    }
    // The connection had broken since its last use: reconnect once and resend.
    connection.emplace(open_connection(host_, port_, connect_deadline));
    try {
      Reply reply = check_refusal(exchange(*connection, frame, reply_deadline));
      give_back(std::move(*connection));
      return reply;
    } catch (const ConnectionLost& lost) {
      throw_lost_connection(lost, connection->timed_out());
    }
  }

  std::optional<Connection> take_idle() {
    std::lock_guard<std::mutex> lock(mutex_);
    if (idle_.empty()) return std::nullopt;
    std::optional<Connection> connection(std::move(idle_.back()));
    idle_.pop_back();
    return connection;
  }

  void give_back(Connection connection) {
    std::lock_guard<std::mutex> lock(mutex_);
    idle_.push_back(std::move(connection));
  }

  // A connection whose exchange threw is dropped by the caller: the stream
  // may be out of step, and the server closes after a refusal.
  static Reply exchange(Connection& connection, const std::vector<uint8_t>& frame, Clock::time_point deadline) {
    connection.send_all(frame, deadline);
    return decode_reply(connection.recv_frame(deadline));
  }

  Reply check_refusal(Reply reply) const {
    if (reply.status == Status::kBadSecret) {
      throw InvalidArgument("the rendezvous server at " + where() +
                            " refused the job secret (BAD_SECRET); HORA_SECRET must be the one "
                            "horarun gave this job");
    }
    if (reply.status == Status::kBadRequest) {
      throw InvalidArgument("the rendezvous server at " + where() + " refused the request: " +
                            std::string(reply.value.begin(), reply.value.end()));
    }
    return reply;
  }

  [[noreturn]] void throw_lost_connection(const ConnectionLost& lost, bool timed_out) const {
    if (timed_out) throw Timeout("no reply from the rendezvous server at " + where());
    throw PeerFailure("lost the connection to the rendezvous server at " + where() + ": " +
                       lost.what());
  }

  const std::string host_;
  const int port_;
  const std::string secret_;
  std::mutex mutex_;
  std::vector<Connection> idle_;   // guarded by mutex_
};

}  // namespace

std::shared_ptr<Store> make_tcp_store(const std::string& host, int port, const std::string& secret) {
  if (host.empty()) throw InvalidArgument("rendezvous host is empty");
  if (port <= 0 || port > 65535) {
    throw InvalidArgument("rendezvous port " + std::to_string(port) + " is not in 1..65535");
  }
  if (secret.empty() || secret.size() > kMaxSecretBytes) {
    throw InvalidArgument("the job secret must be 1.." + std::to_string(kMaxSecretBytes) +
                          " bytes, got " + std::to_string(secret.size()));
  }
  return std::make_shared<TcpStore>(host, port, secret);
}

}  // namespace hora
