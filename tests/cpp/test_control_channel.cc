// ControlChannel's reads (control/control_channel.h): receive_from() reads
// only one member's connection, the one a waiting caller's records come on
// (ProgressEngine::look); what came on the other connections waits, whole
// and in order, for receive_now() or receive().
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <future>
#include <memory>
#include <optional>
#include <thread>
#include <vector>

#include "control/control_channel.h"
#include "hora/store.h"
#include "net/socket.h"

namespace hora::control {
namespace {

using Bytes = std::vector<uint8_t>;
using Channel = std::unique_ptr<ControlChannel>;

constexpr std::chrono::milliseconds kTimeout{20'000};

// A set of three members connected from threads of this process.
std::vector<Channel> connect_three() {
  const std::vector<int> ranks = {0, 1, 2};
  std::shared_ptr<Store> store = make_hash_store();
  std::atomic<bool> cancelled{false};
  std::vector<std::future<Channel>> joining;
  for (int rank = 0; rank < 3; ++rank)
    joining.push_back(std::async(std::launch::async, [&, rank] {
      return ControlChannel::connect(ranks, rank, describe_set(ranks), "127.0.0.1", *store, kTimeout, cancelled);
    }));
  std::vector<Channel> channels;
  for (auto& member : joining) channels.push_back(member.get());
  return channels;
}

// receive_now() until a message comes (what was sent may not have arrived).
std::optional<ControlMessage> eventually(const std::function<std::optional<ControlMessage>()>& read) {
  const auto deadline = std::chrono::steady_clock::now() + kTimeout;
  while (std::chrono::steady_clock::now() < deadline)
    if (std::optional<ControlMessage> message = read()) return message;
  return std::nullopt;
}

TEST(ControlChannel, AReadFromOneMemberLeavesTheOthersMessagesForTheNextRead) {
  std::vector<Channel> channels = connect_three();
  ControlChannel& coordinator = *channels[0];
  channels[2]->send(0, Bytes{2});
  channels[1]->send(0, Bytes{1});
  std::optional<ControlMessage> from_one = eventually([&] { return coordinator.receive_from(1); });
  ASSERT_TRUE(from_one.has_value());
  EXPECT_EQ(from_one->from, 1) << "a read from member 1 took another member's connection";
  EXPECT_EQ(from_one->bytes, Bytes{1});
  std::this_thread::sleep_for(std::chrono::milliseconds(50));  // member 2's message is here by now
  EXPECT_FALSE(coordinator.receive_from(1).has_value()) << "member 2's message came through a read from member 1";

  std::optional<ControlMessage> other = eventually([&] { return coordinator.receive_now(); });
  ASSERT_TRUE(other.has_value()) << "member 2's message was lost";
  EXPECT_EQ(other->from, 2);
  EXPECT_EQ(other->bytes, Bytes{2});

  // Two messages read together from member 2 come out one at a time, in
  // order.
  channels[2]->send(0, Bytes{3});
  channels[2]->send(0, Bytes{4});
  std::optional<ControlMessage> third = eventually([&] { return coordinator.receive_from(2); });
  std::optional<ControlMessage> fourth = eventually([&] { return coordinator.receive_from(2); });
  ASSERT_TRUE(third.has_value() && fourth.has_value());
  EXPECT_EQ(third->bytes, Bytes{3});
  EXPECT_EQ(fourth->bytes, Bytes{4});
}

// A rank that is not a member's (or has no connection) reads every
// connection, as receive_now() does; a member reads the coordinator's.
TEST(ControlChannel, AReadFromNoMemberReadsThemAll) {
  std::vector<Channel> channels = connect_three();
  channels[1]->send(0, Bytes{5});
  std::optional<ControlMessage> message = eventually([&] { return channels[0]->receive_from(-1); });
  ASSERT_TRUE(message.has_value());
  EXPECT_EQ(message->bytes, Bytes{5});
  channels[0]->send(2, Bytes{7});
  message = eventually([&] { return channels[2]->receive_from(0); });
  ASSERT_TRUE(message.has_value());
  EXPECT_EQ(message->from, 0);
  EXPECT_EQ(message->bytes, Bytes{7});
}

}  // namespace
}  // namespace hora::control
