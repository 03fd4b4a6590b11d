#include "net/admission.h"

#include <poll.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>

#include "hora/errors.h"
#include "net/codec.h"
#include "util/log.h"

namespace hora::net {
namespace {

// Dropped connections logged per admission; the Timeout counts them all.
constexpr size_t kLoggedRefusals = 3;

}  // namespace

// A connection that has been sent its challenge and owes its answer.
struct Admission::Pending {
  Socket socket;
  Nonce nonce{};
  Clock::time_point deadline;
  std::array<uint8_t, kAnswerBytes> answer{};
  size_t received = 0;
};

void Admission::admit_all(Listener& listener, Clock::time_point deadline, std::chrono::milliseconds timeout,
                          const std::atomic<bool>& cancelled, const std::function<void(int, Socket)>& admitted) {
  const size_t size = rules_.global_ranks.size();
  joined_.assign(size, false);
  const size_t wanted = size - static_cast<size_t>(std::min<int>(rules_.lowest, static_cast<int>(size)));
  size_t joined = 0;
  std::vector<Pending> pending;
  std::vector<pollfd> fds;
  auto admit = [&](int rank, Socket socket) {
    ++joined;
    admitted(rank, std::move(socket));
  };
  while (joined < wanted) {
    if (cancelled) throw InvalidArgument(rules_.set_name + ": connecting the " + rules_.plane + " was cancelled");
    const auto now = Clock::now();
    if (now >= deadline) throw_timeout(timeout);
    auto wake_at = std::min(deadline, now + rules_.cancel_poll);
    std::erase_if(pending, [&](const Pending& hello) {
      if (now < hello.deadline) return false;
      refuse("no hello in time");
      return true;
    });
    const size_t room = wanted - joined + kSpareHellos;
    fds.assign(1, pollfd{pending.size() < room ? listener.fd() : -1, POLLIN, 0});
    for (const Pending& hello : pending) {
      fds.push_back(pollfd{hello.socket.fd(), POLLIN, 0});
      wake_at = std::min(wake_at, hello.deadline);
    }
    const int rc = poll(fds.data(), fds.size(), poll_timeout_ms(wake_at));
    if (rc < 0) {
      if (errno == EINTR) continue;
      throw Internal(rules_.set_name + ": poll: " + std::strerror(errno));
    }
    // Answers first: a connection accepted below has not seen its challenge.
    std::vector<Pending> waiting;
    for (size_t i = 0; i < pending.size(); ++i) {
      if (fds[i + 1].revents == 0 || !read_hello(pending[i], admit)) waiting.push_back(std::move(pending[i]));
    }
    pending = std::move(waiting);
    if (fds[0].revents != 0) accept_pending(listener, deadline, room, pending);
  }
}

void Admission::accept_pending(Listener& listener, Clock::time_point deadline, size_t room,
                               std::vector<Pending>& pending) {
  // Up to `room` pending hellos: a flood of connections can neither keep the
  // answers already in from being read nor push a member's out.
  while (pending.size() < room) {
    Socket socket = listener.accept(Clock::now());
    if (!socket.valid()) return;
    Pending hello;
    hello.nonce = random_nonce();
    hello.deadline = std::min(deadline, Clock::now() + kHelloTimeout);
    try {
      // 20 bytes on a new connection: they fit its send buffer at once.
      hello.socket = std::move(socket);
      hello.socket.send_all(encode_challenge(hello.nonce), hello.deadline, "a joining member");
    } catch (const Error& e) {
      refuse(std::string("sending the challenge: ") + e.what());
      continue;
    }
    pending.push_back(std::move(hello));
  }
}

bool Admission::read_hello(Pending& hello, const std::function<void(int, Socket)>& admitted) {
  const std::optional<size_t> got =
      hello.socket.recv_available(hello.answer.data() + hello.received, kAnswerBytes - hello.received);
  if (!got) {
    refuse("closed before its hello");
    return true;
  }
  hello.received += *got;
  if (hello.received < kAnswerBytes) return false;
  const AnswerCheck check = check_answer(hello.answer, rules_.key, rules_.context, rules_.global_ranks.size(),
                                         hello.nonce, static_cast<uint32_t>(std::max(rules_.lowest, 0)));
  if (!check.admitted()) {
    refuse(check.refusal);
  } else if (joined_[static_cast<size_t>(check.rank)]) {
    refuse("set rank " + std::to_string(check.rank) + " is connected already");
  } else {
    joined_[static_cast<size_t>(check.rank)] = true;
    admitted(check.rank, std::move(hello.socket));
  }
  return true;
}

void Admission::refuse(const std::string& why) {
  if (++refused_ <= kLoggedRefusals) log_warning(rules_.set_name + ": " + rules_.plane + ": dropped a connection: " + why);
  last_refusal_ = why;
}

void Admission::throw_timeout(std::chrono::milliseconds timeout) const {
  std::string missing;
  for (size_t r = static_cast<size_t>(std::max(rules_.lowest, 0)); r < joined_.size(); ++r) {
    if (!joined_[r]) missing += (missing.empty() ? "" : ", ") + std::to_string(rules_.global_ranks[r]);
  }
  std::string refusals;
  if (refused_ > 0)
    refusals = "; dropped " + std::to_string(refused_) + " connection(s) without a valid hello (the last: " +
               last_refusal_ + ")";
  throw Timeout(rules_.set_name + ": timed out after " + std::to_string(timeout.count()) + " ms waiting for the " +
                rules_.plane + " connections of global rank(s) [" + missing + "]" + refusals);
}

Socket join(const AddressRecord& record, const std::string& context, int rank, const std::string& peer,
            Clock::time_point deadline, const std::atomic<bool>& cancelled, std::chrono::milliseconds cancel_poll,
            const std::string& plane) {
  const auto [host, port] = split_address(record.address);
  ConnectOptions options;
  options.deadline = deadline;
  options.cancelled = &cancelled;
  options.cancel_poll = cancel_poll;
  Socket socket = connect_to(host, port, peer, options);
  // The listener sends its challenge once it admits members, which may be
  // long after the connection is accepted: wait for it in slices, so that
  // a cancelled connect gives up within about cancel_poll.
  while (!wait_ready(socket.fd(), POLLIN, std::min(deadline, Clock::now() + cancel_poll))) {
    if (cancelled) throw InvalidArgument(plane + ": connecting to " + peer + " was cancelled");
    if (Clock::now() >= deadline) break;  // recv_exact below names the timeout
  }
  std::array<uint8_t, kChallengeBytes> challenge;
  socket.recv_exact(challenge.data(), challenge.size(), deadline, peer);
  Nonce nonce;
  try {
    nonce = decode_challenge(challenge);
  } catch (const DecodeError& e) {
    throw PeerFailure(plane + ": " + peer + " sent a " + e.what());
  }
  socket.send_all(encode_answer(record.key, context, static_cast<uint32_t>(rank), nonce), deadline, peer);
  return socket;
}

}  // namespace hora::net
