// Admitting the members of a process set on a listener: each connection
// proves the set rank it claims with the hello of net/hello.h before
// anything is allocated for it or anything waits on it. Used by the
// control channel (members join the coordinator) and by the TCP data plane
// (each member joins every member of a lower set rank).
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <string>
#include <vector>

#include "net/hello.h"
#include "net/socket.h"

namespace hora::net {

// Who may connect, and how messages name them.
struct AdmissionRules {
  HelloKey key{};
  std::string context;            // the hello's `set` text
  std::vector<int> global_ranks;  // the set's members, by set rank
  int lowest = 1;                 // admitted set ranks: lowest .. size - 1
  std::string set_name;           // prefixes messages
  std::string plane;              // "control plane": names the connections in messages
  std::chrono::milliseconds cancel_poll{200};
};

// Accepts one connection per admitted set rank, reading every pending hello
// at once: one poll(2) over the listener and each connection that owes its
// answer. A connection whose hello is late (kHelloTimeout, or the deadline
// if sooner), malformed or forged, or names a rank already connected, is
// dropped (the first few with a warning), so that a stray client can
// neither take a member's place nor hold up the others. At most
// kSpareHellos connections beyond the members still missing may owe a hello
// at once; later ones wait in the listen backlog, so no member is ever
// dropped to make room.
class Admission {
 public:
  static constexpr std::chrono::seconds kHelloTimeout{10};
  static constexpr size_t kSpareHellos = 64;

  explicit Admission(AdmissionRules rules) : rules_(std::move(rules)) {}

  // Blocks until every admitted set rank has connected, handing each
  // socket to `admitted` (set rank, socket) as it proves itself. Throws
  // Timeout at `deadline` naming the global ranks still missing and the
  // refusals, InvalidArgument once `cancelled` is set (checked every
  // cancel_poll).
  void admit_all(Listener& listener, Clock::time_point deadline, std::chrono::milliseconds timeout,
                 const std::atomic<bool>& cancelled, const std::function<void(int, Socket)>& admitted);

 private:
  struct Pending;
  void accept_pending(Listener& listener, Clock::time_point deadline, size_t room, std::vector<Pending>& pending);
  // Reads what `hello` has sent; true when it is finished with (admitted
  // or dropped).
  bool read_hello(Pending& hello, const std::function<void(int, Socket)>& admitted);
  void refuse(const std::string& why);
  [[noreturn]] void throw_timeout(std::chrono::milliseconds timeout) const;

  const AdmissionRules rules_;
  std::vector<bool> joined_;   // by set rank
  size_t refused_ = 0;         // connections dropped
  std::string last_refusal_;   // why the latest was
};

// The joining side: connects to `record`'s address before `deadline`, reads the listener's challenge and answers
// it as `rank` under `context`. `peer` names the listener in messages,
// `plane` prefixes the PeerFailure for a malformed challenge ("set: control
// plane"). Otherwise throws as net::connect_to does (no retry: the record is
// published once the listener listens).
Socket join(const AddressRecord& record, const std::string& context, int rank, const std::string& peer,
            Clock::time_point deadline, const std::atomic<bool>& cancelled, std::chrono::milliseconds cancel_poll,
            const std::string& plane);

}  // namespace hora::net
