#include "transport/tcp/tcp_backend.h"

#include <algorithm>
#include <cstring>
#include <numeric>

#include "core/reduce.h"
#include "hora/errors.h"

namespace hora::tcp_transport {
namespace {

// A received block is reduced in pieces of at least this many bytes as
// they arrive (the last piece may be smaller).
constexpr size_t kReducePiece = 64 << 10;

// Reduces what has arrived of one block into the member's own.
struct ArrivingBlock {
  uint8_t* own;
  const uint8_t* incoming;
  size_t element_bytes;
  size_t bytes;
  DataType dtype;
  ReduceOp op;
  size_t reduced = 0;  // bytes
  // The incoming block is the lower set rank's: it goes first (the result
  // is written into `own` all the same), so both members get the same bits.
  bool lower_first = false;
  // Where `own` is being sent in the same round (an exchange): how much of
  // it has left. A piece is reduced only once it has: the peer's bytes can
  // arrive before this member's own have gone (a peer that started the
  // round first, a send buffer full), and the peer must get the member's
  // input, not the sum. finish() reduces what is left after the round.
  const size_t* sent = nullptr;

  static void arrived(void* context, size_t done) {
    auto& block = *static_cast<ArrivingBlock*>(context);
    block.reduce_up_to(done);
  }
  void finish() { reduce_up_to(bytes); }

