// The control channel's hello (net/hello.h, net/admission.h): only a member that holds
// the set's key joins; a forged, replayed, misdirected or duplicate hello
// is dropped without taking a member's place; a silent connection holds
// nobody up; and a bad challenge or a timeout is a clear error.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <memory>
#include <string>
#include <vector>

#include "control/control_channel.h"
#include "hora/errors.h"
#include "hora/store.h"
#include "net/codec.h"
#include "net/hello.h"
#include "net/socket.h"

namespace hora::control {
namespace {

using std::chrono::milliseconds;
using Bytes = std::vector<uint8_t>;
using Channel = std::unique_ptr<ControlChannel>;
using namespace net;  // the hello (net/hello.h)

constexpr milliseconds kSetTimeout{20'000};
constexpr milliseconds kWait{5'000};

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// One process set whose members connect from threads of this process, and
// raw connections to its coordinator from clients that are not members.
class HelloTest : public ::testing::Test {
 protected:
  std::future<Channel> join(int rank, milliseconds timeout = kSetTimeout) {
    return std::async(std::launch::async, [this, rank, timeout] {
      return ControlChannel::connect(ranks_, rank, describe_set(ranks_), "127.0.0.1", *store_, timeout, cancelled_);
    });
  }

  AddressRecord published() { return decode_address_record(store_->get("control/address", kWait)); }

  net::Socket dial() {
    const auto [host, port] = net::split_address(published().address);
    net::ConnectOptions options;
    options.deadline = net::Clock::now() + kWait;
    return net::connect_to(host, port, "the coordinator", options);
  }

  static net::Nonce challenge_of(net::Socket& socket) {
    std::array<uint8_t, kChallengeBytes> challenge;
    socket.recv_exact(challenge.data(), challenge.size(), net::Clock::now() + kWait, "the coordinator");
    return decode_challenge(challenge);
  }

  static void send(net::Socket& socket, std::span<const uint8_t> bytes) {
    socket.send_all(bytes, net::Clock::now() + kWait, "the coordinator");
  }

  // Whether the coordinator closes `socket` within kWait.
  static bool dropped(net::Socket& socket) {
    uint8_t byte;
    try {
      for (;;) socket.recv_exact(&byte, 1, net::Clock::now() + kWait, "the coordinator");
    } catch (const PeerFailure&) {
      return true;
    } catch (const Timeout&) {
      return false;
    }
  }

  // Each member sends the coordinator its rank and hears back from it.
  static void expect_connected(std::vector<Channel>& channels) {
    for (size_t r = 1; r < channels.size(); ++r) channels[r]->send(0, Bytes{static_cast<uint8_t>(r)});
    for (size_t r = 1; r < channels.size(); ++r) {
      const auto message = channels[0]->receive(net::Clock::now() + kWait);
      ASSERT_TRUE(message.has_value());
      EXPECT_FALSE(message->closed);
      EXPECT_EQ(message->bytes, Bytes{static_cast<uint8_t>(message->from)});
    }
    for (size_t r = 1; r < channels.size(); ++r) {
      channels[0]->send(static_cast<int>(r), Bytes{42});
      const auto message = channels[r]->receive(net::Clock::now() + kWait);
      ASSERT_TRUE(message.has_value());
      EXPECT_EQ(message->bytes, Bytes{42});
    }
  }

  std::vector<int> ranks_ = {0, 3, 5};
  std::shared_ptr<Store> store_ = make_hash_store();
  std::atomic<bool> cancelled_{false};
};

TEST_F(HelloTest, AForgedHelloIsDroppedAndTheMemberStillJoins) {
  ranks_ = {0, 3};
  auto coordinator = join(0);
  // The right magic and rank, sent at once as an old hello was, without the
  // key: it must not take set rank 1's place.
  net::Socket forger = dial();
  Bytes forged(kAnswerBytes, 0x5a);
  net::store_u32_le(forged.data(), kAnswerMagic);
  net::store_u32_le(forged.data() + 4, 1);
  send(forger, forged);
  EXPECT_TRUE(dropped(forger));
  auto member = join(1);
  std::vector<Channel> channels;
  channels.push_back(coordinator.get());
  channels.push_back(member.get());
  expect_connected(channels);
}

TEST_F(HelloTest, ASilentConnectionDoesNotHoldUpTheMembers) {
  const auto start = net::Clock::now();
  auto coordinator = join(0);
  net::Socket silent = dial();  // accepted before any member connects
  auto first = join(1);
  auto second = join(2);
  std::vector<Channel> channels;
  channels.push_back(coordinator.get());
  channels.push_back(first.get());
  channels.push_back(second.get());
  EXPECT_LT(net::Clock::now() - start, kSetTimeout / 4);
  expect_connected(channels);
  EXPECT_TRUE(dropped(silent));
}

TEST_F(HelloTest, AHundredMembersJoiningAtOnceAllGetIn) {
  // More members than spare places for pending hellos: none may be dropped
  // to make room for another.
  ranks_.clear();
  for (int r = 0; r < 100; ++r) ranks_.push_back(r);
  std::vector<std::future<Channel>> joining;
  for (int r = 0; r < 100; ++r) joining.push_back(join(r));
  std::vector<Channel> channels;
  for (auto& member : joining) channels.push_back(member.get());
  expect_connected(channels);
}

TEST_F(HelloTest, ADuplicateRankIsDroppedAndTheFirstKeepsItsPlace) {
  auto coordinator = join(0);
  std::vector<Channel> channels(3);
  channels[1] = join(1).get();  // has sent its answer when connect returns
  const AddressRecord record = published();
  net::Socket impostor = dial();
  send(impostor, encode_answer(record.key, describe_set(ranks_), 1, challenge_of(impostor)));
  EXPECT_TRUE(dropped(impostor));
  channels[2] = join(2).get();
  channels[0] = coordinator.get();
  expect_connected(channels);
}

TEST_F(HelloTest, AnswersForAnotherNonceSetOrRankAreDropped) {
  auto coordinator = join(0);
  const AddressRecord record = published();
  const std::string set = describe_set(ranks_);
  std::vector<net::Socket> clients;
  auto answer_on_new_connection = [&](auto make_answer) {
    clients.push_back(dial());
    const net::Nonce nonce = challenge_of(clients.back());
    send(clients.back(), make_answer(nonce));
  };
  net::Socket first = dial();
  const net::Nonce first_nonce = challenge_of(first);
  answer_on_new_connection([&](const net::Nonce&) { return encode_answer(record.key, set, 2, first_nonce); });
  answer_on_new_connection([&](const net::Nonce& n) { return encode_answer(record.key, "process set [0, 3, 6]", 1, n); });
  answer_on_new_connection([&](const net::Nonce& n) { return encode_answer(record.key, set, 3, n); });
  answer_on_new_connection([&](const net::Nonce& n) { return encode_answer(record.key, set, 0, n); });
  answer_on_new_connection([&](const net::Nonce& n) {
    auto answer = encode_answer(record.key, set, 1, n);
    answer[0] ^= 1;
    return answer;
  });
  for (net::Socket& client : clients) EXPECT_TRUE(dropped(client));
  std::vector<Channel> channels(3);
  auto member1 = join(1);
  auto member2 = join(2);
  channels[0] = coordinator.get();
  channels[1] = member1.get();
  channels[2] = member2.get();
  expect_connected(channels);
}

TEST_F(HelloTest, ATimeoutNamesTheMissingRanksAndTheDroppedConnections) {
  ranks_ = {0, 3};
  auto coordinator = join(0, milliseconds(1500));
  net::Socket forger = dial();
  challenge_of(forger);
  Bytes forged(kAnswerBytes, 0);
  net::store_u32_le(forged.data(), kAnswerMagic);
  net::store_u32_le(forged.data() + 4, 1);
  send(forger, forged);
  try {
    coordinator.get();
    FAIL() << "no error";
  } catch (const Timeout& e) {
    EXPECT_TRUE(contains(e.what(), "global rank(s) [3]")) << e.what();
    EXPECT_TRUE(contains(e.what(), "dropped 1 connection(s)")) << e.what();
    EXPECT_TRUE(contains(e.what(), "wrong mac")) << e.what();
  }
}

TEST_F(HelloTest, AMemberRefusesABadChallenge) {
  ranks_ = {0, 3};
  net::Listener fake("127.0.0.1");
  store_->set("control/address", encode_address_record({HelloKey{}, fake.address()}));
  auto member = join(1);
  net::Socket socket = fake.accept(net::Clock::now() + kWait);
  ASSERT_TRUE(socket.valid());
  send(socket, Bytes(kChallengeBytes, 0));
  try {
    member.get();
    FAIL() << "no error";
  } catch (const PeerFailure& e) {
    EXPECT_TRUE(contains(e.what(), "process set [0, 3]")) << e.what();
    EXPECT_TRUE(contains(e.what(), "malformed hello challenge: wrong magic")) << e.what();
  }
}

TEST(HelloCodec, OnlyTheExactAnswerIsAdmitted) {
  HelloKey key;
  for (size_t i = 0; i < key.size(); ++i) key[i] = static_cast<uint8_t>(i * 7);
  const net::Nonce nonce = net::random_nonce();
  const std::string set = "process set [0, 1, 2]";
  const auto answer = encode_answer(key, set, 2, nonce);
  const AnswerCheck good = check_answer(answer, key, set, 3, nonce);
  EXPECT_TRUE(good.admitted()) << good.refusal;
  EXPECT_EQ(good.rank, 2);
  for (size_t i = 0; i < answer.size(); ++i) {
    auto changed = answer;
    changed[i] ^= 0x10;
    EXPECT_FALSE(check_answer(changed, key, set, 3, nonce).admitted()) << "byte " << i;
  }
  EXPECT_EQ(check_answer(answer, key, set, 2, nonce).refusal, "set rank 2 is out of range for a set of 2 members");
  EXPECT_EQ(check_answer(std::span(answer).first(39), key, set, 3, nonce).refusal, "39 bytes instead of 40");
  HelloKey other = key;
  other[0] ^= 1;
  EXPECT_EQ(check_answer(answer, other, set, 3, nonce).refusal, "wrong mac");
}

TEST(HelloCodec, ChallengesAndAddressRecordsRoundTripAndMalformedOnesAreNamed) {
  const net::Nonce nonce = net::random_nonce();
  EXPECT_EQ(decode_challenge(encode_challenge(nonce)), nonce);
  auto challenge = encode_challenge(nonce);
  challenge[3] ^= 1;
  EXPECT_THROW(decode_challenge(challenge), net::DecodeError);
  try {
    decode_challenge(std::span(challenge).first(5));
    FAIL() << "no error";
  } catch (const net::DecodeError& e) {
    EXPECT_STREQ(e.what(), "malformed hello challenge: 5 bytes instead of 20");
  }
  AddressRecord record;
  record.key[5] = 9;
  record.address = "[::1]:4242";
  const AddressRecord again = decode_address_record(encode_address_record(record));
  EXPECT_EQ(again.key, record.key);
  EXPECT_EQ(again.address, record.address);
  try {
    decode_address_record(Bytes(16, 1));
    FAIL() << "no error";
  } catch (const net::DecodeError& e) {
    EXPECT_STREQ(e.what(), "malformed address record: 16 bytes hold no address after the key");
  }
}

}  // namespace
}  // namespace hora::control
