#include "control/control_channel.h"

#include <poll.h>

#include <cerrno>
#include <cstring>

#include "hora/errors.h"
#include "net/codec.h"
#include "store/cancellable_wait.h"

namespace hora::control {
namespace {

constexpr char kAddressKey[] = "control/address";
constexpr uint32_t kHelloMagic = 0x48524341;  // marks a hora control hello
constexpr size_t kMaxFrameBytes = size_t{1} << 30;

using net::load_u32_le;
using net::store_u32_le;

}  // namespace

std::string describe_set(const std::vector<int>& global_ranks) {
  std::string out = "process set [";
  for (size_t i = 0; i < global_ranks.size(); ++i) {
    if (i > 0) out += ", ";
    out += std::to_string(global_ranks[i]);
  }
  return out + "]";
}

ControlChannel::ControlChannel(const std::vector<int>& global_ranks, int rank, std::string set_name,
                               std::chrono::milliseconds send_timeout)
    : global_ranks_(global_ranks),
      rank_(rank),
      set_name_(std::move(set_name)),
      send_timeout_(send_timeout),
      links_(global_ranks.size()) {}

std::unique_ptr<ControlChannel> ControlChannel::connect(const std::vector<int>& global_ranks,
                                                        int rank, const std::string& set_name,
                                                        const std::string& hostname, Store& store,
                                                        std::chrono::milliseconds timeout,
                                                        const std::atomic<bool>& cancelled) {
  std::unique_ptr<ControlChannel> channel(new ControlChannel(global_ranks, rank, set_name, timeout));
  const auto deadline = Clock::now() + timeout;
  if (global_ranks.size() == 1) return channel;
  if (rank == 0) {
    std::optional<net::Listener> listener;
    try {
      listener.emplace(hostname);
    } catch (const InvalidArgument& e) {
      throw InvalidArgument(set_name + ": control plane: " + e.what());
    }
    const std::string& address = listener->address();
    store.set(kAddressKey, std::vector<uint8_t>(address.begin(), address.end()));
    channel->accept_members(*listener, deadline, timeout, cancelled);
  } else {
    channel->join_coordinator(store, deadline, timeout, cancelled);
  }
  return channel;
}

ControlChannel::~ControlChannel() {
  for (auto& link : links_) {
    if (link) link->socket.shutdown();
  }
}

// Accepts one connection per other member. A connection whose hello is
// missing or wrong is dropped, so a stray client cannot take a member's place.
void ControlChannel::accept_members(net::Listener& listener, Clock::time_point deadline,
                                    std::chrono::milliseconds timeout,
                                    const std::atomic<bool>& cancelled) {
  size_t joined = 0;
  while (joined + 1 < global_ranks_.size()) {
    if (cancelled) throw InvalidArgument(set_name_ + ": connecting the control plane was cancelled");
    net::Socket socket = listener.accept(std::min(deadline, Clock::now() + BackendFactory::kCancelPoll));
    if (!socket.valid() && Clock::now() < deadline) continue;
    if (!socket.valid()) {
      std::string missing;
      for (size_t r = 1; r < links_.size(); ++r) {
        if (!links_[r]) missing += (missing.empty() ? "" : ", ") + std::to_string(global_ranks_[r]);
      }
      throw Timeout(set_name_ + ": timed out after " + std::to_string(timeout.count()) +
                    " ms waiting for the control connections of global rank(s) [" + missing + "]");
    }
    uint8_t hello[8];
    try {
      socket.recv_exact(hello, sizeof(hello), deadline, "a joining member");
    } catch (const Error&) {
      continue;  // closed, or silent until the deadline
    }
    const uint32_t from = load_u32_le(hello + 4);
    if (load_u32_le(hello) != kHelloMagic || from == 0 || from >= links_.size() || links_[from]) {
      continue;
    }
    add_link(static_cast<int>(from), std::move(socket));
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
  const auto [host, port] = net::split_address(std::string(value.begin(), value.end()));
  net::ConnectOptions options;
  options.deadline = deadline;
  options.cancelled = &cancelled;
  options.cancel_poll = BackendFactory::kCancelPoll;
  const std::string coordinator = "the coordinator of " + set_name_ + " (" + peer_name(0) + ")";
  net::Socket socket = net::connect_to(host, port, coordinator, options);
  uint8_t hello[8];
  store_u32_le(hello, kHelloMagic);
  store_u32_le(hello + 4, static_cast<uint32_t>(rank_));
  socket.send_all(hello, deadline, coordinator);
  add_link(0, std::move(socket));
}

void ControlChannel::add_link(int rank, net::Socket socket) {
  auto link = std::make_unique<Link>();
  link->rank = rank;
  link->socket = std::move(socket);
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
  store_u32_le(header, static_cast<uint32_t>(bytes.size()));
  std::lock_guard<std::mutex> lock(link.send_mutex);
  try {
    link.socket.send_all(header, bytes, Clock::now() + send_timeout_, peer_name(to));
  } catch (const Error& e) {
    throw PeerFailure(set_name_ + ": control plane: " + e.what());
  }
}

void ControlChannel::wake() { wakeup_.signal(); }

std::optional<ControlMessage> ControlChannel::receive(Clock::time_point deadline) {
  std::vector<pollfd> fds;
  for (;;) {
    if (auto message = pop_frame()) return message;
    fds.assign(1, pollfd{wakeup_.fd(), POLLIN, 0});
    for (auto& link : links_) {
      if (link && !link->closed) fds.push_back(pollfd{link->socket.fd(), POLLIN, 0});
    }
    const int rc = poll(fds.data(), fds.size(), net::poll_timeout_ms(deadline));
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
      wakeup_.clear();
      return std::nullopt;
    }
    if (rc == 0 && Clock::now() >= deadline) return std::nullopt;
  }
}

void ControlChannel::drain(Link& link) {
  uint8_t chunk[64 * 1024];
  while (!link.closed) {
    const std::optional<size_t> got = link.socket.recv_available(chunk, sizeof(chunk));
    if (!got) {
      link.closed = true;  // EOF, or a reset connection
    } else if (*got == 0) {
      return;
    } else {
      link.received.insert(link.received.end(), chunk, chunk + *got);
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
      const size_t length = load_u32_le(buf.data());
      if (length > kMaxFrameBytes) {
        // A peer that breaks the framing is treated as gone.
        link->socket.shutdown();
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

}  // namespace hora::control
