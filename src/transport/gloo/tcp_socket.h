// Blocking-socket building blocks of the control plane: an owning fd, a
// listener on an ephemeral port, a connect with a deadline, whole writes and
// reads. Errors throw hora::PeerFailure or hora::Timeout.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>

namespace hora::gloo_transport {

using Clock = std::chrono::steady_clock;

// Owns one file descriptor; closes it on destruction.
class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  UniqueFd(UniqueFd&& other) noexcept : fd_(other.release()) {}
  UniqueFd& operator=(UniqueFd&& other) noexcept;
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;
  ~UniqueFd() { reset(); }

  int get() const { return fd_; }
  int release() {
    const int fd = fd_;
    fd_ = -1;
    return fd;
  }
  void reset() noexcept;

 private:
  int fd_ = -1;
};

// Listens on `host` at a port the kernel picks; `address` receives
// "host:port" for peers to connect to.
UniqueFd listen_on(const std::string& host, std::string* address);

// Connects to "host:port" before `deadline`. Returns a blocking socket with
// TCP_NODELAY on.
UniqueFd connect_to(const std::string& address, Clock::time_point deadline);

// Accepts one connection before `deadline`; an invalid fd on timeout.
UniqueFd accept_before(int listen_fd, Clock::time_point deadline);

// TCP_NODELAY on, and a send timeout so a stuck peer cannot block writers
// forever.
void configure_stream(int fd, std::chrono::milliseconds send_timeout);

// Writes both buffers completely (partial writes, EINTR). Throws
// PeerFailure on a closed connection and Timeout when the send timeout
// passes; `peer` names the other side in messages.
void write_all(int fd, const void* head, size_t head_bytes, const void* body, size_t body_bytes,
               const std::string& peer);

// Reads exactly `bytes` before `deadline`; false on EOF or timeout.
bool read_exact(int fd, void* out, size_t bytes, Clock::time_point deadline);

// Milliseconds from now until `deadline` for poll(2): 0 when passed, -1
// when too far to represent.
int poll_timeout_ms(Clock::time_point deadline);

}  // namespace hora::gloo_transport
