#include "net/socket.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <climits>
#include <cstring>
#include <map>
#include <memory>
#include <thread>

#include "hora/errors.h"

namespace hora::net {
namespace {

using std::chrono::milliseconds;
using AddrInfoPtr = std::unique_ptr<addrinfo, decltype(&freeaddrinfo)>;

std::string errno_text(int error) { return std::strerror(error); }

// The addresses of `host`:`port`, or nullptr with `error` set.
AddrInfoPtr resolve(const std::string& host, const std::string& port, bool passive, std::string& error) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = passive ? AI_PASSIVE : 0;
  addrinfo* result = nullptr;
  const int rc = getaddrinfo(host.c_str(), port.c_str(), &hints, &result);
  if (rc != 0) {
    error = gai_strerror(rc);
    return AddrInfoPtr(nullptr, &freeaddrinfo);
  }
  return AddrInfoPtr(result, &freeaddrinfo);
}

void set_no_delay(int fd) {
  const int on = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &on, sizeof(on));
}

void set_blocking(int fd) {
  const int flags = fcntl(fd, F_GETFL);
  if (flags >= 0) fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
}

void check_cancelled(const ConnectOptions& options, const std::string& peer) {
  if (options.cancelled != nullptr && options.cancelled->load()) {
    throw InvalidArgument("connecting to " + peer + " was cancelled");
  }
}

// The end of the next wait: the deadline, or sooner when a cancel flag
// must be looked at.
Clock::time_point next_check(const ConnectOptions& options, Clock::time_point deadline) {
  if (options.cancelled == nullptr) return deadline;
  return std::min(deadline, Clock::now() + options.cancel_poll);
}

// One connect attempt to one address, given at least 100 ms; an invalid
// Socket with `error` set when it fails.
Socket connect_once(const addrinfo& address, const std::string& peer, const ConnectOptions& options,
                    std::string& error) {
  Socket socket(::socket(address.ai_family, address.ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK,
                         address.ai_protocol));
  if (!socket.valid()) {
    error = errno_text(errno);
    return Socket();
  }
  int status = ::connect(socket.fd(), address.ai_addr, address.ai_addrlen) == 0 ? 0 : errno;
  if (status == EINPROGRESS) {
    const auto deadline = std::max(options.deadline, Clock::now() + milliseconds{100});
    status = ETIMEDOUT;
    for (;;) {
      check_cancelled(options, peer);
      if (wait_ready(socket.fd(), POLLOUT, next_check(options, deadline))) {
        socklen_t length = sizeof(status);
        getsockopt(socket.fd(), SOL_SOCKET, SO_ERROR, &status, &length);
        break;
      }
      if (Clock::now() >= deadline) break;
    }
  }
  if (status != 0) {
    error = errno_text(status);
    return Socket();
  }
  set_blocking(socket.fd());
  set_no_delay(socket.fd());
  return socket;
}

// "host:port" of a bound socket; IPv6 hosts are bracketed.
std::string local_address(int fd, int* port) {
  sockaddr_storage address{};
  socklen_t length = sizeof(address);
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) != 0) {
    throw Internal("getsockname: " + errno_text(errno));
  }
  char host[NI_MAXHOST];
  char service[NI_MAXSERV];
  const int rc = getnameinfo(reinterpret_cast<sockaddr*>(&address), length, host, sizeof(host), service,
                             sizeof(service), NI_NUMERICHOST | NI_NUMERICSERV);
  if (rc != 0) throw Internal(std::string("getnameinfo: ") + gai_strerror(rc));
  *port = std::atoi(service);
  const std::string h = address.ss_family == AF_INET6 ? "[" + std::string(host) + "]" : host;
  return h + ":" + service;
}

}  // namespace

int poll_timeout_ms(Clock::time_point deadline) {
  const auto now = Clock::now();
  if (deadline <= now) return 0;
  const auto ms = std::chrono::ceil<milliseconds>(deadline - now).count();
  return ms > INT_MAX ? -1 : static_cast<int>(ms);
}

bool wait_ready(int fd, short events, Clock::time_point deadline) {
  for (;;) {
    pollfd p{fd, events, 0};
    const int rc = poll(&p, 1, poll_timeout_ms(deadline));
    if (rc > 0) return true;
    if (rc == 0 && Clock::now() >= deadline) return false;
    if (rc < 0 && errno != EINTR) throw Internal("poll: " + errno_text(errno));
  }
}

// --- Socket ------------------------------------------------------------------

Socket& Socket::operator=(Socket&& other) noexcept {
  if (this != &other) {
    close();
    fd_ = other.release();
  }
  return *this;
}

