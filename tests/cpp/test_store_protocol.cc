// The rendezvous store protocol (docs/rendezvous.md): the handshake in which
// each side proves the job's secret without sending it; the request layout;
// requests that the server decodes only when well formed (a Refusal naming
// what was wrong otherwise); replies and key lists
// that the client decodes only when well formed (hora::Internal otherwise).
// Never a crash.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "hora/errors.h"
#include "store/store_protocol.h"

namespace hora::store_protocol {
namespace {

using Bytes = std::vector<uint8_t>;

uint32_t u32_at(const Bytes& bytes, size_t offset) {
  uint32_t v = 0;
  std::memcpy(&v, bytes.data() + offset, 4);
  return v;
}

template <typename Decode>
std::string decode_error(Decode decode, const Bytes& bytes) {
  try {
    decode(bytes);
  } catch (const Internal& e) {
    return e.what();
  }
  return "";
}

TEST(StoreProtocolTest, RequestFrameFollowsTheDocumentedLayout) {
  const Bytes frame = encode_request({Command::kWait, 1500, {"a", "bc"}, {9, 8, 7}});
  ASSERT_EQ(u32_at(frame, 0), frame.size() - 4);
  EXPECT_EQ(frame[4], kVersion);
  EXPECT_EQ(frame[5], static_cast<uint8_t>(Command::kWait));
  EXPECT_EQ(u32_at(frame, 6), 1500u);
  EXPECT_EQ(u32_at(frame, 10), 2u);
  EXPECT_EQ(u32_at(frame, 14), 1u);
  EXPECT_EQ(frame[18], 'a');
  EXPECT_EQ(u32_at(frame, 19), 2u);
  EXPECT_EQ(std::string(frame.begin() + 23, frame.begin() + 25), "bc");
  EXPECT_EQ(u32_at(frame, 25), 3u);
  EXPECT_EQ(Bytes(frame.begin() + 29, frame.end()), (Bytes{9, 8, 7}));
}

const char* const kSecret = "job-secret";

// The payload of a request frame (its length prefix removed).
Bytes payload_of(const Request& request) {
  const Bytes frame = encode_request(request);
  return Bytes(frame.begin() + 4, frame.end());
}

// The refusal decode_request throws for `payload`; fails the test if none.
Refusal refusal_of(const Bytes& payload) {
  try {
    decode_request(payload);
  } catch (const Refusal& refusal) {
    return refusal;
  }
  ADD_FAILURE() << "the request was accepted";
  return {Status::kOk, ""};
}

void expect_refused(const Bytes& payload, Status status, const std::string& text) {
  const Refusal refusal = refusal_of(payload);
  EXPECT_EQ(refusal.status, status) << refusal.message;
  EXPECT_NE(refusal.message.find(text), std::string::npos) << refusal.message;
}

TEST(StoreProtocolTest, EveryRequestTheClientEncodesTheServerDecodes) {
  const std::vector<Request> requests = {{Command::kSet, 0, {"k"}, {1, 2}},
                                         {Command::kGet, 250, {"process_set.1/gloo/0"}, {}},
                                         {Command::kAdd, 0, {"counter"}, {'-', '3'}},
                                         {Command::kWait, kNoTimeoutMs, {"a", "b", ""}, {}},
                                         {Command::kPing, 0, {}, {}}};
  for (const Request& sent : requests) {
    const Request got = decode_request(payload_of(sent));
    EXPECT_EQ(got.command, sent.command);
    EXPECT_EQ(got.timeout_ms, sent.timeout_ms);
    EXPECT_EQ(got.keys, sent.keys);
    EXPECT_EQ(got.value, sent.value);
  }
}

TEST(StoreProtocolTest, TheHandshakeFollowsTheDocumentedLayout) {
  const net::Nonce server_nonce = net::random_nonce(), client_nonce = net::random_nonce();
  const auto challenge = encode_challenge(server_nonce);
  EXPECT_EQ(challenge[0], kVersion);
  EXPECT_EQ(Bytes(challenge.begin() + 1, challenge.begin() + 4), (Bytes{0, 0, 0}));
  EXPECT_EQ(decode_challenge(challenge), server_nonce);
  const auto proof = encode_proof(kSecret, server_nonce, client_nonce);
  EXPECT_EQ(Bytes(proof.begin(), proof.begin() + 16), Bytes(client_nonce.begin(), client_nonce.end()));
  // The MAC is HMAC-SHA-256(secret, label, server nonce, client nonce): a
  // client in any language computes it with its standard library.
  const net::Digest mac =
      net::hmac_sha256(net::bytes_of(kSecret), {net::bytes_of("hora store client v2"), server_nonce, client_nonce});
  EXPECT_EQ(Bytes(proof.begin() + 16, proof.end()), Bytes(mac.begin(), mac.end()));
  net::Nonce got;
  ASSERT_TRUE(check_proof(proof, kSecret, server_nonce, got));
  EXPECT_EQ(got, client_nonce);
  const auto answer = encode_answer(Status::kOk, kSecret, server_nonce, client_nonce);
  EXPECT_EQ(check_answer(answer, kSecret, server_nonce, client_nonce), Status::kOk);
}

TEST(StoreProtocolTest, AProofWithoutTheSecretOrForAnotherChallengeIsRefused) {
  const net::Nonce server_nonce = net::random_nonce(), client_nonce = net::random_nonce();
  net::Nonce got;
  EXPECT_FALSE(check_proof(encode_proof("job-secreT", server_nonce, client_nonce), kSecret, server_nonce, got));
  EXPECT_FALSE(check_proof(encode_proof("", server_nonce, client_nonce), kSecret, server_nonce, got));
  // A proof recorded from another connection does not answer this one.
  EXPECT_FALSE(
      check_proof(encode_proof(kSecret, net::random_nonce(), client_nonce), kSecret, server_nonce, got));
  auto flipped = encode_proof(kSecret, server_nonce, client_nonce);
  flipped[20] ^= 1;
  EXPECT_FALSE(check_proof(flipped, kSecret, server_nonce, got));
  EXPECT_FALSE(check_proof(Bytes(10, 0), kSecret, server_nonce, got));
}

TEST(StoreProtocolTest, AServerThatCannotProveTheSecretIsNotBelieved) {
  const net::Nonce server_nonce = net::random_nonce(), client_nonce = net::random_nonce();
  EXPECT_EQ(check_answer(encode_answer(Status::kBadSecret, kSecret, server_nonce, client_nonce), kSecret,
                         server_nonce, client_nonce),
            Status::kBadSecret);
  const auto impostor = encode_answer(Status::kOk, "another-secret", server_nonce, client_nonce);
  EXPECT_THROW(check_answer(impostor, kSecret, server_nonce, client_nonce), Internal);
  // The server's proof is not the client's proof sent back.
  const auto echoed = encode_proof(kSecret, server_nonce, client_nonce);
  Bytes answer = {0};
  answer.insert(answer.end(), echoed.begin() + 16, echoed.end());
  EXPECT_THROW(check_answer(answer, kSecret, server_nonce, client_nonce), Internal);
  EXPECT_THROW(check_answer(Bytes(5, 0), kSecret, server_nonce, client_nonce), Internal);
  auto version = encode_challenge(server_nonce);
  version[0] = 1;
  EXPECT_THROW(decode_challenge(version), Internal);
}

TEST(StoreProtocolTest, MalformedRequestsAreRefusedNamingTheFault) {
  const Bytes good = payload_of({Command::kSet, 0, {"k"}, {7}});
  for (size_t n = 0; n < good.size(); ++n) expect_refused(Bytes(good.begin(), good.begin() + n), Status::kBadRequest, "truncated");
  Bytes trailing = good;
  trailing.push_back(0);
  expect_refused(trailing, Status::kBadRequest, "1 trailing bytes");
  Bytes version = good;
  version[0] = 9;
  expect_refused(version, Status::kBadRequest, "unsupported protocol version 9");
  Bytes command = good;
  command[1] = 42;
  expect_refused(command, Status::kBadRequest, "unknown command 42");
  expect_refused(payload_of({Command::kGet, 0, {"a", "b"}, {}}), Status::kBadRequest, "takes 1..1 keys, got 2");
  expect_refused(payload_of({Command::kSet, 0, {}, {1}}), Status::kBadRequest, "takes 1..1 keys, got 0");
  expect_refused(payload_of({Command::kPing, 0, {"k"}, {}}), Status::kBadRequest, "takes 0..0 keys, got 1");
}

TEST(StoreProtocolTest, OversizedCountsAndLengthsAreRefusedBeforeAnyAllocation) {
  const Bytes good = payload_of({Command::kSet, 0, {"k"}, {7}});
  const size_t count_at = 2 + 4;  // after version, command, timeout
  Bytes many = good;
  many[count_at] = many[count_at + 1] = many[count_at + 2] = 0xff;
  expect_refused(many, Status::kBadRequest, "keys exceed the limit of 4096");
  Bytes long_key = good;
  long_key[count_at + 4 + 2] = 0x7f;
  expect_refused(long_key, Status::kBadRequest, "key of 8323073 bytes exceeds 4096 bytes");
  Bytes long_value = good;
  long_value[count_at + 4 + 4 + 1 + 3] = 0x7f;
  expect_refused(long_value, Status::kBadRequest, "value of 2130706433 bytes exceeds");
}

TEST(StoreProtocolTest, RepliesAndKeyListsRoundTrip) {
  for (Status status : {Status::kOk, Status::kNotFound, Status::kTimeout, Status::kBadSecret, Status::kBadRequest}) {
    Reply sent{status, {1, 2, 3}};
    Reply got = decode_reply(encode_reply(sent));
    EXPECT_EQ(got.status, status);
    EXPECT_EQ(got.value, sent.value);
  }
  EXPECT_TRUE(decode_reply(encode_reply(Reply{})).value.empty());
  const std::vector<std::string> keys = {"", "process_set.1/gloo/0", std::string(kMaxKeyBytes, 'k')};
  EXPECT_EQ(decode_keys(encode_keys(keys)), keys);
  EXPECT_TRUE(decode_keys(encode_keys({})).empty());
}

TEST(StoreProtocolTest, MalformedRepliesThrow) {
  const Bytes good = encode_reply(Reply{Status::kTimeout, {5, 6}});
  for (size_t n = 0; n < good.size(); ++n)
    EXPECT_NE(decode_error(decode_reply, Bytes(good.begin(), good.begin() + n)).find("truncated"), std::string::npos);
  Bytes trailing = good;
  trailing.push_back(0);
  EXPECT_NE(decode_error(decode_reply, trailing).find("1 trailing bytes"), std::string::npos);
  Bytes status = good;
  status[0] = 5;
  EXPECT_NE(decode_error(decode_reply, status).find("unknown status 5"), std::string::npos);
  Bytes huge = good;
  huge[1] = huge[2] = huge[3] = huge[4] = 0xff;
  EXPECT_NE(decode_error(decode_reply, huge).find("malformed reply"), std::string::npos);
}

TEST(StoreProtocolTest, MalformedKeyListsThrow) {
  const Bytes good = encode_keys({"ab", "c"});
  for (size_t n = 0; n < good.size(); ++n)
    EXPECT_NE(decode_error(decode_keys, Bytes(good.begin(), good.begin() + n)).find("malformed key list"),
              std::string::npos);
  Bytes trailing = good;
  trailing.push_back(0);
  EXPECT_NE(decode_error(decode_keys, trailing).find("trailing"), std::string::npos);
  Bytes many = good;
  many[0] = many[1] = many[2] = many[3] = 0xff;
  EXPECT_NE(decode_error(decode_keys, many).find("exceed the limit"), std::string::npos);
  Bytes long_key = good;
  long_key[4] = long_key[5] = long_key[6] = 0xff;
  EXPECT_NE(decode_error(decode_keys, long_key).find("key of 16777215 bytes exceeds 4096 bytes"), std::string::npos);
}

// `bytes` with one to three random edits: a byte changed, a small byte
// inserted, or the tail cut off.
Bytes mutated(Bytes bytes, std::mt19937& rng) {
  for (int e = 0; e < 1 + static_cast<int>(rng() % 3) && !bytes.empty(); ++e) {
    const size_t at = rng() % bytes.size();
    switch (rng() % 3) {
      case 0: bytes[at] = static_cast<uint8_t>(rng()); break;
      case 1: bytes.insert(bytes.begin() + at, static_cast<uint8_t>(rng() % 4)); break;
      case 2: bytes.resize(at); break;
    }
  }
  return bytes;
}

TEST(StoreProtocolTest, RandomAndMutatedBytesNeverCrash) {
  std::mt19937 rng(99);
  const Bytes originals[] = {encode_reply(Reply{Status::kOk, {1, 2, 3, 4}}), encode_keys({"x", "yz", ""})};
  int decoded = 0;
  for (int i = 0; i < 5000; ++i) {
    const Bytes bytes = mutated(originals[i % 2], rng);
    try {
      EXPECT_EQ(encode_reply(decode_reply(bytes)), bytes);
      ++decoded;
    } catch (const Internal&) {
    }
    try {
      EXPECT_EQ(encode_keys(decode_keys(bytes)), bytes);
      ++decoded;
    } catch (const Internal&) {
    }
  }
  EXPECT_GT(decoded, 0);
}

TEST(StoreProtocolTest, RandomAndMutatedRequestsAreDecodedOrRefusedNeverCrash) {
  std::mt19937 rng(7);
  const Bytes original = payload_of({Command::kWait, 10, {"x", "yz"}, {}});
  int decoded = 0;
  for (int i = 0; i < 5000; ++i) {
    const Bytes bytes = mutated(original, rng);
    try {
      // What decodes is exactly what the client would have sent.
      EXPECT_EQ(payload_of(decode_request(bytes)), bytes);
      ++decoded;
    } catch (const Refusal& refusal) {
      EXPECT_EQ(refusal.status, Status::kBadRequest);
    }
  }
  EXPECT_GT(decoded, 0);
}

}  // namespace
}  // namespace hora::store_protocol
