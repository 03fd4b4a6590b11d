// The rendezvous server: horarun serves each job's store with it (through
// hora._core.StoreServer), and under mpirun or srun rank 0 runs one for the
// job (docs/rendezvous.md).
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace hora {

// What the server allows a connection (docs/rendezvous.md, "Limits").
struct StoreServerLimits {
  // From accept until the client has proved that it holds the job secret.
  std::chrono::milliseconds handshake_timeout{10000};
  // Silence allowed once a frame has started to arrive.
  std::chrono::milliseconds frame_timeout{10000};
  // Connections open at once; more are closed as they arrive, with a
  // warning on stderr.
  size_t max_connections = 4096;
};

// Serves one job's key-value store over TCP on `host`, at a port the kernel
// picks, until destroyed. It speaks the protocol of make_tcp_store() and
// of the Python client (python/hora/runner/rendezvous.py).
//
// One thread serves every connection from an epoll loop: a connection costs
// no thread, a GET or WAIT waits without blocking anyone, and a client must
// prove the job secret (a challenge and its HMAC) before the server reads
// more than that proof from it. The constructor returns once the port is
// bound. The destructor closes every connection, which ends blocked
// requests, and joins the thread; it never throws.
class TcpStoreServer {
 public:
  // `secret` must be 1..256 bytes. `port` 0: one the kernel picks.
  TcpStoreServer(const std::string& host, std::string secret, int port = 0, StoreServerLimits limits = {});
  ~TcpStoreServer();
  TcpStoreServer(const TcpStoreServer&) = delete;
  TcpStoreServer& operator=(const TcpStoreServer&) = delete;

  int port() const;

  // For the process that runs the server (the launcher): sets `key` as a
  // client's SET would, waking its waiters; and every key that starts
  // with `prefix`, with its value, in key order. Any thread.
  void set(const std::string& key, std::vector<uint8_t> value);
  std::vector<std::pair<std::string, std::vector<uint8_t>>> items_with_prefix(const std::string& prefix) const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace hora
