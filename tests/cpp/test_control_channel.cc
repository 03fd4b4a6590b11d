// ControlChannel's reads (control/control_channel.h): receive_recent()
// reads only the connection of the last message returned, which is where a
// waiting caller's records come from (ProgressEngine::look); what came on
// the other connections waits, whole and in order, for receive_now() or
// receive().
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

TEST(ControlChannel, ARecentReadTakesOnlyTheLastSendersConnectionAndTheOthersWait) {
  std::vector<Channel> channels = connect_three();
  ControlChannel& coordinator = *channels[0];
  channels[1]->send(0, Bytes{1});
  std::optional<ControlMessage> first = coordinator.receive(std::chrono::steady_clock::now() + kTimeout);
  ASSERT_TRUE(first.has_value());
  EXPECT_EQ(first->from, 1);

  // Member 2's message is there before member 1's next one.
  channels[2]->send(0, Bytes{2});
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  channels[1]->send(0, Bytes{3});
  std::optional<ControlMessage> recent = eventually([&] { return coordinator.receive_recent(); });
  ASSERT_TRUE(recent.has_value());
  EXPECT_EQ(recent->from, 1) << "a recent read took another member's connection";
  EXPECT_EQ(recent->bytes, Bytes{3});
  EXPECT_FALSE(coordinator.receive_recent().has_value()) << "member 2's message came through a recent read";

  std::optional<ControlMessage> other = eventually([&] { return coordinator.receive_now(); });
  ASSERT_TRUE(other.has_value()) << "member 2's message was lost";
  EXPECT_EQ(other->from, 2);
  EXPECT_EQ(other->bytes, Bytes{2});
  // Member 2 is now the last sender: its connection is the one read.
  channels[1]->send(0, Bytes{4});
  channels[2]->send(0, Bytes{5});
  recent = eventually([&] { return coordinator.receive_recent(); });
  ASSERT_TRUE(recent.has_value());
  EXPECT_EQ(recent->from, 2);
  EXPECT_EQ(recent->bytes, Bytes{5});
  other = eventually([&] { return coordinator.receive_now(); });
  ASSERT_TRUE(other.has_value());
  EXPECT_EQ(other->bytes, Bytes{4});
}

// A member has one connection: its recent read is every read.
TEST(ControlChannel, AMembersRecentReadTakesTheCoordinatorsMessages) {
  std::vector<Channel> channels = connect_three();
  channels[0]->send(2, Bytes{7});
  std::optional<ControlMessage> message = eventually([&] { return channels[2]->receive_recent(); });
  ASSERT_TRUE(message.has_value());
  EXPECT_EQ(message->from, 0);
  EXPECT_EQ(message->bytes, Bytes{7});
}

}  // namespace
}  // namespace hora::control
