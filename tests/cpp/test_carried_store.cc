// What the lowest member of a new set writes while preparing it travels with
// the set's id (store/carried_store.h, process_set/membership.h): the view
// that keeps it, the record that carries it, and a set whose members share
// a host being made with one store read per member.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <exception>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "hora/errors.h"
#include "hora/runtime.h"
#include "net/codec.h"
#include "process_set/membership.h"
#include "store/carried_store.h"
#include "planner/transport_planner.h"
#include "transport/backend.h"

namespace hora {
namespace {

using std::chrono::milliseconds;

std::vector<uint8_t> bytes(const std::string& text) { return {text.begin(), text.end()}; }

// A store that passes everything to a base store and notes every read
// (get and wait) and write that reaches it.
class NotingStore final : public Store {
 public:
  explicit NotingStore(std::shared_ptr<Store> base) : base_(std::move(base)) {}
  void set(const std::string& key, const std::vector<uint8_t>& value) override {
    note(writes_, key);
    base_->set(key, value);
  }
  void post(const std::string& key, const std::vector<uint8_t>& value) override {
    note(writes_, key);
    base_->post(key, value);
  }
  std::vector<uint8_t> get(const std::string& key, milliseconds timeout) override {
    note(reads_, key);
    return base_->get(key, timeout);
  }
  int64_t add(const std::string& key, int64_t delta) override { return base_->add(key, delta); }
  void wait(const std::vector<std::string>& keys, milliseconds timeout) override {
    for (const std::string& key : keys) note(reads_, key);
    base_->wait(keys, timeout);
  }
  std::vector<std::string> reads() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return reads_;
  }
  std::vector<std::string> writes() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return writes_;
  }
  void forget() {
    std::lock_guard<std::mutex> lock(mutex_);
    reads_.clear();
    writes_.clear();
  }

 private:
  void note(std::vector<std::string>& list, const std::string& key) {
    std::lock_guard<std::mutex> lock(mutex_);
    list.push_back(key);
  }
  const std::shared_ptr<Store> base_;
  mutable std::mutex mutex_;
  std::vector<std::string> reads_, writes_;
};

TEST(CarriedStore, KeepsWhatWasWrittenAndAnswersItWithoutTheBase) {
  auto base = std::make_shared<NotingStore>(make_hash_store());
  CarriedStore view(base);
  view.post("present.0", bytes("1"));
  view.set("shm/ready", bytes("ok name 4096"));
  EXPECT_EQ(base->writes(), (std::vector<std::string>{"present.0", "shm/ready"}));
  // The base store has both: others read them there.
  EXPECT_EQ(base->get("shm/ready", milliseconds(0)), bytes("ok name 4096"));
  base->forget();
  EXPECT_EQ(view.get("present.0", milliseconds(0)), bytes("1"));
  view.wait({"present.0", "shm/ready"}, milliseconds(0));
  EXPECT_EQ(view.held("shm/ready"), bytes("ok name 4096"));
  EXPECT_TRUE(base->reads().empty());
  // Posting what it holds again sends nothing; a new value is sent and
  // replaces the one it holds.
  view.post("present.0", bytes("1"));
  EXPECT_TRUE(base->writes().empty());
  view.post("shm/ready", bytes("ok other 8192"));
  EXPECT_EQ(base->writes(), (std::vector<std::string>{"shm/ready"}));
  EXPECT_EQ(view.get("shm/ready", milliseconds(0)), bytes("ok other 8192"));
  EXPECT_EQ(base->get("shm/ready", milliseconds(0)), bytes("ok other 8192"));
  EXPECT_EQ(view.take_written(), (StoreEntries{{"present.0", bytes("1")},
                                               {"shm/ready", bytes("ok name 4096")},
                                               {"shm/ready", bytes("ok other 8192")}}));
  // Once handed over, later writes are kept but no longer recorded.
  view.post("later", bytes("x"));
  EXPECT_TRUE(view.take_written().empty());
  EXPECT_EQ(view.held("later"), bytes("x"));
}

TEST(CarriedStore, KeptEntriesOfAnotherMemberAreReadHereTheRestFromTheBase) {
  auto base = std::make_shared<NotingStore>(make_hash_store());
  CarriedStore view(base);
  view.keep({{"present.0", bytes("1")}, {"shm/ready", bytes("ok n 1")}});
  EXPECT_EQ(view.get("shm/ready", milliseconds(0)), bytes("ok n 1"));
  EXPECT_FALSE(view.held("present.1").has_value());
  EXPECT_TRUE(base->reads().empty());
  // Only the keys it does not hold are waited for in the base store.
  base->set("present.1", bytes("1"));
  view.wait({"present.0", "present.1"}, milliseconds(100));
  EXPECT_EQ(base->reads(), (std::vector<std::string>{"present.1"}));
  EXPECT_THROW(view.get("absent", milliseconds(1)), Timeout);
  // Kept entries are not the view's own writes.
  EXPECT_TRUE(view.take_written().empty());
  // Counters are always the base's.
  EXPECT_EQ(view.add("n", 2), 2);
  EXPECT_EQ(base->add("n", 0), 2);
  EXPECT_THROW(CarriedStore(nullptr), InvalidArgument);
}

