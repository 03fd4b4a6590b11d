// The rendezvous server's side of docs/rendezvous.md: one thread, an epoll
// loop over the listener and every connection. What a connection's bytes
// mean and what a request does is store_session.h's; this file moves bytes,
// keeps the requests that wait for keys, and enforces the deadlines and the
// connection limit.
#include "store/tcp_store_server.h"

#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>
#include <mutex>
#include <optional>
#include <thread>
#include <unordered_map>

#include "hora/errors.h"
#include "net/socket.h"
#include "store/store_session.h"
#include "util/log.h"

namespace hora {
namespace {

using net::Clock;
using store_protocol::Reply;
using store_protocol::Request;
using store_protocol::ServerSession;
using store_protocol::StoreData;

constexpr Clock::time_point kNever = Clock::time_point::max();
// epoll's tags for the two descriptors that are not connections.
constexpr uint64_t kListenerTag = 0;
constexpr uint64_t kWakeupTag = 1;
// How long accepting pauses when the process is out of descriptors.
constexpr std::chrono::milliseconds kAcceptPause{100};
// The least time between two warnings of one kind.
constexpr std::chrono::seconds kWarningInterval{10};
// Requests one connection may have served in a row before others get a turn.
constexpr int kRequestsPerTurn = 16;

}  // namespace

struct TcpStoreServer::State {
  // One client connection: its bytes in (session), its replies out, and the
  // request it waits on, if any.
  struct Connection {
    Connection(uint64_t id_, net::Socket socket_, const std::string& secret, const net::Nonce& nonce)
        : id(id_), socket(std::move(socket_)), session(secret, nonce) {}
    const uint64_t id;  // epoll's tag; never reused
    net::Socket socket;
    ServerSession session;
    Clock::time_point deadline = kNever;  // handshake, or a frame in progress
    std::vector<uint8_t> out;             // bytes still to send
    size_t sent = 0;
    bool close_when_sent = false;
    std::optional<Request> waiting;  // a GET or WAIT whose keys are missing
    Clock::time_point wait_deadline = kNever;
    std::optional<std::multimap<std::string, uint64_t>::iterator> waiting_entry;  // in waiters
    uint32_t interest = 0;  // the epoll events asked for
  };

  State(const std::string& host, std::string secret_, int port, StoreServerLimits limits_)
      : secret(std::move(secret_)), limits(limits_), listener(host, port), epoll(epoll_create1(EPOLL_CLOEXEC)) {
    if (!epoll.valid()) throw Internal(std::string("rendezvous server: epoll_create1: ") + std::strerror(errno));
    net::set_nonblocking(listener.fd());
    watch(listener.fd(), EPOLLIN, kListenerTag);
    watch(wakeup.fd(), EPOLLIN, kWakeupTag);
  }

  const std::string secret;
  const StoreServerLimits limits;
  net::Listener listener;
  net::Socket epoll;
  net::Wakeup wakeup;
  StoreData data;
  std::thread thread;

  std::mutex mutex;
  bool stopping = false;                  // guarded by mutex
  std::vector<std::string> owner_changes;  // keys set by the owner; guarded by mutex

  // The loop thread's alone.
  std::unordered_map<uint64_t, std::unique_ptr<Connection>> connections;
  std::multimap<std::string, uint64_t> waiters;  // a missing key -> the connection waiting on it
  uint64_t next_id = 2;
  bool accepting = true;
  Clock::time_point accept_resumes = kNever;
  RateLimitedWarning full_warning{kWarningInterval}, accept_warning{kWarningInterval},
      loop_warning{kWarningInterval};

