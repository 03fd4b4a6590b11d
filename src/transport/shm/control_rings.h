// The byte rings that carry a shared-memory set's control plane: a stream
// of [u32 length][bytes] frames (net/frames.h) per direction between the
// coordinator (set rank 0) and each member, in the set's segment (ring.h).
// control/shm_control_plane.h is the ControlPlane over them; they live
// here because the data plane must drain them while it waits (below).
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "net/frames.h"
#include "transport/shm/sync.h"

namespace hora::shm {

class Attachment;

// A frame from set rank `from`, or the closure of its link.
struct RingMessage {
  int from = -1;
  std::vector<uint8_t> bytes;
  bool closed = false;
};

// One member's ends of its rings. write_frame() may be called from any
// thread (one mutex per link); a writer that finds a ring full waits for
// space, draining this member's incoming rings meanwhile if no other
// thread reads them. The reading side (next(), pending()) is used under
// reader_mutex() by one thread at a time: the engine thread, or a thread
// waiting in a collective or for ring space (drain_if_reader()), so that
// two members sending to each other never deadlock. A member that leaves
// (departed) or whose process exits is drained one last time and then
// reported closed.
class ControlRings {
 public:
  explicit ControlRings(Attachment& member);

  // Writes one frame to set rank `to` (a star peer; not checked here).
  // PeerFailure when its link is closed, its ring is corrupt or it reads
  // nothing for the set's timeout.
  void write_frame(int to, const std::vector<uint8_t>& bytes);

  std::mutex& reader_mutex() { return inbox_mutex_; }
  // Under reader_mutex(): moves what the incoming rings hold into the
  // inboxes (looking at peer processes when `check_liveness`), then
  // returns the next frame or closure, round robin over the links.
  std::optional<RingMessage> next(bool check_liveness);
  // Whether an incoming ring holds bytes or a linked peer departed.
  bool pending() const;
  // Under reader_mutex(): whether next() has a frame or closure already
  // drained from the rings (by a collective meanwhile).
  bool drained() const;
  // Drains the incoming rings if no other thread is reading them.
  void drain_if_reader();

 private:
  // One control link, as its reader sees it.
  struct Inbox {
    int peer = -1;
    net::FrameReader frames;  // bytes read but not yet returned
    bool closed = false;
    bool closure_reported = false;
  };

  uint8_t* ring(int member, bool upward) const;
  void drain_inboxes(bool check_liveness);
  void drain(Inbox& inbox, bool upward_ring);
  std::optional<RingMessage> pop_frame();
  void write_to_ring(int to, const uint8_t* bytes, size_t size, Clock::time_point deadline);

  Attachment& member_;
  std::mutex inbox_mutex_;           // held by the thread reading the incoming rings
  std::vector<Inbox> inboxes_;       // by set rank; peer -1 where no link
  std::vector<uint8_t> ring_bytes_;  // drain()'s scratch
  size_t next_inbox_ = 0;
  std::vector<std::unique_ptr<std::mutex>> send_mutexes_;  // by set rank
};

}  // namespace hora::shm
