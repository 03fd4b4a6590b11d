#include "net/hmac.h"

#include <sys/random.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "hora/errors.h"

namespace hora::net {
namespace {

constexpr uint32_t kRoundConstants[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2};

constexpr uint32_t rotr(uint32_t x, int n) { return (x >> n) | (x << (32 - n)); }

// The hash state over a stream of bytes, fed in any pieces.
class Sha256 {
 public:
  void update(std::span<const uint8_t> data) {
    for (uint8_t byte : data) {
      block_[filled_++] = byte;
      if (filled_ == 64) {
        compress();
        filled_ = 0;
      }
    }
    length_ += data.size();
  }

  Digest finish() {
    const uint64_t bits = length_ * 8;
    const uint8_t one = 0x80, zero = 0;
    update({&one, 1});
    while (filled_ != 56) update({&zero, 1});
    uint8_t tail[8];
    for (int i = 0; i < 8; ++i) tail[i] = static_cast<uint8_t>(bits >> (56 - 8 * i));
    update(tail);
    Digest digest;
    for (int i = 0; i < 8; ++i) {
      for (int j = 0; j < 4; ++j) digest[4 * i + j] = static_cast<uint8_t>(state_[i] >> (24 - 8 * j));
    }
    return digest;
  }

 private:
  void compress() {
    uint32_t w[64];
    for (int i = 0; i < 16; ++i) {
      w[i] = uint32_t{block_[4 * i]} << 24 | uint32_t{block_[4 * i + 1]} << 16 | uint32_t{block_[4 * i + 2]} << 8 |
             uint32_t{block_[4 * i + 3]};
    }
    for (int i = 16; i < 64; ++i) {
      const uint32_t s0 = rotr(w[i - 15], 7) ^ rotr(w[i - 15], 18) ^ (w[i - 15] >> 3);
      const uint32_t s1 = rotr(w[i - 2], 17) ^ rotr(w[i - 2], 19) ^ (w[i - 2] >> 10);
      w[i] = w[i - 16] + s0 + w[i - 7] + s1;
    }
    uint32_t a = state_[0], b = state_[1], c = state_[2], d = state_[3];
    uint32_t e = state_[4], f = state_[5], g = state_[6], h = state_[7];
    for (int i = 0; i < 64; ++i) {
      const uint32_t t1 = h + (rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25)) + ((e & f) ^ (~e & g)) + kRoundConstants[i] + w[i];
      const uint32_t t2 = (rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22)) + ((a & b) ^ (a & c) ^ (b & c));
      h = g;
      g = f;
      f = e;
      e = d + t1;
      d = c;
      c = b;
      b = a;
      a = t1 + t2;
    }
    state_[0] += a;
    state_[1] += b;
    state_[2] += c;
    state_[3] += d;
    state_[4] += e;
    state_[5] += f;
    state_[6] += g;
    state_[7] += h;
  }

  uint32_t state_[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                        0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
  uint8_t block_[64] = {};
  size_t filled_ = 0;
  uint64_t length_ = 0;
};

}  // namespace

Digest sha256(std::initializer_list<std::span<const uint8_t>> parts) {
  Sha256 hash;
  for (const auto& part : parts) hash.update(part);
  return hash.finish();
}

Digest hmac_sha256(std::span<const uint8_t> key, std::initializer_list<std::span<const uint8_t>> parts) {
  // A key longer than the block is hashed first; a shorter one is padded
  // with zeros to the block.
  uint8_t block_key[64] = {};
  if (key.size() > 64) {
    const Digest hashed = sha256({key});
    std::memcpy(block_key, hashed.data(), hashed.size());
  } else if (!key.empty()) {
    std::memcpy(block_key, key.data(), key.size());
  }
  uint8_t inner_pad[64], outer_pad[64];
  for (int i = 0; i < 64; ++i) {
    inner_pad[i] = block_key[i] ^ 0x36;
    outer_pad[i] = block_key[i] ^ 0x5c;
  }
  Sha256 inner;
  inner.update(inner_pad);
  for (const auto& part : parts) inner.update(part);
  const Digest inner_digest = inner.finish();
  Sha256 outer;
  outer.update(outer_pad);
  outer.update(inner_digest);
  return outer.finish();
}

bool same_bytes(std::span<const uint8_t> a, std::span<const uint8_t> b) {
  if (a.size() != b.size()) return false;
  uint8_t diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff |= a[i] ^ b[i];
  return diff == 0;
}

Nonce random_nonce() {
  Nonce nonce;
  size_t got = 0;
  while (got < nonce.size()) {
    const ssize_t n = getrandom(nonce.data() + got, nonce.size() - got, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw Internal(std::string("getrandom: ") + std::strerror(errno));
    got += static_cast<size_t>(n);
  }
  return nonce;
}

}  // namespace hora::net
