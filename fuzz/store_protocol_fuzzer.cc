// libFuzzer target: both sides of the rendezvous store protocol
// (src/store/store_protocol.h) on arbitrary bytes. As a request payload, as
// a hostile client could send it to the in-process server: it must decode
// or be refused (store_protocol::Refusal), and what decodes must be exactly
// what the client encodes for that request. As a reply or a key list, as a
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
  static const std::string kSecret = "fuzz";  // short, so that fuzzing gets past it
  const std::vector<uint8_t> bytes(data, data + size);
  try {
    const std::vector<uint8_t> frame = encode_request(kSecret, decode_request(bytes, kSecret));
    if (std::vector<uint8_t>(frame.begin() + 4, frame.end()) != bytes) std::abort();
  } catch (const Refusal& refusal) {
    if (refusal.status != Status::kBadRequest && refusal.status != Status::kBadSecret) std::abort();
    if (refusal.message.empty()) std::abort();
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
