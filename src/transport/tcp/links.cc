#include "transport/tcp/links.h"

#include <sched.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "hora/errors.h"
#include "transport/backend.h"
#include "util/caller_waits.h"
#include "util/sleep_notice.h"

namespace hora::tcp_transport {
namespace {

// The most one send(2) or recv(2) moves: a pair exchanging large buffers
// then alternates between its directions instead of filling a whole socket
// buffer in one call while the other direction waits.
constexpr size_t kMostPerCall = 256 << 10;

}  // namespace

Links::Links(std::vector<int> global_ranks, int rank, std::vector<net::Socket> sockets, Waiting waiting)
    : global_ranks_(std::move(global_ranks)),
      rank_(rank),
      set_name_(describe_set(global_ranks_)),
      sockets_(std::move(sockets)),
      addresses_(sockets_.size()),
      waiting_(waiting) {
  for (size_t peer = 0; peer < sockets_.size(); ++peer) {
    if (!sockets_[peer].valid()) continue;
    net::set_nonblocking(sockets_[peer].fd());
    addresses_[peer] = net::peer_address(sockets_[peer].fd());
  }
}

Links::~Links() {
  for (auto& socket : sockets_) socket.shutdown();
}

std::string Links::peer_name(int peer) const {
  std::string name = "global rank " + std::to_string(global_ranks_[static_cast<size_t>(peer)]);
  const std::string& address = addresses_[static_cast<size_t>(peer)];
  return address.empty() ? name : name + " (at " + address + ")";
}

void Links::abort(const std::string& reason) {
  {
    std::lock_guard<std::mutex> lock(reason_mutex_);
    if (broken_) return;
    reason_ = reason;
    broken_ = true;
  }
  for (auto& socket : sockets_) socket.shutdown();
  wakeup_.signal();
}

void Links::fail(const std::string& message, bool timeout) {
  abort(message);
  std::string reason;
  {
    std::lock_guard<std::mutex> lock(reason_mutex_);
    reason = reason_;  // abort() from another thread may have come first
  }
  if (timeout && reason == message) throw Timeout(message);
  throw PeerFailure(reason);
}

void Links::check_usable(const char* what) {
  if (!broken_) return;
  std::lock_guard<std::mutex> lock(reason_mutex_);
  throw PeerFailure(set_name_ + ": " + what + " on a data plane given up: " + reason_);
}

bool Links::pump(std::span<Move> moves, const char* what) {
  bool progress = false;
  for (Move& move : moves) {
    if (move.done == move.bytes) continue;
    const int fd = sockets_[static_cast<size_t>(move.peer)].fd();
    ssize_t n;
    if (move.send) {
      const size_t ready = move.limit ? std::min(*move.limit, move.bytes) : move.bytes;
      if (ready <= move.done) continue;
      n = ::send(fd, move.data + move.done, std::min(ready - move.done, kMostPerCall), MSG_DONTWAIT | MSG_NOSIGNAL);
    } else {
      n = ::recv(fd, move.data + move.done, std::min(move.bytes - move.done, kMostPerCall), MSG_DONTWAIT);
      if (n == 0) {
        fail(set_name_ + ": " + what + ": " + peer_name(move.peer) + " closed its data connection", false);
      }
    }
    if (n > 0) {
      move.done += static_cast<size_t>(n);
      progress = true;
      if (!move.send && move.arrived) move.arrived(move.context, move.done);
      continue;
    }
    if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) continue;
    const int error = errno;
    if (broken_) check_usable(what);
    fail(set_name_ + ": " + what + ": the data connection to " + peer_name(move.peer) + " broke: " +
             (net::went_silent(error) ? "its host answers nothing (HORA_LINK_TIMEOUT_SECONDS)" : std::strerror(error)),
         false);
  }
  return progress;
}

void Links::sleep(std::span<Move> moves, Clock::time_point deadline, bool& napped, const char* what) {
  fds_.assign(1, pollfd{wakeup_.fd(), POLLIN, 0});
  for (const Move& move : moves) {
    if (move.done == move.bytes) continue;
    if (move.send && move.limit && *move.limit <= move.done) continue;  // waits on its receive
    fds_.push_back(pollfd{sockets_[static_cast<size_t>(move.peer)].fd(), static_cast<short>(move.send ? POLLOUT : POLLIN), 0});
  }
  const auto now = Clock::now();
  if (now >= deadline) {
    std::string waiting;
    for (const Move& move : moves) {
      if (move.done < move.bytes)
        waiting += std::string(waiting.empty() ? "" : "; ") + (move.send ? "sending to " : "receiving from ") +
                   peer_name(move.peer) + " (" + std::to_string(move.done) + " of " + std::to_string(move.bytes) +
                   " bytes)";
    }
    fail(set_name_ + ": " + what + " timed out: no byte moved for " + std::to_string(waiting_.timeout.count()) +
             " ms: " + waiting,
         true);
  }
  auto nap = deadline - now;
  if (!napped && sleep_noticed()) nap = std::min<Clock::duration>(nap, kNapBeforeNotice);
  else about_to_sleep();
  napped = true;
  const int ms = static_cast<int>(std::max<int64_t>(
      1, std::min<int64_t>(std::chrono::ceil<std::chrono::milliseconds>(nap).count(), 1000)));
  if (::poll(fds_.data(), fds_.size(), ms) < 0 && errno != EINTR) {
    fail(set_name_ + ": " + what + ": poll: " + std::strerror(errno), false);
  }
}

void Links::run(std::span<Move> moves, const char* what) {
  check_usable(what);
  try {
    progress(moves, what);
  } catch (const Error&) {
    throw;  // fail() or check_usable() broke the links already
  } catch (const std::exception& e) {
    // A reduction that threw mid-round leaves the streams out of step with
    // the peers: no later round may use them.
    abort(set_name_ + ": " + what + ": " + e.what());
    throw;
  }
}

void Links::progress(std::span<Move> moves, const char* what) {
  bool napped = false;
  auto last_progress = Clock::now();
  for (int looks = 0;; ++looks) {
    if (pump(moves, what)) last_progress = Clock::now();
    if (std::all_of(moves.begin(), moves.end(), [](const Move& m) { return m.done == m.bytes; })) return;
    check_usable(what);
    const auto now = Clock::now();
    const auto spun = now - last_progress;
    if (spun < waiting_.spin && (spun < kUnwatchedSpin || caller_waiting())) {
      // The peer this waits for may be queued behind this thread on the
      // same CPU (the scheduler keeps threads that wake each other
      // together): now and then, let it run.
      if ((looks & 15) == 15) sched_yield();
      else cpu_relax();
      continue;
    }
    // The round's timeout runs from its last progress, as long as bytes
    // keep moving.
    sleep(moves, last_progress + waiting_.timeout, napped, what);
  }
}

}  // namespace hora::tcp_transport
