// The rendezvous server's work without I/O, so that it can be tested and
// fuzzed byte by byte: ServerSession reads one connection's bytes (the
// handshake, then request frames), StoreData holds the job's keys and
// executes requests on them. The event loop of tcp_store_server.cc moves the
// bytes and keeps the waiting requests.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "net/hmac.h"
#include "store/store_protocol.h"

namespace hora::store_protocol {

// One connection, as the server sees it: the challenge to send, then the
// client's proof, then request frames one after another. It never takes
// more bytes than the unit it is reading (the proof, a frame's length, a
// frame's payload), so nothing is read ahead, and it allocates nothing
// before the client has proved that it holds the job secret. One thread.
class ServerSession {
 public:
  enum class Event {
    kNone,           // the unit is not complete yet
    kAuthenticated,  // send output(); requests follow
    kRequest,        // request() is ready to execute
    kRefused,        // send output(), then close
  };

  ServerSession(const std::string& secret, const net::Nonce& nonce);

  // The bytes to send first.
  std::span<const uint8_t> challenge() const { return challenge_; }

  // Where the next bytes received go (never empty); then received(n) with
  // the number of bytes written there.
  std::span<uint8_t> space();
  Event received(size_t n);

  // Whether the client proved the secret (and has not been refused since).
  bool authenticated() const { return phase_ == Phase::kLength || phase_ == Phase::kPayload; }
  // Whether a unit has begun and is not finished: some of its bytes have
  // arrived, or a frame's length has and its payload has not.
  bool mid_unit() const { return got_ > 0 || phase_ == Phase::kPayload; }
  const Request& request() const { return request_; }
  // The answer to the proof, or a refusal frame.
  const std::vector<uint8_t>& output() const { return output_; }

 private:
  enum class Phase { kProof, kLength, kPayload, kClosed };
  Event refuse(Status status, const std::string& message);

  const std::string& secret_;
  net::Nonce nonce_;
  std::array<uint8_t, kChallengeBytes> challenge_;
  Phase phase_ = Phase::kProof;
  std::array<uint8_t, kProofBytes> proof_{};
  std::array<uint8_t, 4> length_{};
  std::vector<uint8_t> payload_;
  size_t got_ = 0;
  Request request_;
  std::vector<uint8_t> output_;
};

// One reply frame: the u32 payload length, then the encoded reply.
std::vector<uint8_t> reply_frame(const Reply& reply);

// The job's keys and values, and what each request does to them.
// Thread-safe; never blocks except on its own mutex.
class StoreData {
 public:
  // The reply to `request` now, or nullopt when it must wait for keys that
  // do not exist yet (a GET or WAIT with a timeout). Throws Refusal for an
  // ADD that is not a decimal integer or would overflow.
  std::optional<Reply> execute(const Request& request);
  // The reply to a waiting request whose timeout passed.
  Reply expired(const Request& request);
  // The first of `keys` that does not exist yet.
  std::optional<std::string> first_missing(const std::vector<std::string>& keys) const;

  void set(const std::string& key, std::vector<uint8_t> value);
  std::vector<std::pair<std::string, std::vector<uint8_t>>> items_with_prefix(const std::string& prefix) const;

 private:
  std::vector<std::string> missing_locked(const std::vector<std::string>& keys) const;

  mutable std::mutex mutex_;
  std::map<std::string, std::vector<uint8_t>> data_;  // guarded by mutex_
};

}  // namespace hora::store_protocol
