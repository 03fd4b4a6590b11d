// Message authentication for hora's own protocols (the rendezvous store,
// the control channel's hello): SHA-256 (FIPS 180-4), HMAC-SHA-256 (RFC
// 2104), a constant-time comparison and random nonces. A peer proves that
// it holds the job secret by answering a fresh nonce with an HMAC of it, so
// the secret itself never crosses the network. Pure functions, any thread.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <span>
#include <string_view>

namespace hora::net {

using Digest = std::array<uint8_t, 32>;
using Nonce = std::array<uint8_t, 16>;

// SHA-256 of the concatenation of `parts`.
Digest sha256(std::initializer_list<std::span<const uint8_t>> parts);

// HMAC-SHA-256 under `key` (any length) of the concatenation of `parts`.
Digest hmac_sha256(std::span<const uint8_t> key, std::initializer_list<std::span<const uint8_t>> parts);

// `text`'s bytes, for the parts above.
inline std::span<const uint8_t> bytes_of(std::string_view text) {
  return {reinterpret_cast<const uint8_t*>(text.data()), text.size()};
}

// Whether a and b hold the same bytes, in a time that depends only on their
// lengths.
bool same_bytes(std::span<const uint8_t> a, std::span<const uint8_t> b);

// 128 bits from the kernel's random source (getrandom); throws Internal if
// it cannot be read.
Nonce random_nonce();

}  // namespace hora::net
