// The TensorQueue: pending ops by name, new requests in push order, and the
// errors for a duplicate name or an op this rank never submitted.
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "coordinator/request.h"
#include "coordinator/tensor_queue.h"
#include "hora/errors.h"
#include "hora/work.h"

namespace hora {
namespace {

TensorEntry entry(const std::string& name, void* data = nullptr) {
  TensorEntry e;
  e.request.name = name;
  e.request.shape = {4};
  e.input.data = data;
  e.input.shape = {4};
  e.output.data = data;
  e.output.shape = {4};
  e.work = std::make_shared<Work>();
  return e;
}

std::vector<std::string> names_of(const std::vector<Request>& requests) {
  std::vector<std::string> names;
  for (const Request& q : requests) names.push_back(q.name);
  return names;
}

TEST(TensorQueueTest, TakeNewReturnsRequestsInPushOrderOnce) {
  TensorQueue queue;
  EXPECT_TRUE(queue.empty());
  EXPECT_TRUE(queue.take_new().empty());
  for (const char* name : {"c", "a", "b"}) queue.push(entry(name));
  EXPECT_FALSE(queue.empty());
  EXPECT_EQ(names_of(queue.take_new()), (std::vector<std::string>{"c", "a", "b"}));
  EXPECT_TRUE(queue.take_new().empty());
  EXPECT_FALSE(queue.empty()) << "taking new requests leaves the entries pending";
  queue.push(entry("d"));
  EXPECT_EQ(names_of(queue.take_new()), std::vector<std::string>{"d"});
}

TEST(TensorQueueTest, TakeNewCopiesTheWholeRequest) {
  TensorQueue queue;
  TensorEntry e = entry("w");
  e.request.op = OpType::kBroadcast;
  e.request.root = 2;
  e.request.dtype = DataType::kInt64;
  const Request pushed = e.request;
  queue.push(std::move(e));
  std::vector<Request> fresh = queue.take_new();
  ASSERT_EQ(fresh.size(), 1u);
  EXPECT_EQ(fresh[0], pushed);
}

TEST(TensorQueueTest, TakeRemovesTheNamedEntry) {
  TensorQueue queue;
  float a_data[4] = {};
  float b_data[4] = {};
  TensorEntry a = entry("a", a_data);
  TensorEntry b = entry("b", b_data);
  std::shared_ptr<Work> b_work = b.work;
  queue.push(std::move(a));
  queue.push(std::move(b));
  queue.take_new();

  TensorEntry got = queue.take("b");
  EXPECT_EQ(got.request.name, "b");
  EXPECT_EQ(got.input.data, b_data);
  EXPECT_EQ(got.output.data, b_data);
  EXPECT_EQ(got.work, b_work);
  EXPECT_FALSE(queue.empty());
  EXPECT_THROW(queue.take("b"), Internal);

  EXPECT_EQ(queue.take("a").input.data, a_data);
  EXPECT_TRUE(queue.empty());
}

TEST(TensorQueueTest, TakeOfUnknownNameThrowsInternalNamingIt) {
  TensorQueue queue;
  queue.push(entry("present"));
  try {
    queue.take("layer3.bias");
    FAIL() << "expected hora::Internal";
  } catch (const Internal& e) {
    EXPECT_NE(std::string(e.what()).find("'layer3.bias'"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(queue.empty());
}

TEST(TensorQueueTest, DuplicatePendingNameThrowsInvalidArgument) {
  TensorQueue queue;
  TensorEntry first = entry("grad");
  std::shared_ptr<Work> first_work = first.work;
  queue.push(std::move(first));
  try {
    queue.push(entry("grad"));
    FAIL() << "expected hora::InvalidArgument";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("'grad'"), std::string::npos) << e.what();
  }
  // The refused push changed nothing.
  EXPECT_EQ(names_of(queue.take_new()), std::vector<std::string>{"grad"});
  EXPECT_EQ(queue.take("grad").work, first_work);
  // Once taken, the name is free again.
  EXPECT_NO_THROW(queue.push(entry("grad")));
  EXPECT_EQ(names_of(queue.take_new()), std::vector<std::string>{"grad"});
}

TEST(TensorQueueTest, TakeAllEmptiesTheQueue) {
  TensorQueue queue;
  for (const char* name : {"a", "b", "c"}) queue.push(entry(name));
  queue.take_new();
  queue.push(entry("d"));  // not yet taken as new
  std::vector<TensorEntry> all = queue.take_all();
  std::vector<std::string> names;
  for (const TensorEntry& e : all) {
    names.push_back(e.request.name);
    EXPECT_NE(e.work, nullptr);
  }
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{"a", "b", "c", "d"}));
  EXPECT_TRUE(queue.empty());
  EXPECT_TRUE(queue.take_new().empty()) << "taken entries are not negotiated";
  EXPECT_TRUE(queue.take_all().empty());
  EXPECT_THROW(queue.take("a"), Internal);
  EXPECT_NO_THROW(queue.push(entry("a")));
}

TEST(TensorQueueTest, ConcurrentPushesAreAllKept) {
  TensorQueue queue;
  constexpr int kThreads = 4;
  constexpr int kPerThread = 250;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&queue, t] {
      for (int i = 0; i < kPerThread; ++i) queue.push(entry("t" + std::to_string(t) + "." + std::to_string(i)));
    });
  std::vector<std::string> seen;
  while (seen.size() < static_cast<size_t>(kThreads * kPerThread)) {
    for (const Request& q : queue.take_new()) seen.push_back(q.name);
    if (seen.size() < static_cast<size_t>(kThreads * kPerThread)) std::this_thread::yield();
  }
  for (std::thread& t : threads) t.join();
  EXPECT_TRUE(queue.take_new().empty());
  std::vector<std::string> sorted = seen;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_EQ(std::adjacent_find(sorted.begin(), sorted.end()), sorted.end()) << "a name came out twice";
  // Each thread's own pushes come out in its order.
  for (int t = 0; t < kThreads; ++t) {
    int next = 0;
    const std::string prefix = "t" + std::to_string(t) + ".";
    for (const std::string& name : seen)
      if (name.rfind(prefix, 0) == 0) {
        EXPECT_EQ(name, prefix + std::to_string(next++));
      }
    EXPECT_EQ(next, kPerThread);
  }
  EXPECT_EQ(queue.take_all().size(), static_cast<size_t>(kThreads * kPerThread));
}

}  // namespace
}  // namespace hora
