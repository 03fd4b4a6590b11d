// make_tcp_backend_factory: every member of a set listens on a port of its
// own for the set, publishes the address with a fresh hello key in the
// set's store, connects to every member of a lower set rank and admits
// every member of a higher one (net/admission.h): one authenticated
// connection per pair.
#include <optional>

#include "hora/errors.h"
#include "net/admission.h"
#include "net/codec.h"
#include "store/cancellable_wait.h"
#include "transport/backend.h"
#include "transport/tcp/tcp_backend.h"

namespace hora {
namespace {

std::string address_key(int set_rank) { return "tcp/address/" + std::to_string(set_rank); }

class TcpBackendFactory final : public BackendFactory {
 public:
  explicit TcpBackendFactory(TcpOptions options) : options_(std::move(options)) {}

  std::string name() const override { return "tcp"; }

  using BackendFactory::create;
  std::unique_ptr<Backend> create(const std::vector<int>& global_ranks, int my_global_rank,
                                  std::shared_ptr<Store> set_store, std::chrono::milliseconds timeout,
                                  const std::atomic<bool>& cancelled) override {
    const int rank = set_rank_of(global_ranks, my_global_rank, "tcp backend");
    if (!set_store) throw InvalidArgument("tcp backend: the set store is null");
    const int size = static_cast<int>(global_ranks.size());
    const std::string set_name = describe_set(global_ranks);
    const std::string plane = set_name + ": tcp data plane";
    const std::string context = set_name + " tcp data";
    const auto deadline = net::Clock::now() + timeout;
    std::vector<net::Socket> sockets(global_ranks.size());

    std::optional<net::Listener> listener;
    net::AddressRecord record;
    if (rank + 1 < size) {
      try {
        listener.emplace(options_.hostname);
      } catch (const InvalidArgument& e) {
        throw InvalidArgument(plane + ": " + e.what());
      }
      record = net::fresh_address_record(listener->address());
      set_store->set(address_key(rank), net::encode_address_record(record));
    }
    // Lower ranks first: each admits the higher ones once it has joined
    // every lower one, so the joins complete in rank order.
    for (int peer = 0; peer < rank; ++peer) {
      const std::string name = "global rank " + std::to_string(global_ranks[static_cast<size_t>(peer)]);
      std::vector<uint8_t> value;
      try {
        value = get_unless_cancelled(*set_store, address_key(peer), timeout, cancelled, kCancelPoll, plane);
      } catch (const Timeout& e) {
        throw Timeout(plane + ": " + name + " did not publish its data address: " + e.what());
      }
      net::AddressRecord theirs;
      try {
        theirs = net::decode_address_record(value);
      } catch (const net::DecodeError& e) {
        throw Internal(plane + ": " + e.what());
      }
      sockets[static_cast<size_t>(peer)] = net::join(theirs, context, rank, name, deadline, cancelled, kCancelPoll, plane);
    }
    if (listener) {
      net::AdmissionRules rules;
      rules.key = record.key;
      rules.context = context;
      rules.global_ranks = global_ranks;
      rules.lowest = rank + 1;
      rules.set_name = set_name;
      rules.plane = "tcp data plane";
      rules.cancel_poll = kCancelPoll;
      net::Admission(std::move(rules))
          .admit_all(*listener, deadline, timeout, cancelled,
                     [&](int peer, net::Socket socket) { sockets[static_cast<size_t>(peer)] = std::move(socket); });
    }
    for (auto& socket : sockets) {
      if (socket.valid()) net::watch_liveness(socket.fd(), options_.link_timeout);
    }
    tcp_transport::Waiting waiting;
    waiting.spin = options_.spin;
    waiting.timeout = timeout;
    return std::make_unique<tcp_transport::TcpBackend>(global_ranks, rank, std::move(sockets), waiting);
  }

 private:
  const TcpOptions options_;
};

}  // namespace

std::unique_ptr<BackendFactory> make_tcp_backend_factory(TcpOptions options) {
  return std::make_unique<TcpBackendFactory>(std::move(options));
}

}  // namespace hora