void Socket::close() noexcept {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

void Socket::shutdown(bool write_only) noexcept {
  if (fd_ >= 0) ::shutdown(fd_, write_only ? SHUT_WR : SHUT_RDWR);
}

void Socket::send_all(std::span<const uint8_t> head, std::span<const uint8_t> body, Clock::time_point deadline,
                      const std::string& peer, int* error) {
  iovec iov[2] = {{const_cast<uint8_t*>(head.data()), head.size()},
                  {const_cast<uint8_t*>(body.data()), body.size()}};
  msghdr message{};
  message.msg_iov = iov;
  message.msg_iovlen = 2;
  while (message.msg_iovlen > 0 && message.msg_iov[0].iov_len == 0) {
    ++message.msg_iov;
    --message.msg_iovlen;
  }
  while (message.msg_iovlen > 0) {
    const ssize_t sent = sendmsg(fd_, &message, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (sent < 0) {
      if (errno == EINTR) continue;
      if (errno != EAGAIN && errno != EWOULDBLOCK) {
        const int broken = errno;
        if (error) *error = broken;
        throw PeerFailure("cannot send to " + peer + ": " + errno_text(broken));
      }
      if (!wait_ready(fd_, POLLOUT, deadline)) throw Timeout("timed out sending to " + peer);
      continue;
    }
    // Drop what was written from the front of the iovec list.
    size_t left = static_cast<size_t>(sent);
    while (message.msg_iovlen > 0 && left >= message.msg_iov[0].iov_len) {
      left -= message.msg_iov[0].iov_len;
      ++message.msg_iov;
      --message.msg_iovlen;
    }
    if (message.msg_iovlen > 0) {
      message.msg_iov[0].iov_base = static_cast<uint8_t*>(message.msg_iov[0].iov_base) + left;
      message.msg_iov[0].iov_len -= left;
    }
  }
}

void Socket::recv_exact(void* out, size_t n, Clock::time_point deadline, const std::string& peer) {
  auto* dst = static_cast<uint8_t*>(out);
  while (n > 0) {
    const ssize_t got = recv(fd_, dst, n, MSG_DONTWAIT);
    if (got > 0) {
      dst += got;
      n -= static_cast<size_t>(got);
    } else if (got == 0) {
      throw PeerFailure(peer + " closed the connection");
    } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
      if (!wait_ready(fd_, POLLIN, deadline)) throw Timeout("timed out waiting for " + peer);
    } else if (errno != EINTR) {
      throw PeerFailure("cannot receive from " + peer + ": " + errno_text(errno));
    }
  }
}

std::optional<size_t> Socket::recv_available(void* out, size_t n, int* error) {
  for (;;) {
    const ssize_t got = recv(fd_, out, n, MSG_DONTWAIT);
    if (got > 0) return static_cast<size_t>(got);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return 0;
    if (error) *error = got < 0 ? errno : 0;
    return std::nullopt;  // the end of the stream, or a reset connection
  }
}

// --- Listener ----------------------------------------------------------------

Listener::Listener(const std::string& host, int port) {
  if (port < 0 || port > 65535) throw InvalidArgument("cannot listen on port " + std::to_string(port) + ": not a TCP port");
  std::string error = "no address";
  const AddrInfoPtr addresses = resolve(host, std::to_string(port), /*passive=*/true, error);
  if (!addresses) throw InvalidArgument("cannot resolve host '" + host + "': " + error);
  for (const addrinfo* a = addresses.get(); a != nullptr; a = a->ai_next) {
    Socket socket(::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol));
    if (!socket.valid()) {
      error = errno_text(errno);
      continue;
    }
    const int one = 1;
    setsockopt(socket.fd(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(socket.fd(), a->ai_addr, a->ai_addrlen) != 0 || listen(socket.fd(), SOMAXCONN) != 0) {
      error = errno_text(errno);
      continue;
    }
    address_ = local_address(socket.fd(), &port_);
    socket_ = std::move(socket);
    return;
  }
  throw InvalidArgument("cannot listen on '" + host + (port ? ":" + std::to_string(port) : "") + "': " + error);
}

Socket Listener::accept(Clock::time_point deadline, int stop_fd) {
  for (;;) {
    pollfd fds[2] = {{socket_.fd(), POLLIN, 0}, {stop_fd, POLLIN, 0}};
    const int rc = poll(fds, stop_fd >= 0 ? 2 : 1, poll_timeout_ms(deadline));
    if (rc < 0 && errno != EINTR) throw Internal("poll: " + errno_text(errno));
    if (rc <= 0) {
      if (rc == 0 && Clock::now() >= deadline) return Socket();
      continue;
    }
    if (stop_fd >= 0 && fds[1].revents != 0) return Socket();
    Socket socket(accept4(socket_.fd(), nullptr, nullptr, SOCK_CLOEXEC));
    if (socket.valid()) {
      set_no_delay(socket.fd());
      return socket;
    }
    if (errno != EINTR && errno != ECONNABORTED && errno != EAGAIN && errno != EWOULDBLOCK) {
      throw Internal("accept: " + errno_text(errno));
    }
  }
}

// --- connecting ----------------------------------------------------------------

Socket connect_to(const std::string& host, int port, const std::string& peer, const ConnectOptions& options) {
  const std::string where = host + ":" + std::to_string(port);
  std::string error = "no address";
  milliseconds pause{20};
  for (;;) {
    check_cancelled(options, peer);
    const AddrInfoPtr addresses = resolve(host, std::to_string(port), /*passive=*/false, error);
    if (!addresses && !options.retry) throw InvalidArgument("cannot resolve host '" + host + "': " + error);
    for (const addrinfo* a = addresses.get(); a != nullptr; a = a->ai_next) {
      Socket socket = connect_once(*a, peer, options, error);
      if (socket.valid()) return socket;
    }
    if (Clock::now() >= options.deadline) {
      if (options.retry) throw Timeout("cannot reach " + peer + " at " + where + ": " + error);
      throw Timeout("timed out connecting to " + peer + " at " + where);
    }
    if (!options.retry) throw PeerFailure("cannot connect to " + peer + " at " + where + ": " + error);
    const auto resume = std::min(options.deadline, Clock::now() + pause);
    while (Clock::now() < resume) {
      check_cancelled(options, peer);
      std::this_thread::sleep_until(next_check(options, resume));
    }
    pause = std::min(pause * 2, milliseconds{500});
  }
}

std::pair<std::string, int> split_address(const std::string& address) {
  const size_t colon = address.rfind(':');
  int port = 0;
  const char* end = address.data() + address.size();
  if (colon == std::string::npos || std::from_chars(address.data() + colon + 1, end, port).ptr != end ||
      port <= 0 || port > 65535) {
    throw InvalidArgument("'" + address + "' is not a host:port address");
  }
  std::string host = address.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  return {host, port};
}

// --- Wakeup --------------------------------------------------------------------

Wakeup::Wakeup() : fd_(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) {
  if (fd_ < 0) throw Internal("eventfd: " + errno_text(errno));
}

Wakeup::~Wakeup() { ::close(fd_); }

void Wakeup::signal() noexcept {
  const uint64_t one = 1;
  // Cannot fail short of counter overflow; a failed write only loses a wake
  // that an earlier, still pending one already delivers.
  [[maybe_unused]] ssize_t rc = write(fd_, &one, sizeof(one));
}

void Wakeup::clear() noexcept {
  uint64_t count = 0;
  [[maybe_unused]] ssize_t rc = read(fd_, &count, sizeof(count));
}

void keep_alive(int fd) {
  const int on = 1, idle = 60, interval = 10, count = 6;
  setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &on, sizeof(on));
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof(idle));
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &interval, sizeof(interval));
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &count, sizeof(count));
  set_no_delay(fd);
}

