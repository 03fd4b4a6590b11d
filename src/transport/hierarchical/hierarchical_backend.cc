#include "transport/hierarchical/hierarchical_backend.h"

#include <condition_variable>
#include <algorithm>
#include <cstring>
#include <exception>
#include <numeric>
#include <thread>

#include "hora/errors.h"

namespace hora::hierarchical {
namespace {

size_t sum(const std::vector<size_t>& sizes) { return std::accumulate(sizes.begin(), sizes.end(), size_t{0}); }

// Call inside a catch block: rethrows the exception in flight prefixed with
// `where`, keeping Timeout and Internal; every other failure of a part is a
// PeerFailure of the set.
[[noreturn]] void rethrow_as_set_failure(const std::string& where) {
  try {
    throw;
  } catch (const Timeout& e) {
    throw Timeout(where + e.what());
  } catch (const Internal& e) {
    throw Internal(where + e.what());
  } catch (const std::exception& e) {
    throw PeerFailure(where + e.what());
  }
}

}  // namespace

// A leader's thread for the part between hosts: runs the jobs posted to it
// in order, one at a time, and keeps the first failure.
class HierarchicalBackend::Courier {
 public:
  Courier() : thread_([this] { serve(); }) {}
  ~Courier() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stopping_ = true;
    }
    changed_.notify_all();
    thread_.join();
  }

  // Starts a round: forgets the previous round's jobs and failure.
  void begin() {
    std::lock_guard<std::mutex> lock(mutex_);
    jobs_.clear();
    posted_ = done_ = 0;
    failure_ = nullptr;
  }
  void post(std::function<void()> job) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      jobs_.push_back(std::move(job));
      ++posted_;
    }
    changed_.notify_all();
  }
  // Waits until the first `count` jobs of the round are done; rethrows the
  // first failure (later jobs are then skipped).
  void await(size_t count) {
    std::unique_lock<std::mutex> lock(mutex_);
    changed_.wait(lock, [&] { return done_ >= count || failure_; });
    if (failure_) std::rethrow_exception(failure_);
  }
  // Waits until every posted job has ended, whatever its outcome.
  void drain() {
    std::unique_lock<std::mutex> lock(mutex_);
    changed_.wait(lock, [&] { return done_ == posted_; });
  }

 private:
  void serve() {
    std::unique_lock<std::mutex> lock(mutex_);
    for (;;) {
      changed_.wait(lock, [&] { return stopping_ || done_ < posted_; });
      if (done_ == posted_) return;  // stopping, nothing left
      std::function<void()> job = std::move(jobs_[done_]);
      const bool skip = failure_ != nullptr;
      lock.unlock();
      std::exception_ptr failure;
      if (!skip) {
        try {
          job();
        } catch (...) {
          failure = std::current_exception();
        }
      }
      lock.lock();
      if (failure && !failure_) failure_ = failure;
      ++done_;
      changed_.notify_all();
    }
  }

  std::mutex mutex_;
  std::condition_variable changed_;
  std::vector<std::function<void()>> jobs_;
  size_t posted_ = 0, done_ = 0;
  std::exception_ptr failure_;
  bool stopping_ = false;
  std::thread thread_;  // last: starts once the rest is made
};

HierarchicalBackend::HierarchicalBackend(std::vector<int> global_ranks, int rank, HostLayout layout, Parts parts)
    : global_ranks_(std::move(global_ranks)),
      rank_(rank),
      set_name_(describe_set(global_ranks_)),
      layout_(std::move(layout)),
      host_(layout_.host_of.at(rank_)),
      parts_(std::move(parts)) {
  const auto& members = layout_.hosts.at(host_);
  const bool whole_fits = parts_.whole && parts_.whole->rank() == rank_ && parts_.whole->size() == size();
  const bool local_fits = members.size() == 1 ? !parts_.local
                                              : parts_.local && parts_.local->rank() == layout_.local_rank_of[rank_] &&
                                                    parts_.local->size() == static_cast<int>(members.size());
  const bool leaders_fits = !layout_.is_leader(rank_) ? !parts_.leaders
                                                      : parts_.leaders && parts_.leaders->rank() == host_ &&
                                                            parts_.leaders->size() == static_cast<int>(layout_.hosts.size());
  if (!whole_fits || !local_fits || !leaders_fits) throw Internal(set_name_ + ": hierarchical parts do not fit the set");
}

