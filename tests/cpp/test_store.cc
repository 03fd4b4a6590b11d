// The in-memory stores: values, counters, blocking waits and timeouts.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "hora/errors.h"
#include "hora/store.h"

namespace hora {
namespace {

using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

std::vector<uint8_t> bytes(const std::string& text) { return {text.begin(), text.end()}; }
std::string text(const std::vector<uint8_t>& value) { return {value.begin(), value.end()}; }

// Runs `call`, which must throw Timeout, and returns its message.
template <typename Call>
std::string timeout_message(Call&& call) {
  try {
    call();
  } catch (const Timeout& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected hora::Timeout";
  return "";
}

TEST(HashStore, GetReturnsTheLatestValueSet) {
  auto store = make_hash_store();
  store->set("a", bytes("one"));
  EXPECT_EQ(text(store->get("a", milliseconds(0))), "one");
  store->set("a", bytes("two"));
  EXPECT_EQ(text(store->get("a", milliseconds(0))), "two");
  store->set("empty", {});
  EXPECT_TRUE(store->get("empty", milliseconds(0)).empty());
}

TEST(HashStore, GetBlocksUntilAnotherThreadSetsTheKey) {
  auto store = make_hash_store();
  std::thread writer([&] {
    std::this_thread::sleep_for(milliseconds(30));
    store->set("late", bytes("here"));
  });
  const auto start = Clock::now();
  EXPECT_EQ(text(store->get("late", milliseconds(5000))), "here");
  EXPECT_GE(Clock::now() - start, milliseconds(20));
  writer.join();
}

TEST(HashStore, GetTimesOutNamingTheKey) {
  auto store = make_hash_store();
  const auto start = Clock::now();
  const std::string message = timeout_message([&] { store->get("missing", milliseconds(50)); });
  EXPECT_GE(Clock::now() - start, milliseconds(50));
  EXPECT_LT(Clock::now() - start, milliseconds(2000));
  EXPECT_NE(message.find("'missing'"), std::string::npos) << message;
}

TEST(HashStore, AddCountsFromZeroAndIsReadableAsText) {
  auto store = make_hash_store();
  EXPECT_EQ(store->add("n", 1), 1);
  EXPECT_EQ(store->add("n", 5), 6);
  EXPECT_EQ(store->add("n", -7), -1);
  EXPECT_EQ(text(store->get("n", milliseconds(0))), "-1");
}

TEST(HashStore, ConcurrentAddsAreAtomic) {
  auto store = make_hash_store();
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 250; ++i) store->add("counter", 1);
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(store->add("counter", 0), 1000);
}

TEST(HashStore, AddOnANonIntegerValueIsRejected) {
  auto store = make_hash_store();
  store->set("word", bytes("abc"));
  EXPECT_THROW(store->add("word", 1), InvalidArgument);
}

TEST(HashStore, WaitReturnsOnceEveryKeyExists) {
  auto store = make_hash_store();
  std::thread writer([&] {
    store->set("x", bytes("1"));
    std::this_thread::sleep_for(milliseconds(20));
    store->add("y", 1);
  });
  store->wait({"x", "y"}, milliseconds(5000));
  writer.join();
}

TEST(HashStore, WaitTimeoutNamesOnlyTheMissingKeys) {
  auto store = make_hash_store();
  store->set("present", bytes("1"));
  const std::string message =
      timeout_message([&] { store->wait({"present", "gone1", "gone2"}, milliseconds(30)); });
  EXPECT_NE(message.find("'gone1'"), std::string::npos) << message;
  EXPECT_NE(message.find("'gone2'"), std::string::npos) << message;
  EXPECT_EQ(message.find("'present'"), std::string::npos) << message;
}

TEST(PrefixStore, KeysLandUnderThePrefixOfTheBase) {
  auto base = make_hash_store();
  auto set1 = make_prefix_store("set1", base);
  set1->set("key", bytes("v"));
  EXPECT_EQ(text(base->get("set1/key", milliseconds(0))), "v");
  EXPECT_EQ(set1->add("n", 2), 2);
  EXPECT_EQ(base->add("set1/n", 0), 2);
  auto nested = make_prefix_store("inner", set1);
  nested->set("k", bytes("w"));
  EXPECT_EQ(text(base->get("set1/inner/k", milliseconds(0))), "w");
}

TEST(PrefixStore, PrefixesIsolateTheirKeys) {
  auto base = make_hash_store();
  auto a = make_prefix_store("a", base);
  auto b = make_prefix_store("b", base);
  a->set("k", bytes("from a"));
  EXPECT_EQ(a->add("n", 1), 1);
  EXPECT_EQ(b->add("n", 1), 1);
  EXPECT_THROW(b->get("k", milliseconds(10)), Timeout);
  b->set("k", bytes("from b"));
  EXPECT_EQ(text(a->get("k", milliseconds(0))), "from a");
  EXPECT_EQ(text(b->get("k", milliseconds(0))), "from b");
}

TEST(PrefixStore, WaitBlocksAndTimesOutNamingThePrefixedKey) {
  auto base = make_hash_store();
  auto store = make_prefix_store("p", base);
  std::thread writer([&] {
    std::this_thread::sleep_for(milliseconds(20));
    base->set("p/ready", bytes("1"));
  });
  store->wait({"ready"}, milliseconds(5000));
  writer.join();
  const std::string message = timeout_message([&] { store->wait({"never"}, milliseconds(30)); });
  EXPECT_NE(message.find("'p/never'"), std::string::npos) << message;
}

TEST(PrefixStore, NullBaseIsRejected) {
  EXPECT_THROW(make_prefix_store("p", nullptr), InvalidArgument);
}

TEST(StoredInt32, ReadsWhatAMemberPublishedAndRefusesAnythingElse) {
  const auto bytes = [](const std::string& text) { return std::vector<uint8_t>(text.begin(), text.end()); };
  EXPECT_EQ(stored_int32(bytes("42"), "k"), 42);
  EXPECT_EQ(stored_int32(bytes("-7"), "k"), -7);
  for (const std::string bad : {"", "4x", " 4", "99999999999", "\xff\xfe", "1.5"}) {
    try {
      stored_int32(bytes(bad), "process_sets/[0, 1]/0");
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const Internal& e) {
      EXPECT_NE(std::string(e.what()).find("rendezvous key 'process_sets/[0, 1]/0'"), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace hora
