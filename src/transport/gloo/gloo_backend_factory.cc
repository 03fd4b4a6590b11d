// make_gloo_backend_factory: one Gloo TCP device per process, one Gloo
// context per process set.
#include <gloo/barrier.h>
#include <gloo/rendezvous/context.h>
#include <gloo/transport/tcp/device.h>

#include <algorithm>
#include <csignal>
#include <mutex>

#include "hora/errors.h"
#include "transport/backend.h"
#include "transport/gloo/connection_names.h"
#include "transport/gloo/gloo_backend.h"
#include "transport/gloo/store_adapter.h"

namespace hora {
namespace {

using gloo_transport::GlooBackend;

// Gloo writes to its sockets without MSG_NOSIGNAL, so a peer that dies
// mid-collective would kill this process with SIGPIPE instead of failing
// the set. Ignore the signal unless the program installed its own handler
// (Python already ignores it).
void ignore_sigpipe_unless_handled() {
  static std::once_flag once;
  std::call_once(once, [] {
    struct sigaction current {};
    if (sigaction(SIGPIPE, nullptr, &current) == 0 && current.sa_handler == SIG_DFL) {
      std::signal(SIGPIPE, SIG_IGN);
    }
  });
}

// Makes Gloo backends that listen on `hostname`. create() may be called
// from several threads at once (one per process set being built).
class GlooBackendFactory final : public BackendFactory {
 public:
  explicit GlooBackendFactory(std::string hostname) : hostname_(std::move(hostname)) {
    ignore_sigpipe_unless_handled();
    try {
      device_ = ::gloo::transport::tcp::CreateDevice(::gloo::transport::tcp::attr(hostname_.c_str()));
    } catch (const std::exception& e) {
      throw InvalidArgument("gloo backend: cannot open a TCP device on '" + hostname_ +
                            "': " + e.what());
    }
  }

  std::string name() const override { return "gloo"; }

  using BackendFactory::create;
  std::unique_ptr<Backend> create(const std::vector<int>& global_ranks, int my_global_rank,
                                  std::shared_ptr<Store> set_store, std::chrono::milliseconds timeout,
                                  const std::atomic<bool>& cancelled) override {
    const int rank = set_rank_of(global_ranks, my_global_rank, "gloo backend");
    if (!set_store) throw InvalidArgument("gloo backend: the set store is null");
    const std::string set_name = describe_set(global_ranks);
    auto context = std::make_shared<::gloo::rendezvous::Context>(
        rank, static_cast<int>(global_ranks.size()));
    context->setTimeout(timeout);
    try {
      gloo_transport::GlooStoreAdapter store(make_prefix_store(gloo_transport::kGlooKeyPrefix, set_store),
                                             timeout, cancelled);
      context->connectFullMesh(store, device_);
      gloo_transport::publish_connection_addresses(*set_store, *context);
    } catch (...) {
      gloo_transport::rethrow_as_hora_error(set_name + ": connecting gloo");
    }
    // Nobody returns before every member has finished connecting: a member
    // that left right after its own connectFullMesh would otherwise break
    // the connection step of a slower one. After it, every member's
    // connection addresses are published.
    try {
      ::gloo::BarrierOptions barrier(context);
      barrier.setTimeout(timeout);
      ::gloo::barrier(barrier);
    } catch (...) {
      gloo_transport::rethrow_as_hora_error(set_name + ": connecting gloo");
    }
    const std::vector<std::string> remote =
        gloo_transport::remote_connection_addresses(*set_store, rank, static_cast<int>(global_ranks.size()));
    return std::make_unique<GlooBackend>(global_ranks, rank, std::move(set_store), std::move(context),
                                         timeout, remote);
  }

 private:
  const std::string hostname_;
  std::shared_ptr<::gloo::transport::Device> device_;
};

}  // namespace

std::unique_ptr<BackendFactory> make_gloo_backend_factory(const std::string& hostname) {
  return std::make_unique<GlooBackendFactory>(hostname);
}

}  // namespace hora
