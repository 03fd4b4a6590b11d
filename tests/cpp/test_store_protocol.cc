// The rendezvous store protocol as the C++ client encodes and decodes it
// (docs/rendezvous.md): the request layout, and replies and key lists that
// decode only when well formed (hora::Internal otherwise, never a crash).
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
  const Bytes frame = encode_request("s3cret", {Command::kWait, 1500, {"a", "bc"}, {9, 8, 7}});
  ASSERT_EQ(u32_at(frame, 0), frame.size() - 4);
  EXPECT_EQ(frame[4], kVersion);
  EXPECT_EQ(frame[5], static_cast<uint8_t>(Command::kWait));
  EXPECT_EQ(frame[6] | frame[7] << 8, 6);
  EXPECT_EQ(std::string(frame.begin() + 8, frame.begin() + 14), "s3cret");
  EXPECT_EQ(u32_at(frame, 14), 1500u);
  EXPECT_EQ(u32_at(frame, 18), 2u);
  EXPECT_EQ(u32_at(frame, 22), 1u);
  EXPECT_EQ(frame[26], 'a');
  EXPECT_EQ(u32_at(frame, 27), 2u);
  EXPECT_EQ(std::string(frame.begin() + 31, frame.begin() + 33), "bc");
  EXPECT_EQ(u32_at(frame, 33), 3u);
  EXPECT_EQ(Bytes(frame.begin() + 37, frame.end()), (Bytes{9, 8, 7}));
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
  EXPECT_NE(decode_error(decode_keys, long_key).find("a key of"), std::string::npos);
}

TEST(StoreProtocolTest, RandomAndMutatedBytesNeverCrash) {
  std::mt19937 rng(99);
  const Bytes originals[] = {encode_reply(Reply{Status::kOk, {1, 2, 3, 4}}), encode_keys({"x", "yz", ""})};
  int decoded = 0;
  for (int i = 0; i < 5000; ++i) {
    Bytes bytes = originals[i % 2];
    for (int e = 0; e < 1 + static_cast<int>(rng() % 3) && !bytes.empty(); ++e) {
      const size_t at = rng() % bytes.size();
      switch (rng() % 3) {
        case 0: bytes[at] = static_cast<uint8_t>(rng()); break;
        case 1: bytes.insert(bytes.begin() + at, static_cast<uint8_t>(rng() % 4)); break;
        case 2: bytes.resize(at); break;
      }
    }
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

}  // namespace
}  // namespace hora::store_protocol
