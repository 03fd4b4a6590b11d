// SHA-256 and HMAC-SHA-256 against published test vectors (FIPS 180-4
// examples, RFC 4231), and the constant-time comparison.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "net/hmac.h"

namespace hora::net {
namespace {

std::string hex(const Digest& digest) {
  static const char* digits = "0123456789abcdef";
  std::string text;
  for (uint8_t byte : digest) {
    text += digits[byte >> 4];
    text += digits[byte & 15];
  }
  return text;
}

TEST(Sha256, MatchesThePublishedDigests) {
  EXPECT_EQ(hex(sha256({bytes_of("abc")})), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(hex(sha256({})), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(hex(sha256({bytes_of("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq")})),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
}

TEST(Sha256, GivesTheSameDigestHoweverTheInputIsSplit) {
  const std::string text(1000, 'a');
  const Digest whole = sha256({bytes_of(text)});
  EXPECT_EQ(hex(whole), "41edece42d63e8d9bf515a9ba6932e1c20cbc9f5a5d134645adb5db1b9737ea3");
  EXPECT_EQ(sha256({bytes_of(text.substr(0, 63)), bytes_of(text.substr(63, 1)), bytes_of(text.substr(64))}), whole);
}

TEST(HmacSha256, MatchesRfc4231) {
  // Test case 2: a key shorter than the block.
  EXPECT_EQ(hex(hmac_sha256(bytes_of("Jefe"), {bytes_of("what do ya want "), bytes_of("for nothing?")})),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
  // Test case 6: a key longer than the block is hashed first.
  const std::vector<uint8_t> long_key(131, 0xaa);
  EXPECT_EQ(hex(hmac_sha256(long_key, {bytes_of("Test Using Larger Than Block-Size Key - Hash Key First")})),
            "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54");
}

TEST(HmacSha256, DiffersWithTheKeyAndTheMessage) {
  const Digest base = hmac_sha256(bytes_of("secret"), {bytes_of("nonce")});
  EXPECT_NE(hmac_sha256(bytes_of("secreT"), {bytes_of("nonce")}), base);
  EXPECT_NE(hmac_sha256(bytes_of("secret"), {bytes_of("noncE")}), base);
  EXPECT_NE(hmac_sha256({}, {bytes_of("nonce")}), base);
}

TEST(SameBytes, ComparesContentAndLength) {
  EXPECT_TRUE(same_bytes(bytes_of("abc"), bytes_of("abc")));
  EXPECT_FALSE(same_bytes(bytes_of("abc"), bytes_of("abd")));
  EXPECT_FALSE(same_bytes(bytes_of("abc"), bytes_of("abcd")));
  EXPECT_TRUE(same_bytes({}, {}));
}

TEST(RandomNonce, DiffersBetweenCalls) { EXPECT_NE(random_nonce(), random_nonce()); }

}  // namespace
}  // namespace hora::net
