// The one socket layer of hora's own TCP traffic (the rendezvous store's
// client and server, the control channel of a process set): an owning
// socket with whole reads and writes under deadlines, a listener on a port
// the kernel picks, a connect that can retry and be cancelled, and a
// wake-up descriptor for poll(2). Failures throw hora::Error kinds:
// PeerFailure (refused, closed or reset), Timeout (a deadline passed),
// InvalidArgument (a bad host, a cancelled connect), Internal (the kernel
// refused a call that cannot fail here). Messages name the peer as the
// caller describes it ("the rendezvous server", "global rank 3").
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>
#include <utility>

namespace hora::net {

using Clock = std::chrono::steady_clock;

// Milliseconds from now until `deadline` for poll(2): 0 when passed, -1
// (forever) when too far to represent.
int poll_timeout_ms(Clock::time_point deadline);

// Waits until `fd` is ready for `events` (POLLIN, POLLOUT); false when the
// deadline passes first.
bool wait_ready(int fd, short events, Clock::time_point deadline);

// One connected (or listening) socket; closes it on destruction. Reads and
// writes never block past their deadline, whether the descriptor is in
// blocking mode or not. One thread reads and one writes at a time; the
// owner serialises the rest.
class Socket {
 public:
  Socket() = default;
  explicit Socket(int fd) : fd_(fd) {}
  Socket(Socket&& other) noexcept : fd_(other.release()) {}
  Socket& operator=(Socket&& other) noexcept;
  Socket(const Socket&) = delete;
  Socket& operator=(const Socket&) = delete;
  ~Socket() { close(); }

  int fd() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  int release() { return std::exchange(fd_, -1); }
  void close() noexcept;
  // Ends the connection in both directions (or only ours, `write_only`)
  // without closing the descriptor: a thread blocked reading it wakes and
  // sees the end of the stream.
  void shutdown(bool write_only = false) noexcept;

  // Writes `head`, then `body`, completely before `deadline`. Throws
  // PeerFailure when the connection is closed or reset (`error`, if given,
  // gets its errno: the kernel reports why a connection broke only once,
  // to whichever call comes first), Timeout when the deadline passes.
  void send_all(std::span<const uint8_t> head, std::span<const uint8_t> body, Clock::time_point deadline,
                const std::string& peer, int* error = nullptr);
  void send_all(std::span<const uint8_t> bytes, Clock::time_point deadline, const std::string& peer) {
    send_all(bytes, {}, deadline, peer);
  }
  // Reads exactly `n` bytes before `deadline`. Throws PeerFailure when the
  // connection ends or breaks first, Timeout when the deadline passes.
  void recv_exact(void* out, size_t n, Clock::time_point deadline, const std::string& peer);
  // Reads what has arrived, without waiting: the bytes read (0 when none
  // are waiting), or nullopt once the connection has ended or broken
  // (`error`, if given, gets the errno of a broken one, 0 at its end).
  std::optional<size_t> recv_available(void* out, size_t n, int* error = nullptr);

 private:
  int fd_ = -1;
};

// A listening TCP socket on a port the kernel picks. accept() is for one
// thread at a time.
class Listener {
 public:
  // Binds `host` (a name or a numeric address) at `port` (0: one the
  // kernel picks). Throws InvalidArgument when it cannot be resolved or
  // bound.
  explicit Listener(const std::string& host, int port = 0);

  int fd() const { return socket_.fd(); }
  int port() const { return port_; }
  // "host:port" for peers to connect to: numeric, an IPv6 host bracketed.
  const std::string& address() const { return address_; }

  // One connection (TCP_NODELAY on) accepted before `deadline`; an invalid
  // Socket when the deadline passes, or when `stop_fd` (unless -1) becomes
  // readable first.
  Socket accept(Clock::time_point deadline, int stop_fd = -1);

 private:
  Socket socket_;
  int port_ = 0;
  std::string address_;
};

struct ConnectOptions {
  Clock::time_point deadline;
  // Keep trying (20 ms, doubling to 500 ms between rounds) while the peer
  // refuses or cannot be resolved, until the deadline: for a server that
  // may not be up yet. Without it, a refusal throws PeerFailure at once.
  bool retry = false;
  // When set, checked every `cancel_poll`; a set flag throws
  // InvalidArgument ("... was cancelled").
  const std::atomic<bool>* cancelled = nullptr;
  std::chrono::milliseconds cancel_poll{200};
};

// Connects to `host`:`port` (every address it resolves to, in order) and
// returns a socket with TCP_NODELAY on. `peer` names the other side in
// messages. Throws Timeout when the deadline passes ("cannot reach <peer>
// at host:port: <last error>" when retrying).
Socket connect_to(const std::string& host, int port, const std::string& peer, const ConnectOptions& options);

// "host:port" (an IPv6 host in brackets) split into host and port; throws
// InvalidArgument when malformed.
std::pair<std::string, int> split_address(const std::string& address);

// For a connection a server keeps open between requests: TCP_NODELAY, and
// keepalive that notices a peer whose host vanished within about two
// minutes (60 s idle, then 6 probes 10 s apart).
void keep_alive(int fd);
// For a connection between ranks, which may cross hosts: the kernel probes
// an idle connection every second, and a connection whose peer's host
// answers nothing for `timeout` (no acknowledgement of data or of a probe)
// breaks, with an error went_silent() accepts. A live peer's kernel answers
// even while its process computes or is stopped. Zero: nothing set.
void watch_liveness(int fd, std::chrono::milliseconds timeout);
// Whether a watched connection that broke with `error` broke because its
// peer's host answered nothing for the timeout: ETIMEDOUT, or the ICMP error
// the kernel reports in its place when one came meanwhile (EHOSTUNREACH,
// ENETUNREACH, EHOSTDOWN, ENONET: a neighbour that stopped answering ARP, a
// route gone). An established connection does not break on those before
// the timeout.
bool went_silent(int error);
// The peer's numeric address ("10.0.0.2", "::1"), or "" when unknown.
std::string peer_address(int fd);
// O_NONBLOCK on `fd` (for an event loop's descriptors).
void set_nonblocking(int fd);

// An eventfd that one thread polls for and any thread signals, to end a
// poll(2) early. signal() and clear() never throw.
class Wakeup {
 public:
  Wakeup();  // throws Internal when no eventfd can be made
  ~Wakeup();
  Wakeup(const Wakeup&) = delete;
  Wakeup& operator=(const Wakeup&) = delete;

  int fd() const { return fd_; }
  void signal() noexcept;
  void clear() noexcept;

 private:
  int fd_;
};

}  // namespace hora::net