TEST(CarriedStoreEntries, RoundTripAndRefuseMalformedBytes) {
  const StoreEntries entries{{"a", bytes("1")}, {"shm/ready", bytes("ok x 9")}, {"empty", {}}};
  EXPECT_EQ(decode_store_entries(encode_store_entries(entries)), entries);
  EXPECT_TRUE(decode_store_entries(encode_store_entries({})).empty());
  const std::vector<uint8_t> good = encode_store_entries(entries);
  auto refusal = [](const std::vector<uint8_t>& input) -> std::string {
    try {
      decode_store_entries(input);
    } catch (const net::DecodeError& e) {
      return e.what();
    }
    return "";
  };
  std::vector<uint8_t> cut(good.begin(), good.end() - 1);
  EXPECT_NE(refusal(cut).find("truncated"), std::string::npos) << refusal(cut);
  std::vector<uint8_t> longer = good;
  longer.push_back(0);
  EXPECT_NE(refusal(longer).find("1 trailing byte"), std::string::npos) << refusal(longer);
  net::ByteWriter many;
  many.put<uint32_t>(1u << 30);
  EXPECT_NE(refusal(many.take()).find("entry count"), std::string::npos);
}

TEST(PublishedProcessSet, TheRecordCarriesTheLowestMembersEntries) {
  auto store = make_hash_store();
  const StoreEntries carried{{"present.1", bytes("1")}, {"shm/ready", bytes("ok seg 8192")}};
  publish_process_set_id(*store, {1, 3}, SetOrigin::kAdded, 0, 6, carried);
  const PublishedSet published = published_process_set(*store, {1, 3}, SetOrigin::kAdded, 0, milliseconds(100));
  EXPECT_EQ(published.id, 6);
  EXPECT_EQ(published.carried, carried);
  EXPECT_EQ(published_process_set_id(*store, {1, 3}, SetOrigin::kAdded, 0, milliseconds(100)), 6);
  // Nothing carried: the record is the id alone.
  publish_process_set_id(*store, {1, 3}, SetOrigin::kAdded, 1, 10);
  EXPECT_EQ(store->get(process_set_id_key({1, 3}, SetOrigin::kAdded, 1), milliseconds(0)), bytes("10"));
  EXPECT_TRUE(published_process_set(*store, {1, 3}, SetOrigin::kAdded, 1, milliseconds(0)).carried.empty());
}

TEST(PublishedProcessSet, AMalformedRecordIsAnErrorNamingItsKey) {
  auto store = make_hash_store();
  const std::string key = process_set_id_key({0, 2}, SetOrigin::kAdded, 0);
  store->set(key, bytes("7\ngarbage"));
  try {
    published_process_set(*store, {0, 2}, SetOrigin::kAdded, 0, milliseconds(0));
    ADD_FAILURE() << "a malformed record was read";
  } catch (const Internal& e) {
    EXPECT_NE(std::string(e.what()).find(key), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("malformed carried store entries"), std::string::npos) << e.what();
  }
  store->set(process_set_id_key({0, 2}, SetOrigin::kAdded, 1), bytes("x\n"));
  EXPECT_THROW(published_process_set(*store, {0, 2}, SetOrigin::kAdded, 1, milliseconds(0)), Internal);
}

// Two ranks as threads over the shared-memory planner: once the job has
// started (the global set taught every rank's host), a member of an added
// set reads the store once, for the set's id, which carries the segment
// and the lowest member's arrival; the set then works.
TEST(CarriedStoreRuntime, AMemberOfAnAddedOneHostSetReadsTheStoreOnceForTheId) {
  auto shared = make_hash_store();
  std::vector<std::shared_ptr<NotingStore>> stores{std::make_shared<NotingStore>(shared),
                                                   std::make_shared<NotingStore>(shared)};
  std::atomic<int> started{0}, done{0};
  std::vector<std::exception_ptr> errors(2);
  std::vector<std::vector<std::string>> reads(2);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      try {
        RuntimeConfig config;
        config.rank = r;
        config.size = 2;
        config.timeout = config.start_timeout = std::chrono::seconds(20);
        Runtime runtime(config, stores[r], make_transport_planner(make_local_backend_factory(), {ShmOptions{}}), {});
        ++started;
        while (started < 2) std::this_thread::yield();
        stores[r]->forget();
        ProcessSet set = runtime.add_process_set({0, 1});
        std::vector<float> in(3, 1.0f + r), out(3);
        OpArgs args;
        args.op = OpType::kAllreduce;
        args.input = {in.data(), DataType::kFloat32, {3}};
        args.output = {out.data(), DataType::kFloat32, {3}};
        runtime.enqueue(set.id, args)->wait();
        EXPECT_EQ(out, std::vector<float>(3, 3.0f));
        reads[r] = stores[r]->reads();
        ++done;
        while (done < 2) std::this_thread::yield();
        runtime.remove_process_set(set.id);
      } catch (...) {
        errors[r] = std::current_exception();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
  EXPECT_EQ(reads[1], (std::vector<std::string>{process_set_id_key({0, 1}, SetOrigin::kAdded, 0)}));
}

}  // namespace
}  // namespace hora
