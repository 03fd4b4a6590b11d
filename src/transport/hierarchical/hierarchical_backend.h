// The data plane of one process set whose members run on several hosts,
// some of them sharing one: a composition of two backends, one inside each
// host and one between hosts, never a copy of their collectives. It names
// no transport: planner/ makes the parts and composes them.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "transport/backend.h"

namespace hora::hierarchical {

// Where the members of one process set run. Hosts are numbered in the
// order of their lowest set rank; a host's leader is that lowest member,
// and its rank among the leaders is the host's number.
struct HostLayout {
  std::vector<std::vector<int>> hosts;  // the set ranks on each host, ascending
  std::vector<int> host_of;             // by set rank
  std::vector<int> local_rank_of;       // by set rank: its place among its host's members
  bool contiguous = false;              // every host's members are consecutive set ranks

  bool is_leader(int rank) const { return local_rank_of.at(rank) == 0; }
};

// Groups set ranks by the host identity each published (`identities[r]`
// for set rank r; equal strings mean one host).
HostLayout plan_hosts(const std::vector<std::string>& identities);

// Whether composing pays: two hosts or more, and one of them with two
// members or more. Otherwise the set stays on one backend.
bool worth_composing(const HostLayout& layout);

// The backends a HierarchicalBackend is composed of.
struct Parts {
  std::unique_ptr<Backend> whole;    // every member, set ranks: alltoallv
  std::unique_ptr<Backend> local;    // this host's members, local ranks; null when alone on its host
  std::unique_ptr<Backend> leaders;  // one member per host, host numbers; null unless a leader
};

// One process set's communicator across hosts.
//
// Inside a host the members use `local` (shared memory), between hosts
// only the leaders talk, over `leaders` (Gloo or MPI):
// - allreduce: local reduce to the leader (only the leader needs the
//   host's sum), leaders' allreduce, local broadcast from the leader
//   (every member ends with the leader's bits); above
//   kPipelineBytes in chunks, pipelined: while the leaders reduce chunk k
//   between hosts (on a thread of the leader's, the courier), the host
//   reduces chunk k + 1 and then broadcasts chunk k - 1;
// - allgatherv: local allgatherv of the host's inputs, leaders' allgatherv
//   of the hosts' blocks, put in set-rank order, local broadcast;
// - broadcast: on the root's host a local broadcast from the root, then
//   the leaders' broadcast from the root's host, then a local broadcast on
//   the other hosts;
// - barrier: local, leaders, local again (nobody leaves before every host
//   has arrived);
// - alltoallv goes over `whole`: most of its blocks cross hosts anyway.
// The set's control plane is planner/'s TCP star over every member.
//
// Threading is as Backend states. A part that fails (a dead peer, a
// timeout) breaks the whole set: every part is aborted, so members blocked
// in another part fail now instead of at their timeout, and later
// collectives fail at once. abort() aborts every part.
class HierarchicalBackend final : public Backend {
 public:
  // Allreduces above this many bytes are pipelined, in chunks of at least
  // kPipelineChunkBytes and at most kMaxPipelineChunks of them.
  static constexpr size_t kPipelineBytes = 2 << 20;
  static constexpr size_t kPipelineChunkBytes = 1 << 20;
  static constexpr size_t kMaxPipelineChunks = 16;

  HierarchicalBackend(std::vector<int> global_ranks, int rank, HostLayout layout, Parts parts);
  ~HierarchicalBackend() override;

  int rank() const override { return rank_; }
  int size() const override { return static_cast<int>(global_ranks_.size()); }

  void allreduce(void* buf, size_t count, DataType dtype, ReduceOp op) override;
  void allgatherv(const void* in, void* out, const std::vector<size_t>& recv_bytes) override;
  void broadcast(void* buf, size_t bytes, int root) override;
  void alltoallv(const void* in, const std::vector<size_t>& send_bytes, void* out,
                 const std::vector<size_t>& recv_bytes) override;
  void barrier() override;

  void abort(const std::string& reason) override;

  const HostLayout& layout() const { return layout_; }
  // The backend inside this member's host (null when alone on it).
  const Backend* local_part() const { return parts_.local.get(); }

 private:
  // Runs one composed collective; a failure in any part breaks the set.
  template <typename Collective>
  void run(const char* name, Collective&& collective);
  void abort_parts(const std::string& reason) noexcept;
  void expect_one_per_member(const char* name, const std::vector<size_t>& sizes) const;
  // A reused staging buffer of at least `bytes` (fresh pages are slow).
  uint8_t* staging(int which, size_t bytes);
  void pipelined_allreduce(uint8_t* buf, size_t count, DataType dtype, ReduceOp op);

  class Courier;
  std::unique_ptr<Courier> courier_;  // a leader's, made at its first pipelined allreduce

  const std::vector<int> global_ranks_;
  const int rank_;
  const std::string set_name_;
  const HostLayout layout_;
  const int host_;  // this member's host number
  Parts parts_;

  // Engine thread only.
  std::string broken_;
  std::vector<uint8_t> staging_[2];

  std::mutex abort_mutex_;
  std::atomic<bool> aborted_{false};
  std::string abort_reason_;  // guarded by abort_mutex_
};

// Makes one member's part: a backend over `global_ranks` (a subset of the
// set, sorted) for `my_global_rank`, keyed under `store`.
using PartFactory = std::function<std::unique_ptr<Backend>(const std::vector<int>& global_ranks, int my_global_rank,
                                                           std::shared_ptr<Store> store)>;

// Makes this member's parts, each under its own prefix of `set_store`
// ("hierarchical/host.<h>", "hierarchical/leaders", "hierarchical/whole"),
// in the same order on every member (local, leaders, whole), and composes
// them. `make_local` makes the part inside a host, `make_network` the
// others.
std::unique_ptr<Backend> make_hierarchical_backend(const std::vector<int>& global_ranks, int rank, HostLayout layout,
                                                   const std::shared_ptr<Store>& set_store,
                                                   const PartFactory& make_local, const PartFactory& make_network);

// Whether `backend` is a HierarchicalBackend (tests).
bool is_hierarchical_backend(const Backend& backend);

}  // namespace hora::hierarchical
