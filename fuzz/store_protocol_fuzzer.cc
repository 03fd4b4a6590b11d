// libFuzzer target: both sides of the rendezvous store protocol
// (src/store/store_protocol.h) on arbitrary bytes. As a request payload, as
// an authenticated client could send it to the server: it must decode or be
// refused (store_protocol::Refusal), and what decodes must be exactly what
// the client encodes for that request. As the server's challenge and
// answer, as an impostor could send them: each must decode or throw
// hora::Internal, never be believed. As a reply or a key list, as a
// broken server could send them: each must decode or throw hora::Internal,
// and what decodes must encode back to the same bytes.
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "hora/errors.h"
#include "store/store_protocol.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace hora::store_protocol;
  const std::vector<uint8_t> bytes(data, data + size);
  try {
    const std::vector<uint8_t> frame = encode_request(decode_request(bytes));
    if (std::vector<uint8_t>(frame.begin() + 4, frame.end()) != bytes) std::abort();
  } catch (const Refusal& refusal) {
    if (refusal.status != Status::kBadRequest) std::abort();
    if (refusal.message.empty()) std::abort();
  }
  try {
    decode_challenge(bytes);
  } catch (const hora::Internal&) {
  }
  try {
    // No answer that the fuzzer makes without the secret proves it.
    const hora::net::Nonce nonce{};
    if (check_answer(bytes, "secret", nonce, nonce) == Status::kOk) std::abort();
  } catch (const hora::Internal&) {
  }
  try {
    if (encode_reply(decode_reply(bytes)) != bytes) std::abort();
  } catch (const hora::Internal&) {
  }
  try {
    if (encode_keys(decode_keys(bytes)) != bytes) std::abort();
  } catch (const hora::Internal&) {
  }
  return 0;
}