 private:
  void reduce_up_to(size_t done) {
    if (sent) done = std::min(done, *sent);
    const size_t whole = done - done % element_bytes;
    if (whole <= reduced || (whole - reduced < kReducePiece && whole != bytes)) return;
    const size_t piece = whole - reduced, count = piece / element_bytes;
    if (lower_first) reduce_into_after(own + reduced, incoming + reduced, count, dtype, op);
    else reduce_into(own + reduced, incoming + reduced, count, dtype, op);
    reduced = whole;
  }
};

// Block i of `count` elements split into `parts`: its first element and
// its length.
std::pair<size_t, size_t> block_of(size_t count, size_t parts, size_t i) {
  const size_t base = count / parts, rem = count % parts;
  return {i * base + std::min(i, rem), base + (i < rem ? 1 : 0)};
}

int wrap(int value, int size) { return ((value % size) + size) % size; }

}  // namespace

TcpBackend::TcpBackend(std::vector<int> global_ranks, int rank, std::vector<net::Socket> sockets, Waiting waiting)
    : set_name_(describe_set(global_ranks)), links_(std::move(global_ranks), rank, std::move(sockets), waiting) {}

uint8_t* TcpBackend::staging(size_t bytes) {
  if (staging_.size() < bytes) staging_.resize(bytes);
  return staging_.data();
}

void TcpBackend::allreduce(void* buf, size_t count, DataType dtype, ReduceOp op) {
  if (size() == 1 || count == 0) return;
  auto* bytes = static_cast<uint8_t*>(buf);
  const size_t total = count * dtype_size(dtype);
  if (size() == 2 && total <= kPairExchangeBytes) {
    exchange_reduce(1 - rank(), bytes, count, dtype, op);
  } else if (total <= kSmallBytes || count < static_cast<size_t>(size())) {
    recursive_doubling(bytes, count, dtype, op);
  } else {
    ring_allreduce(bytes, count, dtype, op);
  }
}

void TcpBackend::exchange_reduce(int peer, uint8_t* buf, size_t count, DataType dtype, ReduceOp op) {
  const size_t element = dtype_size(dtype), bytes = count * element;
  uint8_t* theirs = staging(bytes);
  // Reduced as the peer's bytes arrive (once this member's own have left),
  // in set-rank order: the higher rank puts the peer's piece first.
  ArrivingBlock block{buf, theirs, element, bytes, dtype, op};
  block.lower_first = peer < rank();
  Move moves[] = {Move::to(peer, buf, bytes), Move::from(peer, theirs, bytes)};
  block.sent = &moves[0].done;
  moves[1].arrived = &ArrivingBlock::arrived;
  moves[1].context = &block;
  links_.run(moves, "allreduce");
  block.finish();
}

void TcpBackend::recursive_doubling(uint8_t* buf, size_t count, DataType dtype, ReduceOp op) {
  const int n = size(), r = rank();
  const size_t bytes = count * dtype_size(dtype);
  int pow2 = 1;
  while (pow2 * 2 <= n) pow2 *= 2;
  const int extra = n - pow2;
  // The first 2 * extra ranks fold in pairs: the even one hands its buffer
  // to the odd one, which takes part for both and hands the result back.
  if (r < 2 * extra && r % 2 == 0) {
    Move send[] = {Move::to(r + 1, buf, bytes)};
    links_.run(send, "allreduce");
    Move result[] = {Move::from(r + 1, buf, bytes)};
    links_.run(result, "allreduce");
    return;
  }
  if (r < 2 * extra) {
    uint8_t* theirs = staging(bytes);
    Move receive[] = {Move::from(r - 1, theirs, bytes)};
    links_.run(receive, "allreduce");
    reduce_into_after(buf, theirs, count, dtype, op);  // the lower rank's first
  }
  const int virtual_rank = r < 2 * extra ? r / 2 : r - extra;
  auto real = [&](int v) { return v < extra ? 2 * v + 1 : v + extra; };
  for (int mask = 1; mask < pow2; mask *= 2) exchange_reduce(real(virtual_rank ^ mask), buf, count, dtype, op);
  if (r < 2 * extra) {
    Move result[] = {Move::to(r - 1, buf, bytes)};
    links_.run(result, "allreduce");
  }
}

void TcpBackend::ring_allreduce(uint8_t* buf, size_t count, DataType dtype, ReduceOp op) {
  const int n = size(), r = rank();
  const size_t element = dtype_size(dtype);
  const int right = wrap(r + 1, n), left = wrap(r - 1, n);
  uint8_t* incoming = staging(block_of(count, static_cast<size_t>(n), 0).second * element);
  // Reduce-scatter: after step s, block r - s - 1 holds s + 2 members' sum;
  // at the end this member holds block r + 1 whole.
  for (int step = 0; step + 1 < n; ++step) {
    const auto [send_first, send_count] = block_of(count, static_cast<size_t>(n), static_cast<size_t>(wrap(r - step, n)));
    const auto [recv_first, recv_count] =
        block_of(count, static_cast<size_t>(n), static_cast<size_t>(wrap(r - step - 1, n)));
    ArrivingBlock block{buf + recv_first * element, incoming, element, recv_count * element, dtype, op};
    Move moves[] = {Move::to(right, buf + send_first * element, send_count * element),
                    Move::from(left, incoming, recv_count * element)};
    moves[1].arrived = &ArrivingBlock::arrived;
    moves[1].context = &block;
    links_.run(moves, "allreduce");
  }
  // Allgather of the whole blocks, each received straight into place.
  for (int step = 0; step + 1 < n; ++step) {
    const auto [send_first, send_count] =
        block_of(count, static_cast<size_t>(n), static_cast<size_t>(wrap(r + 1 - step, n)));
    const auto [recv_first, recv_count] = block_of(count, static_cast<size_t>(n), static_cast<size_t>(wrap(r - step, n)));
    Move moves[] = {Move::to(right, buf + send_first * element, send_count * element),
                    Move::from(left, buf + recv_first * element, recv_count * element)};
    links_.run(moves, "allreduce");
  }
}

void TcpBackend::broadcast(void* buf, size_t bytes, int root) {
  if (root < 0 || root >= size()) {
    throw InvalidArgument(set_name_ + ": broadcast root " + std::to_string(root) + " is not a set rank");
  }
  if (size() == 1 || bytes == 0) return;
  if (bytes <= kSmallBytes || size() == 2) {
    tree_broadcast(static_cast<uint8_t*>(buf), bytes, root);
  } else {
    chain_broadcast(static_cast<uint8_t*>(buf), bytes, root);
  }
}

void TcpBackend::tree_broadcast(uint8_t* buf, size_t bytes, int root) {
  const int n = size(), v = wrap(rank() - root, n);
  int mask = 1;
  for (; mask < n; mask *= 2) {
    if (v & mask) {
      Move receive[] = {Move::from(wrap(v - mask + root, n), buf, bytes)};
      links_.run(receive, "broadcast");
      break;
    }
  }
  Move sends[32];
  size_t children = 0;
  for (mask /= 2; mask > 0; mask /= 2) {
    if (v + mask < n) sends[children++] = Move::to(wrap(v + mask + root, n), buf, bytes);
  }
  if (children > 0) links_.run(std::span(sends, children), "broadcast");
}

void TcpBackend::chain_broadcast(uint8_t* buf, size_t bytes, int root) {
  const int n = size(), v = wrap(rank() - root, n);
  const int previous = wrap(rank() - 1, n), next = wrap(rank() + 1, n);
  if (v == 0) {
    Move send[] = {Move::to(next, buf, bytes)};
    return links_.run(send, "broadcast");
  }
  if (v == n - 1) {
    Move receive[] = {Move::from(previous, buf, bytes)};
    return links_.run(receive, "broadcast");
  }
  Move relay[] = {Move::from(previous, buf, bytes), Move::to(next, buf, bytes)};
  relay[1].limit = &relay[0].done;
  links_.run(relay, "broadcast");
}

void TcpBackend::expect_one_per_member(const char* what, const std::vector<size_t>& sizes) const {
  if (sizes.size() != static_cast<size_t>(size())) {
    throw InvalidArgument(set_name_ + ": " + what + " needs one size per member, got " + std::to_string(sizes.size()));
  }
}

void TcpBackend::allgatherv(const void* in, void* out, const std::vector<size_t>& recv_bytes) {
  expect_one_per_member("allgatherv", recv_bytes);
  const int n = size(), r = rank();
  std::vector<size_t> offsets(static_cast<size_t>(n) + 1, 0);
  std::partial_sum(recv_bytes.begin(), recv_bytes.end(), offsets.begin() + 1);
  auto* base = static_cast<uint8_t*>(out);
  if (recv_bytes[static_cast<size_t>(r)] > 0) std::memmove(base + offsets[static_cast<size_t>(r)], in, recv_bytes[static_cast<size_t>(r)]);
  if (n == 1 || offsets.back() == 0) return;
  const int right = wrap(r + 1, n), left = wrap(r - 1, n);
  for (int step = 0; step + 1 < n; ++step) {
    const auto send_block = static_cast<size_t>(wrap(r - step, n));
    const auto recv_block = static_cast<size_t>(wrap(r - step - 1, n));
    Move moves[] = {Move::to(right, base + offsets[send_block], recv_bytes[send_block]),
                    Move::from(left, base + offsets[recv_block], recv_bytes[recv_block])};
    links_.run(moves, "allgatherv");
  }
}

void TcpBackend::alltoallv(const void* in, const std::vector<size_t>& send_bytes, void* out,
                           const std::vector<size_t>& recv_bytes) {
  expect_one_per_member("alltoallv", send_bytes);
  expect_one_per_member("alltoallv", recv_bytes);
  const int n = size(), r = rank();
  const auto me = static_cast<size_t>(r);
  if (send_bytes[me] != recv_bytes[me]) {
    throw InvalidArgument(set_name_ + ": alltoallv sends " + std::to_string(send_bytes[me]) +
                          " bytes to itself but expects " + std::to_string(recv_bytes[me]));
  }
  std::vector<size_t> send_at(static_cast<size_t>(n) + 1, 0), recv_at(static_cast<size_t>(n) + 1, 0);
  std::partial_sum(send_bytes.begin(), send_bytes.end(), send_at.begin() + 1);
  std::partial_sum(recv_bytes.begin(), recv_bytes.end(), recv_at.begin() + 1);
  const auto* from = static_cast<const uint8_t*>(in);
  auto* to = static_cast<uint8_t*>(out);
  if (send_bytes[me] > 0) std::memmove(to + recv_at[me], from + send_at[me], send_bytes[me]);
  std::vector<Move> moves;
  for (int peer = 0; peer < n; ++peer) {
    const auto p = static_cast<size_t>(peer);
    if (peer == r) continue;
    if (send_bytes[p] > 0) moves.push_back(Move::to(peer, from + send_at[p], send_bytes[p]));
    if (recv_bytes[p] > 0) moves.push_back(Move::from(peer, to + recv_at[p], recv_bytes[p]));
  }
  if (!moves.empty()) links_.run(moves, "alltoallv");
}

void TcpBackend::barrier() {
  const int n = size(), r = rank();
  uint8_t token = 1, received[1];
  for (int distance = 1; distance < n; distance *= 2) {
    Move moves[] = {Move::to(wrap(r + distance, n), &token, 1), Move::from(wrap(r - distance, n), received, 1)};
    links_.run(moves, "barrier");
  }
}

}  // namespace hora::tcp_transport
