// The rendezvous client as the bindings give it to Python
// (hora.runner.rendezvous.RendezvousClient): it connects, and proves the job
// secret, before it is returned, and fails at once when its connection
// breaks instead of reconnecting. The runtime's stores come from
// make_tcp_store() (include/hora/store.h); both are the one client of
// tcp_store.cc.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "hora/errors.h"
#include "hora/store.h"

namespace hora {

// The rendezvous server refused the job secret (BAD_SECRET).
class SecretRefused : public InvalidArgument {
 public:
  using InvalidArgument::InvalidArgument;
};

// The rendezvous server refused a request as malformed or over its limits
// (BAD_REQUEST), then closed the connection.
class RequestRefused : public InvalidArgument {
 public:
  using InvalidArgument::InvalidArgument;
};

// The server failed the handshake: it could not prove that it holds the job
// secret, or its answer was malformed (it is not this job's server).
class ServerUnproven : public InvalidArgument {
 public:
  using InvalidArgument::InvalidArgument;
};

// A Store that can also ask the server whether it answers. Thread-safe, as
// every Store; each call blocks until the server answers.
class TcpStoreClient : public Store {
 public:
  // Sends PING and waits for its answer.
  virtual void ping() = 0;
};

// Connects to the rendezvous server at host:port, retrying until
// `connect_timeout` passes (hora::Timeout then), and passes the handshake
// (SecretRefused when the server refuses the secret, ServerUnproven when
// it cannot prove that it holds it). Later calls use that connection, or new
// ones for calls made at once from several threads; a connection that
// breaks fails its call with PeerFailure and is not reopened for it.
std::shared_ptr<TcpStoreClient> connect_tcp_store(const std::string& host, int port, const std::string& secret,
                                                  std::chrono::milliseconds connect_timeout);

}  // namespace hora
