#include "transport/gloo/tcp_socket.h"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstring>
#include <memory>

#include "hora/errors.h"

namespace hora::gloo_transport {
namespace {

using AddrInfoPtr = std::unique_ptr<addrinfo, decltype(&freeaddrinfo)>;

AddrInfoPtr resolve(const std::string& host, const std::string& port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* result = nullptr;
  const int rc = getaddrinfo(host.c_str(), port.c_str(), &hints, &result);
  if (rc != 0) {
    throw InvalidArgument("cannot resolve host '" + host + "': " + gai_strerror(rc));
  }
  return AddrInfoPtr(result, &freeaddrinfo);
}

std::string errno_text(int error) { return std::strerror(error); }

// "host:port" of a bound socket; IPv6 hosts are bracketed.
std::string local_address(int fd) {
  sockaddr_storage addr{};
  socklen_t len = sizeof(addr);
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    throw Internal("control plane: getsockname: " + errno_text(errno));
  }
  char host[NI_MAXHOST];
  char port[NI_MAXSERV];
  const int rc = getnameinfo(reinterpret_cast<sockaddr*>(&addr), len, host, sizeof(host), port,
                             sizeof(port), NI_NUMERICHOST | NI_NUMERICSERV);
  if (rc != 0) throw Internal(std::string("control plane: getnameinfo: ") + gai_strerror(rc));
  const std::string h = addr.ss_family == AF_INET6 ? "[" + std::string(host) + "]" : host;
  return h + ":" + port;
}

// Waits for `events` on `fd`; false when the deadline passes first.
bool wait_for(int fd, short events, Clock::time_point deadline) {
  for (;;) {
    pollfd p{fd, events, 0};
    const int rc = poll(&p, 1, poll_timeout_ms(deadline));
    if (rc > 0) return true;
    if (rc == 0) return false;
    if (errno != EINTR) throw Internal("control plane: poll: " + errno_text(errno));
  }
}

void set_blocking(int fd, bool blocking) {
  const int flags = fcntl(fd, F_GETFL);
  fcntl(fd, F_SETFL, blocking ? (flags & ~O_NONBLOCK) : (flags | O_NONBLOCK));
}

}  // namespace

UniqueFd& UniqueFd::operator=(UniqueFd&& other) noexcept {
  if (this != &other) {
    reset();
    fd_ = other.release();
  }
  return *this;
}

void UniqueFd::reset() noexcept {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

int poll_timeout_ms(Clock::time_point deadline) {
  const auto now = Clock::now();
  if (deadline <= now) return 0;
  const auto ms = std::chrono::ceil<std::chrono::milliseconds>(deadline - now).count();
  return ms > INT_MAX ? -1 : static_cast<int>(ms);
}

UniqueFd listen_on(const std::string& host, std::string* address) {
  auto info = resolve(host, "0");
  int last_error = 0;
  for (addrinfo* ai = info.get(); ai != nullptr; ai = ai->ai_next) {
    UniqueFd fd(socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (fd.get() < 0 || bind(fd.get(), ai->ai_addr, ai->ai_addrlen) != 0 ||
        listen(fd.get(), SOMAXCONN) != 0) {
      last_error = errno;
      continue;
    }
    *address = local_address(fd.get());
    return fd;
  }
  throw InvalidArgument("control plane: cannot listen on '" + host + "': " +
                        errno_text(last_error));
}

UniqueFd connect_to(const std::string& address, Clock::time_point deadline) {
  const size_t colon = address.rfind(':');
  if (colon == std::string::npos) throw Internal("control plane: bad address '" + address + "'");
  std::string host = address.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[') host = host.substr(1, host.size() - 2);
  auto info = resolve(host, address.substr(colon + 1));
  const addrinfo* ai = info.get();
  UniqueFd fd(socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (fd.get() < 0) throw Internal("control plane: socket: " + errno_text(errno));
  if (connect(fd.get(), ai->ai_addr, ai->ai_addrlen) != 0) {
    if (errno != EINPROGRESS) {
      throw PeerFailure("control plane: cannot connect to " + address + ": " + errno_text(errno));
    }
    if (!wait_for(fd.get(), POLLOUT, deadline)) {
      throw Timeout("control plane: timed out connecting to " + address);
    }
    int error = 0;
    socklen_t len = sizeof(error);
    getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &error, &len);
    if (error != 0) {
      throw PeerFailure("control plane: cannot connect to " + address + ": " + errno_text(error));
    }
  }
  set_blocking(fd.get(), true);
  return fd;
}

UniqueFd accept_before(int listen_fd, Clock::time_point deadline) {
  while (wait_for(listen_fd, POLLIN, deadline)) {
    const int fd = accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd >= 0) return UniqueFd(fd);
    if (errno != EINTR && errno != ECONNABORTED) {
      throw Internal("control plane: accept: " + errno_text(errno));
    }
  }
  return UniqueFd();
}

void configure_stream(int fd, std::chrono::milliseconds send_timeout) {
  int on = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &on, sizeof(on));
  const auto ms = std::max<int64_t>(send_timeout.count(), 1);
  timeval tv{};
  tv.tv_sec = static_cast<time_t>(ms / 1000);
  tv.tv_usec = static_cast<suseconds_t>((ms % 1000) * 1000);
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
}

void write_all(int fd, const void* head, size_t head_bytes, const void* body, size_t body_bytes,
               const std::string& peer) {
  iovec iov[2] = {{const_cast<void*>(head), head_bytes}, {const_cast<void*>(body), body_bytes}};
  msghdr msg{};
  msg.msg_iov = iov;
  msg.msg_iovlen = 2;
  while (msg.msg_iovlen > 0) {
    const ssize_t sent = sendmsg(fd, &msg, MSG_NOSIGNAL);
    if (sent < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) {
        throw Timeout("control plane: timed out sending to " + peer);
      }
      throw PeerFailure("control plane: cannot send to " + peer + ": " + errno_text(errno));
    }
    // Drop what was written from the front of the iovec list.
    size_t left = static_cast<size_t>(sent);
    while (msg.msg_iovlen > 0 && left >= msg.msg_iov[0].iov_len) {
      left -= msg.msg_iov[0].iov_len;
      ++msg.msg_iov;
      --msg.msg_iovlen;
    }
    if (msg.msg_iovlen > 0) {
      msg.msg_iov[0].iov_base = static_cast<uint8_t*>(msg.msg_iov[0].iov_base) + left;
      msg.msg_iov[0].iov_len -= left;
    }
  }
}

bool read_exact(int fd, void* out, size_t bytes, Clock::time_point deadline) {
  auto* dst = static_cast<uint8_t*>(out);
  while (bytes > 0) {
    if (!wait_for(fd, POLLIN, deadline)) return false;
    const ssize_t got = recv(fd, dst, bytes, MSG_DONTWAIT);
    if (got == 0) return false;
    if (got < 0) {
      if (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK) continue;
      return false;
    }
    dst += got;
    bytes -= static_cast<size_t>(got);
  }
  return true;
}

}  // namespace hora::gloo_transport
