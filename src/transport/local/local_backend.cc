// The local backend: the members of a process set are threads of one
// process and exchange data by reading each other's buffers. It exists so
// the coordinator can be tested without sockets; see local_rendezvous.h.
#include <algorithm>
#include <cstring>

#include "core/reduce.h"
#include "hora/errors.h"
#include "store/in_process_join.h"
#include "transport/backend.h"
#include "transport/local/local_rendezvous.h"

namespace hora {
namespace {

using Clock = std::chrono::steady_clock;
using local::LocalRendezvous;
using local::Post;

// Finds the rendezvous of this creation round of the set, or makes it when
// this member is the round's first. Members of one round share a ticket
// block from a counter in the set's store.
std::shared_ptr<LocalRendezvous> join(Store& store, const std::vector<int>& global_ranks,
                                      std::chrono::milliseconds timeout, const std::atomic<bool>& cancelled) {
  auto rendezvous = std::static_pointer_cast<LocalRendezvous>(join_in_process(
      store, "local", static_cast<int64_t>(global_ranks.size()),
      [&] { return std::make_shared<LocalRendezvous>(global_ranks); }, timeout, cancelled, "local backend"));
  if (rendezvous->global_ranks() != global_ranks) {
    throw InvalidArgument("local backend: members disagree on the process set's ranks");
  }
  return rendezvous;
}

void copy_bytes(void* to, const void* from, size_t bytes) {
  if (bytes > 0) std::memmove(to, from, bytes);
}

// One member's data plane. Called by one thread at a time (abort() by any).
class LocalBackend final : public Backend {
 public:
  LocalBackend(std::shared_ptr<LocalRendezvous> rendezvous, int rank,
               std::chrono::milliseconds timeout)
      : rendezvous_(std::move(rendezvous)), rank_(rank), timeout_(timeout) {}

  ~LocalBackend() override { rendezvous_->detach(rank_); }

  int rank() const override { return rank_; }
  int size() const override { return rendezvous_->size(); }

  void allreduce(void* buf, size_t count, DataType dtype, ReduceOp op) override {
    const size_t bytes = count * dtype_size(dtype);
    // Every member reduces all inputs in set-rank order, so all members end
    // with bit-identical results.
    exchange(Post{buf, bytes, nullptr}, [&](const std::vector<Post>& posts) {
      expect_bytes("allreduce", posts[0].bytes, bytes, 0);
      scratch_.resize(bytes);
      copy_bytes(scratch_.data(), posts[0].in, bytes);
      for (int r = 1; r < size(); ++r) {
        expect_bytes("allreduce", posts[r].bytes, bytes, r);
        reduce_into(scratch_.data(), posts[r].in, count, dtype, op);
      }
    });
    copy_bytes(buf, scratch_.data(), bytes);
  }

  void allgatherv(const void* in, void* out, const std::vector<size_t>& recv_bytes) override {
    expect_one_per_member("allgatherv", recv_bytes);
    exchange(Post{in, recv_bytes[rank_], nullptr}, [&](const std::vector<Post>& posts) {
      auto* dst = static_cast<uint8_t*>(out);
      for (int r = 0; r < size(); ++r) {
        expect_bytes("allgatherv", posts[r].bytes, recv_bytes[r], r);
        copy_bytes(dst, posts[r].in, recv_bytes[r]);
        dst += recv_bytes[r];
      }
    });
  }

  void broadcast(void* buf, size_t bytes, int root) override {
    if (root < 0 || root >= size()) {
      throw InvalidArgument("local backend: broadcast root " + std::to_string(root) +
                            " is not a set rank");
    }
    exchange(Post{buf, bytes, nullptr}, [&](const std::vector<Post>& posts) {
      expect_bytes("broadcast", posts[root].bytes, bytes, root);
      if (rank_ != root) copy_bytes(buf, posts[root].in, bytes);
    });
  }

  void alltoallv(const void* in, const std::vector<size_t>& send_bytes, void* out,
                 const std::vector<size_t>& recv_bytes) override {
    expect_one_per_member("alltoallv", send_bytes);
    expect_one_per_member("alltoallv", recv_bytes);
    exchange(Post{in, 0, &send_bytes}, [&](const std::vector<Post>& posts) {
      auto* dst = static_cast<uint8_t*>(out);
      for (int r = 0; r < size(); ++r) {
        const auto& split = *posts[r].split;
        size_t offset = 0;
        for (int i = 0; i < rank_; ++i) offset += split[i];
        expect_bytes("alltoallv", split[rank_], recv_bytes[r], r);
        copy_bytes(dst, static_cast<const uint8_t*>(posts[r].in) + offset, recv_bytes[r]);
        dst += recv_bytes[r];
      }
    });
  }

  void barrier() override { rendezvous_->arrive(rank_, Clock::now() + timeout_); }

  void abort(const std::string& reason) override { rendezvous_->abort(reason); }

 private:
  // Publishes this member's post, runs `read` over every member's posts,
  // then waits until all members have read; `read`'s error is rethrown only
  // after that, so peers never wait for a member that already failed.
  template <typename Read>
  void exchange(Post mine, Read&& read) {
    const auto deadline = Clock::now() + timeout_;
    const std::vector<Post> posts = rendezvous_->publish(rank_, mine, deadline);
    std::exception_ptr error;
    try {
      read(posts);
    } catch (...) {
      error = std::current_exception();
    }
    rendezvous_->release(rank_, deadline);
    if (error) std::rethrow_exception(error);
  }

  void expect_one_per_member(const char* op, const std::vector<size_t>& sizes) const {
    if (sizes.size() != static_cast<size_t>(size())) {
      throw InvalidArgument(std::string("local backend: ") + op + " needs one size per member, got " +
                            std::to_string(sizes.size()) + " for " + std::to_string(size()));
    }
  }

  void expect_bytes(const char* op, size_t theirs, size_t mine, int peer) const {
    if (theirs != mine) {
      throw Internal(std::string("local backend: ") + op + ": global rank " +
                     std::to_string(rendezvous_->global_ranks()[peer]) + " has " +
                     std::to_string(theirs) + " bytes where " + std::to_string(mine) +
                     " were expected");
    }
  }

  const std::shared_ptr<LocalRendezvous> rendezvous_;
  const int rank_;
  const std::chrono::milliseconds timeout_;
  std::vector<uint8_t> scratch_;  // allreduce result, reused across calls
};

class LocalBackendFactory final : public BackendFactory {
 public:
  std::string name() const override { return "local"; }

  using BackendFactory::create;
  std::unique_ptr<Backend> create(const std::vector<int>& global_ranks, int my_global_rank,
                                  std::shared_ptr<Store> set_store, std::chrono::milliseconds timeout,
                                  const std::atomic<bool>& cancelled) override {
    const int rank = set_rank_of(global_ranks, my_global_rank, "backend");
    if (!set_store) throw InvalidArgument("local backend: the set store is null");
    const auto deadline = Clock::now() + timeout;
    auto rendezvous = join(*set_store, global_ranks, timeout, cancelled);
    rendezvous->attach(rank, deadline, cancelled);
    return std::make_unique<LocalBackend>(std::move(rendezvous), rank, timeout);
  }
};

}  // namespace

std::unique_ptr<BackendFactory> make_local_backend_factory() {
  return std::make_unique<LocalBackendFactory>();
}

}  // namespace hora
