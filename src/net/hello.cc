#include "net/hello.h"

#include <algorithm>

#include "net/codec.h"

namespace hora::net {
namespace {

constexpr char kMacLabel[] = "hora control hello v1";

Digest answer_mac(const HelloKey& key, const std::string& set, uint32_t rank, const Nonce& nonce) {
  uint8_t set_length[4], rank_bytes[4];
  store_u32_le(set_length, static_cast<uint32_t>(set.size()));
  store_u32_le(rank_bytes, rank);
  return hmac_sha256(key, {bytes_of(kMacLabel), set_length, bytes_of(set), rank_bytes, nonce});
}

}  // namespace

AddressRecord fresh_address_record(const std::string& address) {
  AddressRecord record;
  const Nonce key = random_nonce();
  std::copy(key.begin(), key.end(), record.key.begin());
  record.address = address;
  return record;
}

std::vector<uint8_t> encode_address_record(const AddressRecord& record) {
  std::vector<uint8_t> bytes(record.key.begin(), record.key.end());
  bytes.insert(bytes.end(), record.address.begin(), record.address.end());
  return bytes;
}

AddressRecord decode_address_record(std::span<const uint8_t> bytes) {
  const char* subject = "address record";
  if (bytes.size() <= HelloKey().size())
    throw DecodeError(subject, std::to_string(bytes.size()) + " bytes hold no address after the key");
  AddressRecord record;
  std::copy_n(bytes.begin(), record.key.size(), record.key.begin());
  record.address.assign(bytes.begin() + static_cast<std::ptrdiff_t>(record.key.size()), bytes.end());
  return record;
}

std::array<uint8_t, kChallengeBytes> encode_challenge(const Nonce& nonce) {
  std::array<uint8_t, kChallengeBytes> bytes;
  store_u32_le(bytes.data(), kChallengeMagic);
  std::copy(nonce.begin(), nonce.end(), bytes.begin() + 4);
  return bytes;
}

Nonce decode_challenge(std::span<const uint8_t> bytes) {
  const char* subject = "hello challenge";
  if (bytes.size() != kChallengeBytes)
    throw DecodeError(subject, std::to_string(bytes.size()) + " bytes instead of " + std::to_string(kChallengeBytes));
  if (load_u32_le(bytes.data()) != kChallengeMagic) throw DecodeError(subject, "wrong magic");
  Nonce nonce;
  std::copy_n(bytes.begin() + 4, nonce.size(), nonce.begin());
  return nonce;
}

std::array<uint8_t, kAnswerBytes> encode_answer(const HelloKey& key, const std::string& set, uint32_t rank,
                                                const Nonce& nonce) {
  std::array<uint8_t, kAnswerBytes> bytes;
  store_u32_le(bytes.data(), kAnswerMagic);
  store_u32_le(bytes.data() + 4, rank);
  const Digest mac = answer_mac(key, set, rank, nonce);
  std::copy(mac.begin(), mac.end(), bytes.begin() + 8);
  return bytes;
}

AnswerCheck check_answer(std::span<const uint8_t> answer, const HelloKey& key, const std::string& set,
                         size_t set_size, const Nonce& nonce, uint32_t lowest) {
  if (answer.size() != kAnswerBytes)
    return {-1, std::to_string(answer.size()) + " bytes instead of " + std::to_string(kAnswerBytes)};
  if (load_u32_le(answer.data()) != kAnswerMagic) return {-1, "wrong magic"};
  const uint32_t rank = load_u32_le(answer.data() + 4);
  if (rank < lowest || rank >= set_size)
    return {-1, "set rank " + std::to_string(rank) + " is out of range for a set of " + std::to_string(set_size) +
                    " members"};
  const Digest mac = answer_mac(key, set, rank, nonce);
  if (!same_bytes(mac, answer.subspan(8))) return {-1, "wrong mac"};
  return {static_cast<int>(rank), {}};
}

}  // namespace hora::net
