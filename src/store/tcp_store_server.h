// The rendezvous server: horarun serves each job's store with it (through
// hora._core.StoreServer), and under mpirun or srun rank 0 runs one for the
// job (docs/rendezvous.md).
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace hora {

// Serves one job's key-value store over TCP on `host`, at a port the kernel
// picks, until destroyed. It speaks the protocol of the launcher's server
// (python/hora/runner/rendezvous.py has its Python client), so
// make_tcp_store() is its client.
//
// One thread accepts; each connection is served by a thread of its own, so
// a GET or WAIT blocks only its own connection. The constructor returns once
// the port is bound. The destructor wakes blocked requests, closes every
// connection and joins the threads; it never throws.
class TcpStoreServer {
 public:
  // `secret` must be 1..256 bytes; clients must present it. `port` 0: one
  // the kernel picks.
  TcpStoreServer(const std::string& host, std::string secret, int port = 0);
  ~TcpStoreServer();
  TcpStoreServer(const TcpStoreServer&) = delete;
  TcpStoreServer& operator=(const TcpStoreServer&) = delete;

  int port() const;

  // For the process that runs the server (the launcher): sets `key` as a
  // client's SET would, waking its waiters; and every key that starts
  // with `prefix`, with its value, in key order.
  void set(const std::string& key, std::vector<uint8_t> value);
  std::vector<std::pair<std::string, std::vector<uint8_t>>> items_with_prefix(const std::string& prefix) const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace hora
