// Process set ids: the function the lowest member computes them with, their
// publication in the store, and what members and non-members of a Runtime
// see (ranks as threads over an in-memory store and the local backend).
#include <gtest/gtest.h>

#include <chrono>
#include <exception>
#include <functional>
#include <limits>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "hora/errors.h"
#include "hora/runtime.h"
#include "process_set/membership.h"
#include "ranks_as_threads.h"
#include "transport/backend.h"

namespace hora {
namespace {

using std::chrono::milliseconds;

TEST(DynamicProcessSetId, EveryLowestRankAndSequenceGetsItsOwnId) {
  for (int world = 1; world <= 5; ++world) {
    for (int32_t first : {1, 4}) {
      std::set<int32_t> seen;
      for (int rank = 0; rank < world; ++rank)
        for (int64_t sequence = 0; sequence < 50; ++sequence) {
          int32_t id = dynamic_process_set_id(first, world, rank, sequence);
          EXPECT_GE(id, first);
          EXPECT_TRUE(seen.insert(id).second) << "id " << id << " given twice (world " << world << ")";
        }
      // Dense: the first 50 sequences of every rank fill first .. first + 50 * world - 1.
      EXPECT_EQ(*seen.rbegin(), first + 50 * world - 1);
    }
  }
}

TEST(DynamicProcessSetId, FollowsTheDocumentedFormula) {
  // Horovod-style even/odd sets on 4 ranks, created twice (after a removal).
  EXPECT_EQ(dynamic_process_set_id(1, 4, 0, 0), 1);
  EXPECT_EQ(dynamic_process_set_id(1, 4, 1, 0), 2);
  EXPECT_EQ(dynamic_process_set_id(1, 4, 0, 1), 5);
  EXPECT_EQ(dynamic_process_set_id(1, 4, 1, 1), 6);
  // After two sets given to init(): dynamic ids start at 3.
  EXPECT_EQ(dynamic_process_set_id(3, 4, 2, 0), 5);
}

TEST(DynamicProcessSetId, RefusesIdsBeyondInt32AndBadArguments) {
  const int64_t max = std::numeric_limits<int32_t>::max();
  EXPECT_EQ(dynamic_process_set_id(1, 1, 0, max - 1), max);
  try {
    dynamic_process_set_id(1, 1, 0, max);
    ADD_FAILURE() << "expected InvalidArgument";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("no process set ids remain"), std::string::npos) << e.what();
  }
  EXPECT_THROW(dynamic_process_set_id(1, 4, 0, max / 4 + 1), InvalidArgument);
  EXPECT_THROW(dynamic_process_set_id(1, 4, 4, 0), InvalidArgument);
  EXPECT_THROW(dynamic_process_set_id(1, 4, -1, 0), InvalidArgument);
  EXPECT_THROW(dynamic_process_set_id(1, 4, 0, -1), InvalidArgument);
  EXPECT_THROW(dynamic_process_set_id(0, 4, 0, 0), InvalidArgument);
}

TEST(PublishedProcessSetId, ReadersWaitForTheLowestMember) {
  auto store = make_hash_store();
  std::thread lowest([&] {
    std::this_thread::sleep_for(milliseconds(50));
    publish_process_set_id(*store, {1, 3}, SetOrigin::kAdded, 0, 6);
  });
  EXPECT_EQ(published_process_set_id(*store, {1, 3}, SetOrigin::kAdded, 0, milliseconds(5000)), 6);
  lowest.join();
  // Each generation over the same ranks has its own key.
  publish_process_set_id(*store, {1, 3}, SetOrigin::kAdded, 1, 10);
  EXPECT_EQ(published_process_set_id(*store, {1, 3}, SetOrigin::kAdded, 1, milliseconds(100)), 10);
  EXPECT_EQ(published_process_set_id(*store, {1, 3}, SetOrigin::kAdded, 0, milliseconds(100)), 6);
  auto added = SetOrigin::kAdded;
  EXPECT_NE(process_set_id_key({1, 3}, added, 0), process_set_id_key({1, 3}, added, 1));
  EXPECT_NE(process_set_id_key({1, 3}, added, 0), process_set_id_key({1, 2, 3}, added, 0));
  EXPECT_NE(process_set_id_key({1, 3}, added, 0), process_set_id_key({1, 3}, SetOrigin::kFirstUse, 0));
}

TEST(PublishedProcessSetId, TimesOutNamingTheSetAndItsLowestRank) {
  auto store = make_hash_store();
  try {
    published_process_set_id(*store, {2, 3}, SetOrigin::kAdded, 1, milliseconds(50));
    ADD_FAILURE() << "expected Timeout";
  } catch (const Timeout& e) {
    std::string what = e.what();
    EXPECT_NE(what.find("[2, 3]"), std::string::npos) << what;
    EXPECT_NE(what.find("rank 2"), std::string::npos) << what;
    EXPECT_NE(what.find("set number 2"), std::string::npos) << what;
  }
}

using test_support::run_ranks;

// The id this rank sees for a set over `ranks` it adds: members get it from
// add_process_set, non-members read it afterwards.
int32_t add_and_read_id(Runtime& rt, const std::vector<int>& ranks) {
  ProcessSet set = rt.add_process_set(ranks);
  if (set.included()) return set.id;
  EXPECT_EQ(set.id, -1) << "a non-member's add_process_set returns before the id is known";
  return rt.process_set_id(ranks, set.generation);
}

TEST(RuntimeProcessSetIds, HorovodStyleProgramsSeeTheSameIdsOnEveryRank) {
  std::vector<std::vector<int32_t>> seen(4);
  run_ranks(4, [&](Runtime& rt) {
    for (int round = 0; round < 2; ++round) {
      int32_t even = add_and_read_id(rt, {0, 2});
      int32_t odd = add_and_read_id(rt, {1, 3});
      int32_t upper = add_and_read_id(rt, {1, 2, 3});
      seen[rt.rank()].insert(seen[rt.rank()].end(), {even, odd, upper});
      for (int32_t id : {even, odd, upper}) rt.remove_process_set(id);
    }
  });
  // [0,2] is rank 0's 1st and 2nd own set; [1,3] and [1,2,3] are rank 1's 1st to 4th.
  std::vector<int32_t> expected = {1, 2, 6, 5, 10, 14};
  for (int r = 0; r < 4; ++r) EXPECT_EQ(seen[r], expected) << "rank " << r;
}

TEST(RuntimeProcessSetIds, ConcurrentMembersOnlyCreationGivesTheSameIdsOnEveryRun) {
  // Sets [0,1] and [2,3] are created at the same time by disjoint members;
  // run it twice, letting a different pair reach the store first each time.
  auto run_once = [](int delayed_rank) {
    std::vector<int32_t> ids(4);
    run_ranks(4, [&](Runtime& rt) {
      if (rt.rank() == delayed_rank) std::this_thread::sleep_for(milliseconds(100));
      std::vector<int> mine = rt.rank() < 2 ? std::vector<int>{0, 1} : std::vector<int>{2, 3};
      ids[rt.rank()] = rt.add_process_set(mine).id;
      ids[rt.rank()] = rt.add_process_set(mine).id;  // a second set over the same ranks
    });
    return ids;
  };
  std::vector<int32_t> first = run_once(0), second = run_once(2);
  EXPECT_EQ(first, second);
  EXPECT_EQ(first, (std::vector<int32_t>{5, 5, 7, 7}));
}

TEST(RuntimeProcessSetIds, IdsAreNeverReusedAfterRemoval) {
  run_ranks(2, [](Runtime& rt) {
    std::set<int32_t> seen;
    for (int i = 0; i < 5; ++i) {
      int32_t alone = add_and_read_id(rt, {rt.rank()});
      int32_t both = add_and_read_id(rt, {0, 1});
      EXPECT_TRUE(seen.insert(alone).second) << "id " << alone << " reused";
      EXPECT_TRUE(seen.insert(both).second) << "id " << both << " reused";
      EXPECT_TRUE(rt.remove_process_set(alone));
      EXPECT_TRUE(rt.remove_process_set(both));
      EXPECT_THROW(rt.process_set(both), InvalidArgument);
    }
  });
}

TEST(RuntimeProcessSetIds, NonMembersNeitherBlockNorFailOnRemove) {
  run_ranks(3, [](Runtime& rt) {
    if (rt.rank() == 2) {
      auto start = std::chrono::steady_clock::now();
      ProcessSet set = rt.add_process_set({0, 1});  // the members have not called it yet
      EXPECT_LT(std::chrono::steady_clock::now() - start, milliseconds(1000));
      EXPECT_EQ(set.generation, 0);
      int32_t id = rt.process_set_id({0, 1}, set.generation);  // waits for rank 0
      EXPECT_EQ(id, 1);
      EXPECT_FALSE(rt.remove_process_set(id));  // not a member: nothing to stop
      return;
    }
    std::this_thread::sleep_for(milliseconds(200));
    ProcessSet set = rt.add_process_set({0, 1});
    EXPECT_EQ(set.id, 1);
    EXPECT_TRUE(rt.remove_process_set(set.id));
  });
}

// Members that first registered a set over [0, 1] on first use, then every
// rank adds one over the same ranks (Horovod's style): the non-members must
// read the added set's id, not the first-use set's.
TEST(RuntimeProcessSetIds, FirstUseSetsDoNotShiftTheIdsNonMembersRead) {
  std::vector<int32_t> ids(4, -1);
  run_ranks(4, [&](Runtime& rt) {
    if (rt.rank() < 2) rt.add_process_set({0, 1}, SetOrigin::kFirstUse);
    ProcessSet added = rt.add_process_set({0, 1});
    ids[rt.rank()] = added.included() ? added.id : rt.process_set_id({0, 1}, added.generation);
  });
  EXPECT_EQ(ids[2], ids[0]);
  EXPECT_EQ(ids[3], ids[0]);
  EXPECT_EQ(ids[1], ids[0]);
}

TEST(RuntimeProcessSetIds, ReadingAnIdRefusesBadArguments) {
  run_ranks(1, [](Runtime& rt) {
    EXPECT_THROW(rt.process_set_id({0}, -1), InvalidArgument);
    EXPECT_THROW(rt.process_set_id({3}, 0), InvalidArgument);
  });
}

}  // namespace
}  // namespace hora
