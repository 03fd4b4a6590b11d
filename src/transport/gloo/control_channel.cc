#include "transport/gloo/control_channel.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "hora/errors.h"
#include "store/cancellable_wait.h"

namespace hora::gloo_transport {
namespace {

constexpr char kAddressKey[] = "control/address";
constexpr uint32_t kHelloMagic = 0x48524341;  // marks a hora control hello
constexpr size_t kMaxFrameBytes = size_t{1} << 30;

void put_u32(uint8_t* out, uint32_t value) {
  for (int i = 0; i < 4; ++i) out[i] = static_cast<uint8_t>(value >> (8 * i));
}

uint32_t get_u32(const uint8_t* in) {
  uint32_t value = 0;
  for (int i = 0; i < 4; ++i) value |= static_cast<uint32_t>(in[i]) << (8 * i);
  return value;
}

}  // namespace

ControlChannel::ControlChannel(const std::vector<int>& global_ranks, int rank,
                               std::string set_name)
    : global_ranks_(global_ranks),
      rank_(rank),
      set_name_(std::move(set_name)),
      links_(global_ranks.size()),
      wake_fd_(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) {
  if (wake_fd_.get() < 0) throw Internal(set_name_ + ": eventfd: " + std::strerror(errno));
}

std::unique_ptr<ControlChannel> ControlChannel::connect(const std::vector<int>& global_ranks,
                                                        int rank, const std::string& set_name,
                                                        const std::string& hostname, Store& store,
                                                        std::chrono::milliseconds timeout,
                                                        const std::atomic<bool>& cancelled) {
  std::unique_ptr<ControlChannel> channel(new ControlChannel(global_ranks, rank, set_name));
  const auto deadline = Clock::now() + timeout;
  if (global_ranks.size() == 1) return channel;
  if (rank == 0) {
    std::string address;
    UniqueFd listener = listen_on(hostname, &address);
    store.set(kAddressKey, std::vector<uint8_t>(address.begin(), address.end()));
    channel->accept_members(listener.get(), deadline, timeout, cancelled);
  } else {
    channel->join_coordinator(store, deadline, timeout, cancelled);
  }
  return channel;
}

ControlChannel::~ControlChannel() {
  for (auto& link : links_) {
    if (link) shutdown(link->fd.get(), SHUT_RDWR);
  }
}

// Accepts one connection per other member. A connection whose hello is
// missing or wrong is dropped, so a stray client cannot take a member's place.
void ControlChannel::accept_members(int listen_fd, Clock::time_point deadline,
                                    std::chrono::milliseconds timeout,
                                    const std::atomic<bool>& cancelled) {
  size_t joined = 0;
  while (joined + 1 < global_ranks_.size()) {
    if (cancelled) throw InvalidArgument(set_name_ + ": connecting the control plane was cancelled");
    UniqueFd fd = accept_before(listen_fd, std::min(deadline, Clock::now() + BackendFactory::kCancelPoll));
    if (fd.get() < 0 && Clock::now() < deadline) continue;
    if (fd.get() < 0) {
      std::string missing;
      for (size_t r = 1; r < links_.size(); ++r) {
        if (!links_[r]) missing += (missing.empty() ? "" : ", ") + std::to_string(global_ranks_[r]);
      }
      throw Timeout(set_name_ + ": timed out after " + std::to_string(timeout.count()) +
                    " ms waiting for the control connections of global rank(s) [" + missing + "]");
    }
    uint8_t hello[8];
    if (!read_exact(fd.get(), hello, sizeof(hello), deadline)) continue;
    const uint32_t from = get_u32(hello + 4);
    if (get_u32(hello) != kHelloMagic || from == 0 || from >= links_.size() || links_[from]) {
      continue;
    }
    add_link(static_cast<int>(from), std::move(fd), timeout);
    ++joined;
  }
}

void ControlChannel::join_coordinator(Store& store, Clock::time_point deadline,
                                      std::chrono::milliseconds timeout,
                                      const std::atomic<bool>& cancelled) {
  std::vector<uint8_t> value;
  try {
    value = get_unless_cancelled(store, kAddressKey, timeout, cancelled, BackendFactory::kCancelPoll,
                                 set_name_ + ": connecting the control plane");
  } catch (const Timeout& e) {
    throw Timeout(set_name_ + ": global rank " + std::to_string(global_ranks_[0]) +
                  " did not publish its control address: " + e.what());
  }
  const std::string address(value.begin(), value.end());
  UniqueFd fd = connect_to(address, deadline);
  uint8_t hello[8];
  put_u32(hello, kHelloMagic);
  put_u32(hello + 4, static_cast<uint32_t>(rank_));
  write_all(fd.get(), hello, sizeof(hello), nullptr, 0, peer_name(0));
  add_link(0, std::move(fd), timeout);
}

void ControlChannel::add_link(int rank, UniqueFd fd, std::chrono::milliseconds timeout) {
  configure_stream(fd.get(), timeout);
  auto link = std::make_unique<Link>();
  link->rank = rank;
  link->fd = std::move(fd);
  links_[rank] = std::move(link);
}

std::string ControlChannel::peer_name(int rank) const {
  return "global rank " + std::to_string(global_ranks_[rank]);
}

void ControlChannel::send(int to, const std::vector<uint8_t>& bytes) {
  const bool star = rank_ == 0 ? (to > 0 && to < static_cast<int>(links_.size())) : to == 0;
  if (!star) {
    throw InvalidArgument(set_name_ + ": set rank " + std::to_string(rank_) +
                          " cannot send a control message to set rank " + std::to_string(to));
  }
  if (bytes.size() > kMaxFrameBytes) {
    throw InvalidArgument(set_name_ + ": control message of " + std::to_string(bytes.size()) +
                          " bytes is too large");
  }
  Link& link = *links_[to];
  uint8_t header[4];
  put_u32(header, static_cast<uint32_t>(bytes.size()));
  std::lock_guard<std::mutex> lock(link.send_mutex);
  try {
    write_all(link.fd.get(), header, sizeof(header), bytes.data(), bytes.size(), peer_name(to));
  } catch (const Error& e) {
    throw PeerFailure(set_name_ + ": " + e.what());
  }
}

void ControlChannel::wake() {
  const uint64_t one = 1;
  // Cannot fail short of counter overflow; a failed write only loses a wake
  // that an earlier, still pending one already delivers.
  [[maybe_unused]] ssize_t rc = write(wake_fd_.get(), &one, sizeof(one));
}

std::optional<ControlMessage> ControlChannel::receive(Clock::time_point deadline) {
  std::vector<pollfd> fds;
  for (;;) {
    if (auto message = pop_frame()) return message;
    fds.assign(1, pollfd{wake_fd_.get(), POLLIN, 0});
    for (auto& link : links_) {
      if (link && !link->closed) fds.push_back(pollfd{link->fd.get(), POLLIN, 0});
    }
    const int rc = poll(fds.data(), fds.size(), poll_timeout_ms(deadline));
    if (rc < 0) {
      if (errno == EINTR) continue;
      throw Internal(set_name_ + ": poll: " + std::strerror(errno));
    }
    size_t i = 1;
    for (auto& link : links_) {
      if (link && !link->closed && fds[i++].revents != 0) drain(*link);
    }
    if (auto message = pop_frame()) return message;
    if (fds[0].revents & POLLIN) {
      uint64_t count = 0;
      [[maybe_unused]] ssize_t n = read(wake_fd_.get(), &count, sizeof(count));
      return std::nullopt;
    }
    if (rc == 0 && Clock::now() >= deadline) return std::nullopt;
  }
}

void ControlChannel::drain(Link& link) {
  uint8_t chunk[64 * 1024];
  while (!link.closed) {
    const ssize_t got = recv(link.fd.get(), chunk, sizeof(chunk), MSG_DONTWAIT);
    if (got > 0) {
      link.received.insert(link.received.end(), chunk, chunk + got);
    } else if (got < 0 && errno == EINTR) {
      continue;
    } else if (got < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      return;
    } else {
      link.closed = true;  // EOF, or a reset connection
    }
  }
}

std::optional<ControlMessage> ControlChannel::pop_frame() {
  for (size_t n = 0; n < links_.size(); ++n) {
    const size_t index = (next_link_ + n) % links_.size();
    Link* link = links_[index].get();
    if (!link) continue;
    auto& buf = link->received;
    if (buf.size() >= 4) {
      const size_t length = get_u32(buf.data());
      if (length > kMaxFrameBytes) {
        // A peer that breaks the framing is treated as gone.
        shutdown(link->fd.get(), SHUT_RDWR);
        buf.clear();
        link->closed = true;
      } else if (buf.size() >= 4 + length) {
        ControlMessage message{link->rank, std::vector<uint8_t>(buf.begin() + 4,
                                                                buf.begin() + 4 + length)};
        buf.erase(buf.begin(), buf.begin() + 4 + length);
        next_link_ = index + 1;
        return message;
      }
    }
    if (link->closed && !link->closure_reported) {
      link->closure_reported = true;
      next_link_ = index + 1;
      return ControlMessage{link->rank, {}, true};
    }
  }
  return std::nullopt;
}

}  // namespace hora::gloo_transport
