#include "control/control_channel.h"

#include <poll.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "hora/errors.h"
#include "net/codec.h"
#include "store/cancellable_wait.h"
#include "util/durations.h"
#include "util/log.h"

namespace hora::control {
namespace {

constexpr char kAddressKey[] = "control/address";  // an AddressRecord (net/hello.h)

using net::AddressRecord;
using net::kMaxFrameBytes;

}  // namespace

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
                                                        const std::atomic<bool>& cancelled,
                                                        std::chrono::milliseconds link_timeout) {
  std::unique_ptr<ControlChannel> channel(new ControlChannel(global_ranks, rank, set_name, timeout));
  channel->link_timeout_ = link_timeout;
  const auto deadline = Clock::now() + timeout;
  if (global_ranks.size() == 1) return channel;
  if (rank == 0) {
    std::optional<net::Listener> listener;
    try {
      listener.emplace(hostname);
    } catch (const InvalidArgument& e) {
      throw InvalidArgument(set_name + ": control plane: " + e.what());
    }
    const AddressRecord record = net::fresh_address_record(listener->address());
    store.set(kAddressKey, net::encode_address_record(record));
    net::AdmissionRules rules;
    rules.key = record.key;
    rules.context = describe_set(global_ranks);
    rules.global_ranks = global_ranks;
    rules.set_name = set_name;
    rules.plane = "control plane";
    rules.cancel_poll = kCancelPoll;
    net::Admission(std::move(rules))
        .admit_all(*listener, deadline, timeout, cancelled,
                   [&](int member, net::Socket socket) { channel->add_link(member, std::move(socket)); });
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

void ControlChannel::join_coordinator(Store& store, Clock::time_point deadline,
                                      std::chrono::milliseconds timeout,
                                      const std::atomic<bool>& cancelled) {
  std::vector<uint8_t> value;
  try {
    value = get_unless_cancelled(store, kAddressKey, timeout, cancelled, kCancelPoll,
                                 set_name_ + ": connecting the control plane");
  } catch (const Timeout& e) {
    throw Timeout(set_name_ + ": global rank " + std::to_string(global_ranks_[0]) +
                  " did not publish its control address: " + e.what());
  }
  AddressRecord record;
  try {
    record = net::decode_address_record(value);
  } catch (const net::DecodeError& e) {
    throw Internal(set_name_ + ": control plane: " + e.what());
  }
  const std::string coordinator = "the coordinator of " + set_name_ + " (" + peer_name(0) + ")";
  net::Socket socket = net::join(record, describe_set(global_ranks_), rank_, coordinator, deadline, cancelled,
                                 kCancelPoll, set_name_ + ": control plane");
  add_link(0, std::move(socket));
}

void ControlChannel::add_link(int rank, net::Socket socket) {
  auto link = std::make_unique<Link>();
  link->rank = rank;
  link->socket = std::move(socket);
  net::watch_liveness(link->socket.fd(), link_timeout_);
  link->address = net::peer_address(link->socket.fd());
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
  const std::array<uint8_t, 4> header = net::frame_header(bytes.size());
  std::lock_guard<std::mutex> lock(link.send_mutex);
  int broken = 0;
  try {
    link.socket.send_all(header, bytes, Clock::now() + send_timeout_, peer_name(to), &broken);
  } catch (const Error& e) {
    // The first error is the cause: a send after a timed-out one sees only EPIPE.
    int none = 0;
    if (broken != 0) link.send_error.compare_exchange_strong(none, broken, std::memory_order_relaxed);
    throw PeerFailure(set_name_ + ": control plane: " + e.what());
  }
}

void ControlChannel::wake() { wakeup_.signal(); }

void ControlChannel::also_wake_on(int fd, std::function<void()> clear) {
  extra_wake_fd_ = fd;
  clear_extra_wake_ = std::move(clear);
}

std::optional<ControlPlane::Armed> ControlChannel::arm() {
  Armed armed;
  armed.fds.push_back(wakeup_.fd());
  if (extra_wake_fd_ >= 0) armed.fds.push_back(extra_wake_fd_);
  for (auto& link : links_) {
    if (!link) continue;
    if (link->frames.ready() || (link->closed && !link->closure_reported)) return std::nullopt;
    if (!link->closed) armed.fds.push_back(link->socket.fd());
  }
  return armed;
}

std::optional<ControlMessage> ControlChannel::receive(Clock::time_point deadline) {
  std::vector<pollfd> fds;
  for (;;) {
    if (auto message = pop_frame()) return message;
    fds.assign(1, pollfd{wakeup_.fd(), POLLIN, 0});
    for (auto& link : links_) {
      if (link && !link->closed) fds.push_back(pollfd{link->socket.fd(), POLLIN, 0});
    }
    if (extra_wake_fd_ >= 0) fds.push_back(pollfd{extra_wake_fd_, POLLIN, 0});
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
    const bool extra = extra_wake_fd_ >= 0 && (fds.back().revents & POLLIN);
    if (extra) clear_extra_wake_();
    if (fds[0].revents & POLLIN) wakeup_.clear();
    if (extra || (fds[0].revents & POLLIN)) return std::nullopt;
    if (rc == 0 && Clock::now() >= deadline) return std::nullopt;
  }
}

std::optional<ControlMessage> ControlChannel::receive_now() {
  if (auto message = pop_frame()) return message;
  for (auto& link : links_)
    if (link && !link->closed) drain(*link);
  return pop_frame();
}

std::optional<ControlMessage> ControlChannel::receive_from(int from) {
  if (auto message = pop_frame()) return message;
  Link* link = from >= 0 && static_cast<size_t>(from) < links_.size() ? links_[static_cast<size_t>(from)].get() : nullptr;
  if (!link || link->closed) return receive_now();
  drain(*link);
  return pop_frame();
}

void ControlChannel::drain(Link& link) {
  uint8_t chunk[64 * 1024];
  while (!link.closed) {
    const std::optional<size_t> got = link.socket.recv_available(chunk, sizeof(chunk), &link.error);
    if (!got) {
      link.closed = true;  // EOF, or a reset connection
    } else if (*got == 0) {
      return;
    } else {
      link.frames.append({chunk, *got});
      if (*got < sizeof(chunk)) return;
    }
  }
}

// The link's peer address unless it is this host's loopback.
std::string ControlChannel::remote_address(const Link& link) const {
  const std::string& a = link.address;
  const bool loopback = a.rfind("127.", 0) == 0 || a == "::1" || a.rfind("::ffff:127.", 0) == 0;
  return loopback ? "" : a;
}

// Why a closed link is the peer's host going silent, or "".
std::string ControlChannel::unreachable_text(const Link& link) const {
  // A sender may have been told first, the reader then seeing only an end.
  if (!net::went_silent(link.error) && !net::went_silent(link.send_error.load(std::memory_order_relaxed))) return "";
  const std::string address = link.address.empty() ? "its host" : link.address;
  return "no answer from " + address + " for " + seconds_text(link_timeout_) +
         " (HORA_LINK_TIMEOUT_SECONDS): its host is down or the network to it is cut";
}

std::optional<ControlMessage> ControlChannel::pop_frame() {
  for (size_t n = 0; n < links_.size(); ++n) {
    const size_t index = (next_link_ + n) % links_.size();
    Link* link = links_[index].get();
    if (!link) continue;
    if (std::optional<std::vector<uint8_t>> frame = link->frames.pop()) {
      next_link_ = index + 1;
      return ControlMessage{link->rank, std::move(*frame), false, {}, {}};
    }
    if (link->frames.broken() && !link->closed) {
      // A peer that breaks the framing is treated as gone.
      link->socket.shutdown();
      link->closed = true;
    }
    if (link->closed && !link->closure_reported) {
      link->closure_reported = true;
      next_link_ = index + 1;
      return ControlMessage{link->rank, {}, true, unreachable_text(*link), remote_address(*link)};
    }
  }
  return std::nullopt;
}

}  // namespace hora::control
