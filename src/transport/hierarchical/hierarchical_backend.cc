#include "transport/hierarchical/hierarchical_backend.h"

#include <cstring>
#include <numeric>

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

// Local allreduce, the leaders' allreduce, then the leader's result to its
// host: every member ends with the same bits.
void HierarchicalBackend::allreduce(void* buf, size_t count, DataType dtype, ReduceOp op) {
  if (count == 0) return;
  run("allreduce", [&] {
    if (parts_.local) parts_.local->allreduce(buf, count, dtype, op);
    if (parts_.leaders) parts_.leaders->allreduce(buf, count, dtype, op);
    if (parts_.local) parts_.local->broadcast(buf, count * dtype_size(dtype), 0);
  });
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