template <typename Collective>
void HierarchicalBackend::run(const char* name, Collective&& collective) {
  if (aborted_) {
    std::lock_guard<std::mutex> lock(abort_mutex_);
    throw PeerFailure(set_name_ + ": " + name + " on an aborted set: " + abort_reason_);
  }
  if (!broken_.empty())
    throw PeerFailure(set_name_ + ": " + name + " on a set broken by an earlier failure: " + broken_);
  try {
    try {
      collective();
    } catch (...) {
      rethrow_as_set_failure(set_name_ + ": " + name + ": ");
    }
  } catch (const Error& e) {
    // The members are no longer in step: give every part up, so that peers
    // waiting in another part (a leader in the network part, a member in
    // its host's part) fail now.
    broken_ = e.what();
    abort_parts(broken_);
    throw;
  }
}

HierarchicalBackend::~HierarchicalBackend() = default;

void HierarchicalBackend::abort_parts(const std::string& reason) noexcept {
  for (Backend* part : {parts_.local.get(), parts_.leaders.get(), parts_.whole.get()}) {
    if (!part) continue;
    try {
      part->abort(reason);
    } catch (...) {
      // abort() is best effort; the other parts are still given up.
    }
  }
}

void HierarchicalBackend::abort(const std::string& reason) {
  {
    std::lock_guard<std::mutex> lock(abort_mutex_);
    if (aborted_) return;
    abort_reason_ = reason;
    aborted_ = true;
  }
  abort_parts(reason);
}

void HierarchicalBackend::expect_one_per_member(const char* name, const std::vector<size_t>& sizes) const {
  if (sizes.size() != global_ranks_.size())
    throw InvalidArgument(set_name_ + ": " + name + " needs one size per member, got " + std::to_string(sizes.size()));
}

uint8_t* HierarchicalBackend::staging(int which, size_t bytes) {
  std::vector<uint8_t>& buffer = staging_[which];
  if (buffer.size() < bytes || buffer.empty()) buffer.resize(std::max<size_t>(bytes, 1));
  return buffer.data();
}

// The host's reduce to its leader, the leaders' allreduce, then the
// leader's result to its host: every member ends with the same bits.
void HierarchicalBackend::allreduce(void* buf, size_t count, DataType dtype, ReduceOp op) {
  if (count == 0) return;
  if (count * dtype_size(dtype) > kPipelineBytes) {
    return run("allreduce", [&] { pipelined_allreduce(static_cast<uint8_t*>(buf), count, dtype, op); });
  }
  run("allreduce", [&] {
    if (parts_.local) parts_.local->reduce(buf, count, dtype, op, 0);
    if (parts_.leaders) parts_.leaders->allreduce(buf, count, dtype, op);
    if (parts_.local) parts_.local->broadcast(buf, count * dtype_size(dtype), 0);
  });
}

// Every member takes this path for the same sizes, so that the leaders
// agree on the chunks. Chunk k: the host's reduce to its leader A(k), the
// leaders' N(k) on the courier, the host's broadcast B(k). Every member of
// a host runs its host's part in one order, A(0), A(1), B(0), A(2), B(1),
// ..., B(K-1); a leader posts N(k) after A(k) and awaits it before B(k),
// so N(k) runs while the host does A(k + 1) and B(k - 1).
void HierarchicalBackend::pipelined_allreduce(uint8_t* buf, size_t count, DataType dtype, ReduceOp op) {
  const size_t element = dtype_size(dtype);
  const size_t chunks =
      std::clamp<size_t>(count * element / kPipelineChunkBytes, size_t{1}, kMaxPipelineChunks);
  auto chunk = [&](size_t k) {
    const size_t base = count / chunks, rem = count % chunks;
    return std::pair<uint8_t*, size_t>{buf + (k * base + std::min(k, rem)) * element, base + (k < rem ? 1 : 0)};
  };
  Backend* leaders = parts_.leaders.get();
  if (!parts_.local) {
    // Alone on its host: the leaders' chunks one after another, as the
    // other leaders run them.
    for (size_t k = 0; k < chunks; ++k) {
      const auto [data, n] = chunk(k);
      leaders->allreduce(data, n, dtype, op);
    }
    return;
  }
  if (leaders && !courier_) courier_ = std::make_unique<Courier>();
  if (leaders) courier_->begin();
  auto reduce_here = [&](size_t k) {
    const auto [data, n] = chunk(k);
    parts_.local->reduce(data, n, dtype, op, 0);
    if (leaders) courier_->post([leaders, data, n, dtype, op] { leaders->allreduce(data, n, dtype, op); });
  };
  auto broadcast_here = [&](size_t k) {
    if (leaders) courier_->await(k + 1);
    const auto [data, n] = chunk(k);
    parts_.local->broadcast(data, n * element, 0);
  };
  try {
    reduce_here(0);
    for (size_t k = 1; k < chunks; ++k) {
      reduce_here(k);
      broadcast_here(k - 1);
    }
    broadcast_here(chunks - 1);
  } catch (...) {
    if (leaders) {
      // The courier may still be inside a leaders' allreduce of `buf`:
      // give the parts up so that it ends, and wait for it.
      std::string reason = set_name_ + ": allreduce failed";
      try {
        throw;
      } catch (const std::exception& e) {
        reason = e.what();
      }
      abort_parts(reason);
      courier_->drain();
    }
    throw;
  }
}

