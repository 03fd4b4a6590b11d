// libFuzzer target: the rendezvous server's whole path for one connection's
// bytes (src/store/store_session.h): the handshake, frame after frame, and
// each request executed on the store's data, as a hostile client could send
// them. The first byte chooses whether a valid proof of the secret comes
// first (so that fuzzing reaches the requests) and how the rest is split
// into reads. Nothing may crash, read out of bounds, or authenticate a
// client that did not prove the secret; every refusal says why.
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "hora/errors.h"
#include "store/store_session.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace hora::store_protocol;
  static const std::string kSecret = "fuzz secret";
  const hora::net::Nonce server_nonce{};  // fixed, so that seeds can carry a valid proof
  if (size == 0) return 0;
  const bool prove = data[0] & 1;
  const size_t most_per_read = 1 + (data[0] >> 1);
  std::vector<uint8_t> input;
  if (prove) {
    const auto proof = encode_proof(kSecret, server_nonce, hora::net::Nonce{});
    input.assign(proof.begin(), proof.end());
  }
  input.insert(input.end(), data + 1, data + size);

  ServerSession session(kSecret, server_nonce);
  StoreData store;
  size_t at = 0;
  while (at < input.size()) {
    const std::span<uint8_t> space = session.space();
    if (space.empty()) std::abort();
    const size_t n = std::min({space.size(), most_per_read, input.size() - at});
    std::copy(input.begin() + at, input.begin() + at + n, space.begin());
    at += n;
    switch (session.received(n)) {
      case ServerSession::Event::kNone:
        break;
      case ServerSession::Event::kAuthenticated:
        if (!prove || session.output().size() != kAnswerBytes) std::abort();
        break;
      case ServerSession::Event::kRefused:
        if (session.output().empty()) std::abort();
        return 0;
      case ServerSession::Event::kRequest:
        if (!session.authenticated()) std::abort();
        try {
          if (!store.execute(session.request())) store.expired(session.request());
        } catch (const Refusal& refusal) {
          if (refusal.status != Status::kBadRequest || refusal.message.empty()) std::abort();
          return 0;
        }
        break;
    }
  }
  return 0;
}
