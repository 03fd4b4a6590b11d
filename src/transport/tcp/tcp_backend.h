// hora's own TCP data plane for one process set: a connection to every
// other member (made and authenticated by make_tcp_backend_factory), and
// collectives that run on the calling thread over non-blocking sockets.
//
//   allreduce   up to kSmallBytes: recursive doubling (log2 n exchanges;
//               with n not a power of two, the first ranks fold pairwise
//               first); beyond: ring reduce-scatter then ring allgather.
//               Two members exchange whole buffers up to kPairExchangeBytes
//               (the same bytes as the ring's two halves, in one round).
//               Blocks are reduced as their bytes arrive; every pair
//               reduces in set-rank order, so every member ends with the
//               same bits.
//   broadcast   up to kSmallBytes (or between two members): binomial tree;
//               beyond: a chain from the root in which every member
//               forwards each byte as it arrives.
//   allgatherv  ring.
//   alltoallv   every pair at once.
//   barrier     dissemination (log2 n rounds of one byte).
//
// Sends and receives of one step progress together (full duplex), so a
// pair exchanging buffers moves both directions at once. Threading and
// failures are as Backend states; a failure breaks the backend for good
// (Links).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "transport/backend.h"
#include "transport/tcp/links.h"

namespace hora::tcp_transport {

class TcpBackend final : public Backend {
 public:
  // Up to this many bytes, allreduce uses recursive doubling and broadcast
  // a tree; beyond, the ring and the chain.
  static constexpr size_t kSmallBytes = 32 << 10;
  // Up to this many bytes, two members exchange whole buffers: the ring's
  // second round costs more than reducing the whole buffer on both.
  static constexpr size_t kPairExchangeBytes = 1 << 20;

  TcpBackend(std::vector<int> global_ranks, int rank, std::vector<net::Socket> sockets, Waiting waiting);

  int rank() const override { return links_.rank(); }
  int size() const override { return links_.size(); }

  void allreduce(void* buf, size_t count, DataType dtype, ReduceOp op) override;
  void allgatherv(const void* in, void* out, const std::vector<size_t>& recv_bytes) override;
  void broadcast(void* buf, size_t bytes, int root) override;
  void alltoallv(const void* in, const std::vector<size_t>& send_bytes, void* out,
                 const std::vector<size_t>& recv_bytes) override;
  void barrier() override;
  bool notices_sleep() const override { return true; }
  void abort(const std::string& reason) override { links_.abort(reason); }

 private:
  void recursive_doubling(uint8_t* buf, size_t count, DataType dtype, ReduceOp op);
  void ring_allreduce(uint8_t* buf, size_t count, DataType dtype, ReduceOp op);
  // Exchanges `bytes` of `buf` with `peer` through the staging buffer and
  // reduces: buf = op(lower set rank's, higher set rank's).
  void exchange_reduce(int peer, uint8_t* buf, size_t count, DataType dtype, ReduceOp op);
  void tree_broadcast(uint8_t* buf, size_t bytes, int root);
  void chain_broadcast(uint8_t* buf, size_t bytes, int root);
  void expect_one_per_member(const char* what, const std::vector<size_t>& sizes) const;
  uint8_t* staging(size_t bytes);

  const std::string set_name_;
  Links links_;
  std::vector<uint8_t> staging_;  // kept between collectives: first touch of fresh pages is slow
};

}  // namespace hora::tcp_transport
