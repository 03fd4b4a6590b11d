// Client of the launcher's rendezvous server, for the runtime (make_tcp_store)
// and for Python (connect_tcp_store, tcp_store.h). The wire protocol is
// described in docs/rendezvous.md; its encoding lives in store_protocol.{h,cc}.

#include <algorithm>
#include <array>
#include <span>
#include <charconv>
#include <cstdio>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "hora/errors.h"
#include "hora/store.h"
#include "net/codec.h"
#include "net/hmac.h"
#include "net/socket.h"
#include "store/store_protocol.h"
#include "store/tcp_store.h"

namespace hora {
namespace {

using net::Clock;
using std::chrono::milliseconds;

using namespace store_protocol;

// How long SET and ADD keep trying to reach the server, and the least time
// GET and WAIT give a connection attempt however short their own timeout.
constexpr milliseconds kConnectTimeout{30000};
constexpr milliseconds kMinConnectTimeout{1000};
// How long past a request's own timeout the client waits for its reply.
constexpr milliseconds kReplySlack{30000};
// How long a closing store waits for the replies to its posted sets.
constexpr milliseconds kDrainTimeout{2000};

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

// --- connection -------------------------------------------------------------

constexpr char kServer[] = "the rendezvous server";

// One TCP connection to the server; owns the socket.
class Connection {
 public:
  explicit Connection(net::Socket socket) : socket_(std::move(socket)) {}

  void send_all(std::span<const uint8_t> bytes, Clock::time_point deadline) {
    try {
      socket_.send_all(bytes, deadline, kServer);
    } catch (const Error& e) {
      throw ConnectionLost(e.what());
    }
  }

  // Returns the next frame's payload; throws ConnectionLost if the connection
  // breaks or the deadline passes (then timed_out() is true).
  std::vector<uint8_t> recv_frame(Clock::time_point deadline) {
    uint8_t header[4];
    recv_exact(header, 4, deadline);
    const uint32_t length = net::load_u32_le(header);
    if (length > kMaxFrameBytes) throw Internal("oversized reply from the rendezvous server");
    std::vector<uint8_t> payload(length);
    recv_exact(payload.data(), length, deadline);
    return payload;
  }

  // Set when recv_frame gave up because the deadline passed.
  bool timed_out() const { return timed_out_; }

  // Replies still owed for requests posted on this connection (post()):
  // the next exchange reads them before its own.
  int& unread_replies() { return unread_replies_; }

  // Reads exactly n bytes; throws as recv_frame does.
  void recv_exact(uint8_t* out, size_t n, Clock::time_point deadline) {
    try {
      socket_.recv_exact(out, n, deadline, kServer);
    } catch (const Timeout&) {
      timed_out_ = true;
      throw ConnectionLost("no reply in time");
    } catch (const Error& e) {
      throw ConnectionLost(e.what());
    }
  }

 private:
  net::Socket socket_;
  bool timed_out_ = false;
  int unread_replies_ = 0;
};

// Connects to host:port, retrying until `deadline`, and proves the job's
// secret to the server, which proves it back (docs/rendezvous.md, "The
// handshake"). A server at its connection limit closes a new connection
// before its challenge: that is retried too. Throws hora::Timeout when the
// server cannot be reached, InvalidArgument when it refuses the secret or
// cannot prove it holds it, PeerFailure when the connection breaks during
// the handshake.
Connection open_connection(const std::string& host, int port, const std::string& secret,
                           Clock::time_point deadline) {
  net::ConnectOptions options;
  options.deadline = deadline;
  options.retry = true;
  const std::string where = host + ":" + std::to_string(port);
  for (milliseconds pause{20};; pause = std::min(pause * 2, milliseconds{500})) {
    Connection connection(net::connect_to(host, port, kServer, options));
    bool challenged = false;
    try {
      std::array<uint8_t, kChallengeBytes> challenge;
      connection.recv_exact(challenge.data(), challenge.size(), deadline);
      challenged = true;
      const net::Nonce server_nonce = decode_challenge(challenge);
      const net::Nonce client_nonce = net::random_nonce();
      const auto proof = encode_proof(secret, server_nonce, client_nonce);
      connection.send_all({proof.begin(), proof.end()}, deadline);
      std::array<uint8_t, kAnswerBytes> answer;
      connection.recv_exact(answer.data(), answer.size(), deadline);
      if (check_answer(answer, secret, server_nonce, client_nonce) == Status::kBadSecret) {
        throw SecretRefused("the rendezvous server at " + where +
                              " refused the job secret (BAD_SECRET); HORA_SECRET must be the one "
                              "horarun gave this job");
      }
      return connection;
    } catch (const Internal& e) {
      throw ServerUnproven("the rendezvous server at " + where + " failed the handshake: " + e.what());
    } catch (const ConnectionLost& lost) {
      if (connection.timed_out()) throw Timeout("no answer to the handshake from the rendezvous server at " + where);
      if (challenged || Clock::now() + pause >= deadline) {
        throw PeerFailure("the rendezvous server at " + where + " closed the connection during the handshake: " +
                          lost.what());
      }
    }
    std::this_thread::sleep_for(pause);
  }
}

// --- the store -------------------------------------------------------------

// Store over connections to the rendezvous server. Any thread may call it;
// concurrent calls use separate connections, kept for reuse once idle.
// `reconnect`: a call whose idle connection broke since its last use opens
// a new one and resends (the runtime's stores); without it the call fails.
class TcpStore final : public TcpStoreClient {
 public:
  TcpStore(std::string host, int port, std::string secret, bool reconnect = true)
      : host_(std::move(host)), port_(port), secret_(std::move(secret)), reconnect_(reconnect) {}

