// Test scaffolding: a job of `n` ranks as threads of this process, each with
// its own Runtime over the local backend and one shared in-memory store.
#pragma once

#include <chrono>
#include <exception>
#include <functional>
#include <thread>
#include <vector>

#include "hora/runtime.h"
#include "hora/store.h"
#include "transport/backend.h"

namespace hora::test_support {

// Runs `body` on every rank and rethrows the first rank's failure (by rank)
// once all threads have ended.
inline void run_ranks(int n, const std::function<void(Runtime&)>& body,
                      const std::vector<std::vector<int>>& initial_sets = {}) {
  auto store = make_hash_store();
  std::vector<std::exception_ptr> errors(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      try {
        RuntimeConfig config;
        config.rank = r;
        config.size = n;
        config.timeout = std::chrono::seconds(20);
        config.start_timeout = std::chrono::seconds(20);
        Runtime runtime(config, store, make_local_backend_factory(), initial_sets);
        body(runtime);
      } catch (...) {
        errors[r] = std::current_exception();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
}

}  // namespace hora::test_support