  void watch(int fd, uint32_t events, uint64_t tag);
  void run();
  bool drain_wakeup();  // false once stopping
  void accept_all();
  bool evict_one_unproven();
  void on_event(uint64_t id, uint32_t events);
  void read_requests(uint64_t id, Connection& c);
  void execute(uint64_t id, Connection& c);
  void wait_for_keys(uint64_t id, Connection& c, Clock::time_point now);
  void keys_changed(const std::string& key);
  void send_queued(uint64_t id, Connection& c);
  void update_interest(Connection& c);
  void enforce_deadlines();
  void close(uint64_t id);
  Clock::time_point next_deadline() const;
};

void TcpStoreServer::State::watch(int fd, uint32_t events, uint64_t tag) {
  epoll_event event{};
  event.events = events;
  event.data.u64 = tag;
  if (epoll_ctl(epoll.fd(), EPOLL_CTL_ADD, fd, &event) != 0) {
    throw Internal(std::string("rendezvous server: epoll_ctl: ") + std::strerror(errno));
  }
}

void TcpStoreServer::State::run() {
  epoll_event events[64];
  for (;;) {
    const int n = epoll_wait(epoll.fd(), events, 64, net::poll_timeout_ms(next_deadline()));
    if (n < 0 && errno != EINTR) {
      log_warning(std::string("rendezvous server: epoll_wait: ") + std::strerror(errno));
      std::this_thread::sleep_for(kAcceptPause);
    }
    try {
      for (int i = 0; i < n; ++i) {
        const uint64_t tag = events[i].data.u64;
        if (tag == kWakeupTag) {
          if (!drain_wakeup()) return;
        } else if (tag == kListenerTag) {
          accept_all();
        } else {
          on_event(tag, events[i].events);
        }
      }
      enforce_deadlines();
    } catch (const std::exception& e) {
      // Whatever one round could not finish (memory, a refused epoll_ctl),
      // the server goes on with the next.
      loop_warning.warn(std::string("rendezvous server: ") + e.what());
    }
  }
}

bool TcpStoreServer::State::drain_wakeup() {
  wakeup.clear();
  std::vector<std::string> changed;
  {
    std::lock_guard<std::mutex> lock(mutex);
    if (stopping) {
      // Requests that wait for keys end now, as if their time had run out.
      for (auto& [id, c] : connections) {
        if (!c->waiting || !c->out.empty()) continue;
        const std::vector<uint8_t> frame = store_protocol::reply_frame(data.expired(*c->waiting));
        (void)send(c->socket.fd(), frame.data(), frame.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
      }
      return false;
    }
    changed.swap(owner_changes);
  }
  for (const std::string& key : changed) keys_changed(key);
  return true;
}

void TcpStoreServer::State::accept_all() {
  while (accepting) {
    const int fd = accept4(listener.fd(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR || errno == ECONNABORTED) return;
      // Out of descriptors or memory: stop accepting for a moment, so the
      // waiting connection does not spin the loop; serve the others.
      accept_warning.warn(std::string("rendezvous server: cannot accept a connection: ") + std::strerror(errno) +
                          "; pausing new connections for " + std::to_string(kAcceptPause.count()) + " ms");
      epoll_ctl(epoll.fd(), EPOLL_CTL_DEL, listener.fd(), nullptr);
      accepting = false;
      accept_resumes = Clock::now() + kAcceptPause;
      return;
    }
    net::Socket socket(fd);  // owns the descriptor from here on
    if (connections.size() >= limits.max_connections && !evict_one_unproven()) {
      full_warning.warn("rendezvous server: " + std::to_string(connections.size()) +
                        " connections are open, its limit, and all have proved the secret; closing new ones "
                        "until some end");
      continue;
    }
    net::keep_alive(socket.fd());
    const uint64_t id = next_id++;
    try {
      auto connection = std::make_unique<Connection>(id, std::move(socket), secret, net::random_nonce());
      Connection& c = *connection;
      c.deadline = Clock::now() + limits.handshake_timeout;
      const auto challenge = c.session.challenge();
      c.out.assign(challenge.begin(), challenge.end());
      watch(c.socket.fd(), EPOLLIN, id);
      c.interest = EPOLLIN;
      connections.emplace(id, std::move(connection));
      send_queued(id, c);
    } catch (const std::exception& e) {
      // One connection that cannot be set up (memory, no random bytes)
      // is dropped (its socket closes with it); the server goes on.
      accept_warning.warn(std::string("rendezvous server: dropping a new connection: ") + e.what());
      close(id);
    }
  }
}

// At the connection limit, a newcomer takes the place of the oldest
// connection that has not proved the secret yet, so that strangers holding
// connections open cannot lock the job's ranks out. False when every
// connection has proved it.
bool TcpStoreServer::State::evict_one_unproven() {
  auto oldest = connections.end();
  for (auto it = connections.begin(); it != connections.end(); ++it) {
    if (!it->second->session.authenticated() && (oldest == connections.end() || it->first < oldest->first)) {
      oldest = it;
    }
  }
  if (oldest == connections.end()) return false;
  full_warning.warn("rendezvous server: " + std::to_string(connections.size()) +
                    " connections are open, its limit; closing the oldest that has not proved the secret");
  close(oldest->first);
  return true;
}

void TcpStoreServer::State::on_event(uint64_t id, uint32_t events) {
  auto it = connections.find(id);
  if (it == connections.end()) return;  // closed earlier in this round
  Connection& c = *it->second;
  try {
    // A client that sent its last requests and left: serve what it sent
    // (the read sees the end of the stream and closes).
    if ((events & EPOLLERR) && !(events & EPOLLIN)) return close(id);
    if (!c.out.empty()) {
      send_queued(id, c);
      return;
    }
    if (c.waiting) {
      // Only EPOLLRDHUP/EPOLLHUP are asked for while waiting: the client left.
      return close(id);
    }
    read_requests(id, c);
  } catch (const std::exception&) {
    // A client whose request cannot be served (no memory for it): drop it.
    close(id);
  }
}

// Reads what the session asks for until the socket has nothing more, a
// request must wait or its reply cannot be sent at once, or the connection
// has had its turn.
void TcpStoreServer::State::read_requests(uint64_t id, Connection& c) {
  for (int served = 0; served < kRequestsPerTurn;) {
    const std::span<uint8_t> space = c.session.space();
    const ssize_t n = recv(c.socket.fd(), space.data(), space.size(), MSG_DONTWAIT);
    if (n == 0) return close(id);
    if (n < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK) break;
      if (errno == EINTR) continue;
      return close(id);
    }
    const ServerSession::Event event = c.session.received(static_cast<size_t>(n));
    // Before the proof the handshake deadline stands; after it, a frame
    // must keep arriving.
    if (c.session.authenticated()) c.deadline = c.session.mid_unit() ? Clock::now() + limits.frame_timeout : kNever;
    switch (event) {
      case ServerSession::Event::kNone:
        continue;
      case ServerSession::Event::kAuthenticated:
        c.out = c.session.output();
        break;
      case ServerSession::Event::kRefused:
        c.out = c.session.output();
        c.close_when_sent = true;
        break;
      case ServerSession::Event::kRequest:
        ++served;
        execute(id, c);
        break;
    }
    if (!connections.count(id)) return;
    if (!c.out.empty()) {
      send_queued(id, c);
      if (!connections.count(id)) return;
    }
    if (!c.out.empty() || c.waiting) break;
  }
  update_interest(c);
}

void TcpStoreServer::State::execute(uint64_t id, Connection& c) {
  const Request& request = c.session.request();
  std::optional<Reply> reply;
  try {
    reply = data.execute(request);
  } catch (const store_protocol::Refusal& refusal) {
    c.out = store_protocol::reply_frame({refusal.status, {refusal.message.begin(), refusal.message.end()}});
    c.close_when_sent = true;
    return;
  }
  if (!reply) {
    c.waiting = request;
    wait_for_keys(id, c, Clock::now());
    return;
  }
  c.out = store_protocol::reply_frame(*reply);
  if (request.command == store_protocol::Command::kSet || request.command == store_protocol::Command::kAdd) {
    keys_changed(request.keys[0]);
  }
}

// Starts (or continues) the wait of `c`'s request: registers it under the
// first of its keys that is missing.
void TcpStoreServer::State::wait_for_keys(uint64_t id, Connection& c, Clock::time_point now) {
  const std::optional<std::string> missing = data.first_missing(c.waiting->keys);
  if (!missing) {
    c.out = store_protocol::reply_frame(*data.execute(*c.waiting));
    c.waiting.reset();
    return;
  }
  if (c.wait_deadline == kNever && c.waiting->timeout_ms != store_protocol::kNoTimeoutMs) {
    c.wait_deadline = now + std::chrono::milliseconds(c.waiting->timeout_ms);
  }
  c.waiting_entry = waiters.emplace(*missing, id);
}

void TcpStoreServer::State::keys_changed(const std::string& key) {
  const auto [first, last] = waiters.equal_range(key);
  std::vector<uint64_t> woken;
  for (auto it = first; it != last; ++it) woken.push_back(it->second);
  for (const uint64_t id : woken) {
    auto it = connections.find(id);
    if (it == connections.end()) continue;
    Connection& c = *it->second;
    waiters.erase(*c.waiting_entry);
    c.waiting_entry.reset();
    try {
      wait_for_keys(id, c, Clock::now());
      if (c.waiting) continue;
      c.wait_deadline = kNever;
      send_queued(id, c);
    } catch (const std::exception&) {
      close(id);  // no memory for this waiter's reply: drop it, serve the others
    }
  }
}

void TcpStoreServer::State::send_queued(uint64_t id, Connection& c) {
  while (c.sent < c.out.size()) {
    const ssize_t n = send(c.socket.fd(), c.out.data() + c.sent, c.out.size() - c.sent, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
    if (n < 0) return close(id);
    c.sent += static_cast<size_t>(n);
  }
  if (c.sent == c.out.size()) {
    c.out.clear();
    c.out.shrink_to_fit();
    c.sent = 0;
    if (c.close_when_sent) {
      // The client reads the refusal, then sees the end of the stream.
      c.socket.shutdown(/*write_only=*/true);
      return close(id);
    }
  }
  update_interest(c);
}

// Reading while idle, writing while a reply is queued, and only noticing a
// departure while a request waits for keys.
void TcpStoreServer::State::update_interest(Connection& c) {
  const uint32_t wanted = !c.out.empty() ? EPOLLOUT : c.waiting ? EPOLLRDHUP : EPOLLIN;
  if (wanted == c.interest) return;
  epoll_event event{};
  event.events = wanted;
  event.data.u64 = c.id;
  epoll_ctl(epoll.fd(), EPOLL_CTL_MOD, c.socket.fd(), &event);
  c.interest = wanted;
}

void TcpStoreServer::State::enforce_deadlines() {
  const auto now = Clock::now();
  if (!accepting && now >= accept_resumes) {
    accepting = true;
    accept_resumes = kNever;
    watch(listener.fd(), EPOLLIN, kListenerTag);
  }
  std::vector<uint64_t> silent, expired;
  for (const auto& [id, c] : connections) {
    if (now >= c->deadline) silent.push_back(id);
    else if (c->waiting && now >= c->wait_deadline) expired.push_back(id);
  }
  // A client that has not proved the secret in time, or stalls inside a
  // frame, is dropped.
  for (const uint64_t id : silent) close(id);
  for (const uint64_t id : expired) {
    Connection& c = *connections.at(id);
    waiters.erase(*c.waiting_entry);
    c.waiting_entry.reset();
    try {
      c.out = store_protocol::reply_frame(data.expired(*c.waiting));
      c.waiting.reset();
      c.wait_deadline = kNever;
      send_queued(id, c);
    } catch (const std::exception&) {
      close(id);
    }
  }
}

void TcpStoreServer::State::close(uint64_t id) {
  auto it = connections.find(id);
  if (it == connections.end()) return;
  if (it->second->waiting_entry) waiters.erase(*it->second->waiting_entry);
  epoll_ctl(epoll.fd(), EPOLL_CTL_DEL, it->second->socket.fd(), nullptr);
  connections.erase(it);
}

Clock::time_point TcpStoreServer::State::next_deadline() const {
  Clock::time_point next = accept_resumes;
  for (const auto& [id, c] : connections) {
    next = std::min({next, c->deadline, c->wait_deadline});
  }
  return next;
}

TcpStoreServer::TcpStoreServer(const std::string& host, std::string secret, int port, StoreServerLimits limits) {
  if (secret.empty() || secret.size() > store_protocol::kMaxSecretBytes) {
    throw InvalidArgument("rendezvous server: the secret must be 1.." +
                          std::to_string(store_protocol::kMaxSecretBytes) + " bytes");
  }
  try {
    state_ = std::make_unique<State>(host, std::move(secret), port, limits);
  } catch (const InvalidArgument& e) {
    throw InvalidArgument(std::string("rendezvous server: ") + e.what());
  }
  state_->thread = std::thread([s = state_.get()] { s->run(); });
}

TcpStoreServer::~TcpStoreServer() {
  {
    std::lock_guard<std::mutex> lock(state_->mutex);
    state_->stopping = true;
  }
  state_->wakeup.signal();
  if (state_->thread.joinable()) state_->thread.join();
  // The connections close with the state.
}

int TcpStoreServer::port() const { return state_->listener.port(); }

void TcpStoreServer::set(const std::string& key, std::vector<uint8_t> value) {
  state_->data.set(key, std::move(value));
  {
    std::lock_guard<std::mutex> lock(state_->mutex);
    state_->owner_changes.push_back(key);
  }
  state_->wakeup.signal();
}

std::vector<std::pair<std::string, std::vector<uint8_t>>> TcpStoreServer::items_with_prefix(
    const std::string& prefix) const {
  return state_->data.items_with_prefix(prefix);
}

}  // namespace hora