  // Opens a connection (handshake included) and keeps it for the next call.
  void connect(milliseconds timeout) { give_back(open_connection(host_, port_, secret_, deadline_after(timeout))); }

  void ping() override { call({Command::kPing, 0, {}, {}}, kConnectTimeout); }

  // Reads the replies still owed for posted sets before the connections
  // close: a connection closed with replies unread is reset, and a reset
  // can discard posted sets the server has not read yet.
  ~TcpStore() override {
    const auto deadline = deadline_after(kDrainTimeout);
    for (Connection& connection : idle_) {
      try {
        for (; connection.unread_replies() > 0; --connection.unread_replies()) connection.recv_frame(deadline);
      } catch (const std::exception&) {
        // The server is gone or slow: nothing more to save.
      }
    }
  }

  void set(const std::string& key, const std::vector<uint8_t>& value) override {
    check_value(key, value);
    call({Command::kSet, 0, {key}, value}, kConnectTimeout);
  }

  // Sends the set and returns: its reply is read by the next exchange on
  // the same connection, which the server answers in order.
  void post(const std::string& key, const std::vector<uint8_t>& value) override {
    check_value(key, value);
    const std::vector<uint8_t> frame = encode_request({Command::kSet, 0, {key}, value});
    const auto deadline = deadline_after(kConnectTimeout);
    std::optional<Connection> connection = take_idle();
    if (!connection) connection.emplace(open_connection(host_, port_, secret_, deadline));
    try {
      connection->send_all(frame, deadline);
    } catch (const ConnectionLost& lost) {
      throw_lost_connection(lost, false);
    }
    ++connection->unread_replies();
    give_back(std::move(*connection));
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

  static void check_value(const std::string& key, const std::vector<uint8_t>& value) {
    check_key(key);
    if (value.size() > kMaxValueBytes) {
      throw InvalidArgument("rendezvous value of " + std::to_string(value.size()) +
                            " bytes for key " + quote_key(key) + " exceeds the limit of " +
                            std::to_string(kMaxValueBytes) + " bytes");
    }
  }

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
    const std::vector<uint8_t> frame = encode_request(request);
    const auto connect_deadline = deadline_after(std::max(budget, kMinConnectTimeout));
    const auto reply_deadline = deadline_after(std::min(budget, milliseconds::max() - kReplySlack) +
                                               kReplySlack);
    std::optional<Connection> connection = take_idle();
    const bool reused = connection.has_value();
    if (!reused) connection.emplace(open_connection(host_, port_, secret_, connect_deadline));
    try {
      Reply reply = check_refusal(exchange(*connection, frame, reply_deadline));
      give_back(std::move(*connection));
      return reply;
    } catch (const ConnectionLost& lost) {
      // Posted sets may be lost with a broken connection: no resend then.
      if (connection->timed_out() || !reused || !reconnect_ || connection->unread_replies() > 0)
        throw_lost_connection(lost, connection->timed_out());
    }
    // The connection had broken since its last use: reconnect once and resend.
    connection.emplace(open_connection(host_, port_, secret_, connect_deadline));
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
  // may be out of step, and the server closes after a refusal. The replies
  // to sets posted on the connection come first; a refusal among them is
  // this call's error.
  Reply exchange(Connection& connection, const std::vector<uint8_t>& frame, Clock::time_point deadline) const {
    connection.send_all(frame, deadline);
    for (; connection.unread_replies() > 0; --connection.unread_replies())
      check_refusal(decode_reply(connection.recv_frame(deadline)));
    return decode_reply(connection.recv_frame(deadline));
  }

  Reply check_refusal(Reply reply) const {
    if (reply.status == Status::kBadSecret) {
      throw SecretRefused("the rendezvous server at " + where() +
                            " refused the job secret (BAD_SECRET); HORA_SECRET must be the one "
                            "horarun gave this job");
    }
    if (reply.status == Status::kBadRequest) {
      throw RequestRefused("the rendezvous server at " + where() + " refused the request: " +
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
  const bool reconnect_;
  std::mutex mutex_;
  std::vector<Connection> idle_;   // guarded by mutex_
};

void check_address(const std::string& host, int port, const std::string& secret) {
  if (host.empty()) throw InvalidArgument("rendezvous host is empty");
  if (port <= 0 || port > 65535) {
    throw InvalidArgument("rendezvous port " + std::to_string(port) + " is not in 1..65535");
  }
  if (secret.empty() || secret.size() > kMaxSecretBytes) {
    throw InvalidArgument("the job secret must be 1.." + std::to_string(kMaxSecretBytes) +
                          " bytes, got " + std::to_string(secret.size()));
  }
}

}  // namespace

std::shared_ptr<Store> make_tcp_store(const std::string& host, int port, const std::string& secret) {
  check_address(host, port, secret);
  return std::make_shared<TcpStore>(host, port, secret);
}

std::shared_ptr<TcpStoreClient> connect_tcp_store(const std::string& host, int port, const std::string& secret,
                                                  std::chrono::milliseconds connect_timeout) {
  check_address(host, port, secret);
  auto store = std::make_shared<TcpStore>(host, port, secret, /*reconnect=*/false);
  store->connect(connect_timeout);
  return store;
}

}  // namespace hora
