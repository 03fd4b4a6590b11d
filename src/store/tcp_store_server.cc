// The rendezvous server's side of docs/rendezvous.md, in C++: it decodes
// requests with store_protocol::decode_request and answers with its
// encoders.
#include "store/tcp_store_server.h"

#include <charconv>
#include <condition_variable>
#include <list>
#include <map>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "hora/errors.h"
#include "net/codec.h"
#include "net/socket.h"
#include "store/store_protocol.h"

namespace hora {
namespace {

using net::Clock;

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
  net::store_u32_le(frame.data(), static_cast<uint32_t>(payload.size()));
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

constexpr char kClient[] = "a rendezvous client";
constexpr Clock::time_point kNever = Clock::time_point::max();

}  // namespace

struct TcpStoreServer::State {
  std::string secret;
  std::optional<net::Listener> listener;
  net::Wakeup stop;
  std::thread acceptor;

  std::mutex mutex;
  std::condition_variable changed;
  bool stopping = false;
  std::map<std::string, std::vector<uint8_t>> data;  // guarded by mutex
  struct Connection {
    net::Socket socket;
    std::thread thread;
    bool done = false;
  };
  std::list<Connection> connections;  // guarded by mutex

  void set(const std::string& key, std::vector<uint8_t> value) {
    std::lock_guard<std::mutex> lock(mutex);
    data[key] = std::move(value);
    changed.notify_all();
  }
  void accept_loop();
  void serve(Connection* connection);
  std::pair<Status, std::vector<uint8_t>> execute(const Request& request);
  std::vector<std::string> wait_for(const std::vector<std::string>& keys, uint32_t timeout_ms);
  void reap_finished();  // mutex held
};

void TcpStoreServer::State::accept_loop() {
  for (;;) {
    net::Socket socket;
    try {
      socket = listener->accept(kNever, stop.fd());
    } catch (const Error&) {
      // Out of descriptors or memory for now: let connections finish.
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
      continue;
    }
    std::lock_guard<std::mutex> lock(mutex);
    if (!socket.valid() || stopping) return;
    reap_finished();
    Connection& connection = connections.emplace_back(Connection{std::move(socket), {}, false});
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
    it = connections.erase(it);
  }
}

void TcpStoreServer::State::serve(Connection* connection) {
  net::Socket& socket = connection->socket;
  try {
    for (;;) {
      uint8_t header[4];
      socket.recv_exact(header, 4, kNever, kClient);
      const uint32_t length = net::load_u32_le(header);
      std::optional<Refusal> refusal;
      std::pair<Status, std::vector<uint8_t>> reply;
      if (length > kMaxFrameBytes) {
        refusal = Refusal{Status::kBadRequest, "frame of " + std::to_string(length) + " bytes exceeds " +
                                                  std::to_string(kMaxFrameBytes) + " bytes"};
      } else {
        std::vector<uint8_t> payload(length);
        socket.recv_exact(payload.data(), length, kNever, kClient);
        try {
          reply = execute(store_protocol::decode_request(payload, secret));
        } catch (const Refusal& r) {
          refusal = r;
        }
      }
      if (refusal) {
        socket.send_all(reply_frame(refusal->status, {refusal->message.begin(), refusal->message.end()}), kNever,
                        kClient);
        socket.shutdown(/*write_only=*/true);  // the client reads the refusal, then sees the close
        break;
      }
      socket.send_all(reply_frame(reply.first, std::move(reply.second)), kNever, kClient);
    }
  } catch (...) {
    // A client that left or misbehaved (or no memory for its request): drop
    // it, keep serving others.
  }
  std::lock_guard<std::mutex> lock(mutex);
  connection->done = true;
}

std::pair<Status, std::vector<uint8_t>> TcpStoreServer::State::execute(const Request& request) {
  const std::string key = request.keys.empty() ? "" : request.keys[0];
  switch (request.command) {
    case Command::kPing:
      return {Status::kOk, {}};
    case Command::kSet:
      set(key, request.value);
      return {Status::kOk, {}};
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

TcpStoreServer::TcpStoreServer(const std::string& host, std::string secret, int port)
    : state_(std::make_unique<State>()) {
  if (secret.empty() || secret.size() > kMaxSecretBytes) {
    throw InvalidArgument("rendezvous server: the secret must be 1.." + std::to_string(kMaxSecretBytes) + " bytes");
  }
  state_->secret = std::move(secret);
  try {
    state_->listener.emplace(host, port);
  } catch (const InvalidArgument& e) {
    throw InvalidArgument(std::string("rendezvous server: ") + e.what());
  }
  state_->acceptor = std::thread([s = state_.get()] { s->accept_loop(); });
}

TcpStoreServer::~TcpStoreServer() {
  State& s = *state_;
  {
    std::lock_guard<std::mutex> lock(s.mutex);
    s.stopping = true;
    s.changed.notify_all();
    for (auto& connection : s.connections) connection.socket.shutdown();
  }
  s.stop.signal();
  if (s.acceptor.joinable()) s.acceptor.join();
  // No new connection can appear now; serving threads end on the shutdown.
  for (auto& connection : s.connections) {
    if (connection.thread.joinable()) connection.thread.join();
  }
}

int TcpStoreServer::port() const { return state_->listener->port(); }

void TcpStoreServer::set(const std::string& key, std::vector<uint8_t> value) { state_->set(key, std::move(value)); }

std::vector<std::pair<std::string, std::vector<uint8_t>>> TcpStoreServer::items_with_prefix(
    const std::string& prefix) const {
  std::lock_guard<std::mutex> lock(state_->mutex);
  std::vector<std::pair<std::string, std::vector<uint8_t>>> items;
  for (auto it = state_->data.lower_bound(prefix); it != state_->data.end() && it->first.rfind(prefix, 0) == 0; ++it)
    items.emplace_back(it->first, it->second);
  return items;
}

}  // namespace hora
