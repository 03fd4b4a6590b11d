// A rendezvous server inside this process, for jobs started without horarun:
// under mpirun or srun, rank 0 serves the job's store (docs/rendezvous.md).
#pragma once

#include <memory>
#include <string>

namespace hora {

// Serves one job's key-value store over TCP on `host`, at a port the kernel
// picks, until destroyed. It speaks the protocol of the launcher's server
// (python/hora/runner/rendezvous.py), so make_tcp_store() is its client.
//
// One thread accepts; each connection is served by a thread of its own, so
// a GET or WAIT blocks only its own connection. The constructor returns once
// the port is bound. The destructor wakes blocked requests, closes every
// connection and joins the threads; it never throws.
class TcpStoreServer {
 public:
  // `secret` must be 1..256 bytes; clients must present it.
  TcpStoreServer(const std::string& host, std::string secret);
  ~TcpStoreServer();
  TcpStoreServer(const TcpStoreServer&) = delete;
  TcpStoreServer& operator=(const TcpStoreServer&) = delete;

  int port() const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace hora
