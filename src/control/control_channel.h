// The control channel of one process set: the negotiation messages between
// its members and its coordinator (set rank 0), over TCP, apart from any
// backend's data connections.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "control/control_plane.h"
#include "hora/store.h"
#include "net/admission.h"
#include "net/frames.h"
#include "net/socket.h"
#include "transport/backend.h"  // describe_set

namespace hora::control {

using Clock = net::Clock;

using ::hora::describe_set;

// A star of TCP connections between set rank 0 and every other member,
// carrying frames of [u32 length, little-endian][bytes] (net/frames.h).
//
// Set rank 0 listens on an ephemeral port of `hostname` and publishes its
// address with a fresh key for the set in the set's store; every other
// member connects and proves its set rank with the hello of
// net/hello.h (an HMAC of a nonce the coordinator sends under that key).
// The coordinator admits them as net::Admission does: no stray or silent
// client can take a member's place or delay the others. send() may
// be called from any thread (one mutex per connection); receive() only
// from the engine thread, which blocks in poll(2) on every open connection
// plus an eventfd that wake() signals. A connection that closes (or sends a
// malformed frame) is reported once by receive(), as ControlPlane::receive
// describes. The destructor closes every connection.
class ControlChannel final : public ControlPlane {
 public:
  // Blocks until the star is connected, `timeout` passes (Timeout naming
  // the missing global ranks) or `cancelled` is set (InvalidArgument, within
  // about kCancelPoll). `set_name` prefixes error messages.
  // A send that cannot finish within `timeout` throws PeerFailure.
  static std::unique_ptr<ControlChannel> connect(const std::vector<int>& global_ranks, int rank,
                                                 const std::string& set_name,
                                                 const std::string& hostname, Store& store,
                                                 std::chrono::milliseconds timeout,
                                                 const std::atomic<bool>& cancelled,
                                                 std::chrono::milliseconds link_timeout = {});
  ~ControlChannel() override;

  void send(int to, const std::vector<uint8_t>& bytes) override;
  std::optional<ControlMessage> receive(Clock::time_point deadline) override;
  // One read of each connection, no poll(2).
  std::optional<ControlMessage> receive_now() override;
  // One read of the connection to set rank `from`.
  std::optional<ControlMessage> receive_from(int from) override;
  void wake() override;
  // Arms as the connections and the wake-up descriptor: readable when
  // receive() has something.
  bool armable() const override { return true; }
  std::optional<Armed> arm() override;
  bool can_wake_on_descriptors() const override { return true; }
  void also_wake_on(int fd, std::function<void()> clear) override;

 private:
  // One connection, to set rank `rank`.
  struct Link {
    int rank = -1;
    net::Socket socket;
    std::mutex send_mutex;          // serialises writers of whole frames
    net::FrameReader frames;        // bytes read but not yet returned
    std::string address;            // the peer's numeric address
    int error = 0;                  // the errno that broke it (0: EOF)
    // The first errno a send saw break it (any sender): the kernel reports
    // a connection's breaking once, to a send or to the reader, and later
    // sends see only EPIPE.
    std::atomic<int> send_error{0};
    bool closed = false;            // EOF or error seen (engine thread only)
    bool closure_reported = false;  // receive() has returned the closure
  };

  ControlChannel(const std::vector<int>& global_ranks, int rank, std::string set_name,
                 std::chrono::milliseconds send_timeout);
  void join_coordinator(Store& store, Clock::time_point deadline, std::chrono::milliseconds timeout,
                        const std::atomic<bool>& cancelled);
  void add_link(int rank, net::Socket socket);
  // A complete frame from some link (round robin), or the closure of a
  // link whose frames have all been returned; nullopt if neither.
  std::optional<ControlMessage> pop_frame();
  // Reads what the socket has now: stops after a read that did not fill
  // the buffer, without reading again to learn there is no more (what
  // comes later makes the socket readable again, for the next poll or the
  // pool's watch).
  void drain(Link& link);
  std::string peer_name(int rank) const;
  std::string unreachable_text(const Link& link) const;
  std::string remote_address(const Link& link) const;

  const std::vector<int> global_ranks_;
  const int rank_;
  const std::string set_name_;
  const std::chrono::milliseconds send_timeout_;
  std::chrono::milliseconds link_timeout_{0};  // net::watch_liveness; 0: off
  std::vector<std::unique_ptr<Link>> links_;  // by set rank; null where no connection
  net::Wakeup wakeup_;
  int extra_wake_fd_ = -1;  // also_wake_on()
  std::function<void()> clear_extra_wake_;
  size_t next_link_ = 0;
};

}  // namespace hora::control