// The host's inputs (in local order) make its block; the leaders gather
// the blocks (in host order), put them in set-rank order (already so when
// every host's members are consecutive set ranks) and give the result to
// their host.
void HierarchicalBackend::allgatherv(const void* in, void* out, const std::vector<size_t>& recv_bytes) {
  expect_one_per_member("allgatherv", recv_bytes);
  const size_t total = sum(recv_bytes);
  if (total == 0) return;
  run("allgatherv", [&] {
    std::vector<size_t> local_bytes;
    for (int r : layout_.hosts[host_]) local_bytes.push_back(recv_bytes[r]);
    uint8_t* host_block = staging(0, sum(local_bytes));
    if (parts_.local) {
      parts_.local->allgatherv(in, host_block, local_bytes);
    } else if (recv_bytes[rank_] > 0) {
      std::memcpy(host_block, in, recv_bytes[rank_]);
    }
    if (parts_.leaders) {
      std::vector<size_t> host_bytes(layout_.hosts.size(), 0);
      for (int r = 0; r < size(); ++r) host_bytes[layout_.host_of[r]] += recv_bytes[r];
      auto* by_host = layout_.contiguous ? static_cast<uint8_t*>(out) : staging(1, total);
      parts_.leaders->allgatherv(host_block, by_host, host_bytes);
      if (!layout_.contiguous) {
        std::vector<size_t> offset(size() + 1, 0);
        for (int r = 0; r < size(); ++r) offset[r + 1] = offset[r] + recv_bytes[r];
        size_t from = 0;
        for (const std::vector<int>& members : layout_.hosts) {
          for (int r : members) {
            if (recv_bytes[r] > 0) std::memcpy(static_cast<uint8_t*>(out) + offset[r], by_host + from, recv_bytes[r]);
            from += recv_bytes[r];
          }
        }
      }
    }
    if (parts_.local) parts_.local->broadcast(out, total, 0);
  });
}

// On the root's host the root gives its leader the data; the leaders pass
// it between hosts; the other hosts' leaders give it to their members.
void HierarchicalBackend::broadcast(void* buf, size_t bytes, int root) {
  if (root < 0 || root >= size())
    throw InvalidArgument(set_name_ + ": broadcast root " + std::to_string(root) + " is not a set rank");
  if (bytes == 0) return;
  run("broadcast", [&] {
    const int root_host = layout_.host_of[root];
    if (host_ == root_host && parts_.local) parts_.local->broadcast(buf, bytes, layout_.local_rank_of[root]);
    if (parts_.leaders) parts_.leaders->broadcast(buf, bytes, root_host);
    if (host_ != root_host && parts_.local) parts_.local->broadcast(buf, bytes, 0);
  });
}

// Most blocks of an alltoall cross hosts; staging them through the leaders
// would copy every byte twice more, so the whole set's network backend
// moves them directly.
void HierarchicalBackend::alltoallv(const void* in, const std::vector<size_t>& send_bytes, void* out,
                                    const std::vector<size_t>& recv_bytes) {
  expect_one_per_member("alltoallv", send_bytes);
  expect_one_per_member("alltoallv", recv_bytes);
  run("alltoallv", [&] { parts_.whole->alltoallv(in, send_bytes, out, recv_bytes); });
}

void HierarchicalBackend::barrier() {
  run("barrier", [&] {
    if (parts_.local) parts_.local->barrier();
    if (parts_.leaders) parts_.leaders->barrier();
    if (parts_.local) parts_.local->barrier();
  });
}

}  // namespace hora::hierarchical