void watch_liveness(int fd, std::chrono::milliseconds timeout) {
  if (timeout.count() <= 0) return;
  const int on = 1, idle = 1, interval = 1;
  const int count = static_cast<int>(std::max<int64_t>(1, timeout.count() / 1000));
  const unsigned user_timeout = static_cast<unsigned>(std::min<int64_t>(timeout.count(), 1'000'000'000));
  setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &on, sizeof(on));
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof(idle));
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &interval, sizeof(interval));
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &count, sizeof(count));
  setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &user_timeout, sizeof(user_timeout));
}

bool went_silent(int error) {
  return error == ETIMEDOUT || error == EHOSTUNREACH || error == ENETUNREACH || error == EHOSTDOWN || error == ENONET;
}

std::string peer_address(int fd) {
  sockaddr_storage address{};
  socklen_t length = sizeof(address);
  if (getpeername(fd, reinterpret_cast<sockaddr*>(&address), &length) != 0) return "";
  char host[NI_MAXHOST];
  if (getnameinfo(reinterpret_cast<sockaddr*>(&address), length, host, sizeof(host), nullptr, 0, NI_NUMERICHOST) != 0)
    return "";
  return host;
}

void set_nonblocking(int fd) {
  const int flags = fcntl(fd, F_GETFL);
  if (flags >= 0) fcntl(fd, F_SETFL, flags | O_NONBLOCK);
}

}  // namespace hora::net
