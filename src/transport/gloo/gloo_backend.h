// The communicator of one process set over Gloo's TCP transport.
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "transport/backend.h"

namespace gloo {
class Context;
}

namespace hora::gloo_transport {

// Call inside a catch block: rethrows the exception in flight as a hora
// error prefixed with `where`. Gloo timeouts become Timeout, every other Gloo
// or system error PeerFailure; hora errors keep their kind.
[[noreturn]] void rethrow_as_hora_error(const std::string& where);

// One process set's data plane: collectives on a Gloo context of its own
// (so sets never share Gloo connections or slots). Threading is as Backend states. A data-plane failure
// breaks the backend: Gloo closes the context's connections on a timeout,
// so every later collective fails fast with PeerFailure. abort() does the
// same from any thread, the way Gloo's own timeout does: it fails every
// pending operation of the context and closes its connections.
class GlooBackend final : public Backend {
 public:
  // `set_store` serves only to name failed peers (see connection_names.h);
  // `remote_addresses` (by set rank, from remote_connection_addresses) lets
  // abort() find the connections' sockets.
  GlooBackend(std::vector<int> global_ranks, int rank, std::shared_ptr<Store> set_store,
              std::shared_ptr<::gloo::Context> context, std::chrono::milliseconds timeout,
              const std::vector<std::string>& remote_addresses);
  ~GlooBackend() override;

  int rank() const override { return rank_; }
  int size() const override { return static_cast<int>(global_ranks_.size()); }

  void allreduce(void* buf, size_t count, DataType dtype, ReduceOp op) override;
  void allgatherv(const void* in, void* out, const std::vector<size_t>& recv_bytes) override;
  void broadcast(void* buf, size_t bytes, int root) override;
  void alltoallv(const void* in, const std::vector<size_t>& send_bytes, void* out,
                 const std::vector<size_t>& recv_bytes) override;
  void barrier() override;

  void abort(const std::string& reason) override;

 private:
  // Runs one Gloo collective, translating its errors and breaking the
  // backend when it fails.
  template <typename Collective>
  void run(const char* name, Collective&& collective);
  void expect_one_per_member(const char* name, const std::vector<size_t>& sizes) const;
  // `message` plus the global ranks of the connections it names, if any.
  std::string with_failed_ranks(const std::string& message) const;

  const std::vector<int> global_ranks_;
  const int rank_;
  const std::string set_name_;
  const std::shared_ptr<Store> set_store_;
  std::shared_ptr<::gloo::Context> context_;
  const std::chrono::milliseconds timeout_;
  std::string broken_;  // the first data-plane failure (engine thread only)
  // Local and remote address of each Gloo connection, for abort().
  std::vector<std::pair<std::string, std::string>> connections_;
  std::mutex abort_mutex_;
  std::atomic<bool> aborted_{false};
  std::string abort_reason_;  // guarded by abort_mutex_
};

}  // namespace hora::gloo_transport
