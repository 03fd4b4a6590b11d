// The collectives of ShmBackend, chunk by chunk through the slots (the
// scheme is described in shm_backend.h).
#include <algorithm>
#include <cstring>

#include "core/reduce.h"
#include "hora/errors.h"
#include "transport/shm/shm_backend.h"

namespace hora::shm {
namespace {

template <typename T>
std::atomic_ref<T> shared(const Segment& segment, uint64_t offset) {
  return std::atomic_ref<T>(*segment.field_at<T>(offset));
}

// The part of a piece of `total` bytes that falls in round `round` of
// `round_bytes`.
size_t piece_of(size_t total, size_t round, size_t round_bytes) {
  const size_t begin = round * round_bytes;
  return begin >= total ? 0 : std::min(round_bytes, total - begin);
}

void copy(void* to, const void* from, size_t bytes) {
  if (bytes > 0) std::memcpy(to, from, bytes);
}


// Turns. A member writes a slot line that a peer read a few chunks ago
// and still holds in its cache; each such write waits for the peer's copy
// to be invalidated, and on this path writes, not reads, took most of the
// time (a 256 KiB allreduce spent 22 of its 31 us writing its two slot
// halves). So a chunk that fills only part of a slot goes to the next of
// the positions that fit it, in turn: a line is written again only after
// 2 x positions chunks, by when the peer has read enough else to have
// let it go (2 ranks, 256 KiB: 39 -> 21 us). Every member counts the same
// chunks of the same sizes, so all agree on the positions; and seeing
// every member at chunk k+1 still proves all of buffer k % 2 free.
// Allreduce chunks of kTurnsFrom bytes or more take turns; a chunk takes
// whole kTurnAlign pages at one position.
constexpr size_t kTurnsFrom = 32 * 1024;
constexpr size_t kTurnAlign = 4096;

size_t turn_span(size_t bytes) { return (bytes + kTurnAlign - 1) / kTurnAlign * kTurnAlign; }

// Where in its slot (of `slot_bytes`) the chunk-th chunk, of `bytes`, goes.
size_t turn_position(uint64_t slot_bytes, size_t bytes, uint64_t chunk) {
  if (bytes < kTurnsFrom) return 0;
  const size_t span = turn_span(bytes);
  const size_t positions = slot_bytes / span;
  return positions <= 1 ? 0 : (chunk / 2) % positions * span;
}

// How much of its slots an allreduce whose chunks are `bytes` long uses.
size_t turns_extent(uint64_t slot_bytes, size_t bytes) {
  if (bytes < kTurnsFrom) return bytes;
  const size_t span = turn_span(bytes);
  return std::max<size_t>(bytes, slot_bytes / span * span);
}

}  // namespace

// `slot_use`: how many bytes of its slots this member may write (they are
// allocated on first use, in steps of kSlotGrowth).
template <typename Collective>
void ShmBackend::run(const char* name, size_t slot_use, Collective&& collective) {
  const std::string where = set_name_ + ": " + name;
  if (aborted_.load(std::memory_order_acquire)) {
    std::lock_guard<std::mutex> lock(abort_mutex_);
    throw PeerFailure(where + " on an aborted set: " + abort_reason_);
  }
  if (!broken_.empty()) throw PeerFailure(where + " on a set broken by an earlier failure: " + broken_);
  const uint64_t abort_offset = segment_.layout().abort_offset() + field::kAbortState;
  try {
    if (shared<uint32_t>(segment_, abort_offset).load(std::memory_order_acquire) != kRunning)
      throw PeerFailure(abort_record());
    prepare_own_slots(slot_use);
    collective();
  } catch (const Timeout& e) {
    broken_ = where + ": " + e.what();
    give_up(broken_);
    throw Timeout(broken_);
  } catch (const Error& e) {
    if (dynamic_cast<const InvalidArgument*>(&e)) throw;
    broken_ = where + ": " + e.what();
    give_up(broken_);
    throw PeerFailure(broken_);
  }
}

void ShmBackend::allreduce(void* buf, size_t count, DataType dtype, ReduceOp op) {
  reduce_chunks("allreduce", buf, count, dtype, op, kEveryMember);
}

void ShmBackend::reduce(void* buf, size_t count, DataType dtype, ReduceOp op, int root) {
  if (root < 0 || root >= size())
    throw InvalidArgument(set_name_ + ": reduce root " + std::to_string(root) + " is not a set rank");
  reduce_chunks("reduce", buf, count, dtype, op, root);
}

void ShmBackend::reduce_chunks(const char* name, void* buf, size_t count, DataType dtype, ReduceOp op, int root) {
  if (size() == 1 || count == 0) return;
  const size_t element = dtype_size(dtype);
  const size_t per_chunk = segment_.layout().slot_bytes / element;
  run(name, turns_extent(segment_.layout().slot_bytes, std::min(count, per_chunk) * element), [&] {
    auto* data = static_cast<uint8_t*>(buf);
    for (size_t done = 0; done < count; done += per_chunk) {
      allreduce_chunk(data + done * element, std::min(per_chunk, count - done), dtype, op, root);
    }
  });
}

// Small chunks: every member copies its input into its slot, one sync, and
// every member (or the root alone) reduces all slots in set-rank order into
// its output, so all end bit-identical. Larger ones go through
// reduce_scatter_allgather.
void ShmBackend::allreduce_chunk(uint8_t* data, size_t count, DataType dtype, ReduceOp op, int root) {
  const uint64_t chunk = chunks_++;
  const int buffer = static_cast<int>(chunk % 2);
  const size_t bytes = count * dtype_size(dtype);
  const size_t at = turn_position(segment_.layout().slot_bytes, bytes, chunk);
  if (bytes > tuning_.small_bytes) return reduce_scatter_allgather(data, count, dtype, op, buffer, at, root);
  std::memcpy(slot(rank_, buffer) + at, data, bytes);
  sync();
  if (root != kEveryMember && root != rank_) return;
  if (rank_ != 0) std::memcpy(data, slot(0, buffer) + at, bytes);
  for (int r = 1; r < size(); ++r) reduce_into(data, slot(r, buffer) + at, count, dtype, op);
}

// Reduce-scatter then allgather: member r owns slice r of the chunk (cache-
// line aligned; the last slices may be short or empty). Each member puts
// in its slot only the slices the others own. After the first sync it
// reduces the others' slice r into slice r of its own input (in the order
// r+1, r+2, ...) and copies the result into its slot, where nobody else
// reads in this phase; after the second sync every member copies each
// other reduced slice out of its owner's slot. Each element is reduced by
// one member only, so all members end bit-identical; each member's own
// slice crosses the segment once instead of twice. Where one member (the
// root) takes the result, only it copies the others' reduced slices out,
// and its own stays in its input.
void ShmBackend::reduce_scatter_allgather(uint8_t* data, size_t count, DataType dtype, ReduceOp op, int buffer,
                                          size_t at, int root) {
  const size_t element = dtype_size(dtype);
  const size_t unit = std::max<size_t>(1, kLine / element);
  const size_t members = static_cast<size_t>(size());
  const size_t per_member = ((count + members - 1) / members + unit - 1) / unit * unit;
  auto begin = [&](int r) { return std::min(count, static_cast<size_t>(r) * per_member); };
  auto end = [&](int r) { return std::min(count, begin(r) + per_member); };
  uint8_t* own_slot = slot(rank_, buffer) + at;
  for (int k = 1; k < size(); ++k) {
    const int r = (rank_ + k) % size();
    copy(own_slot + begin(r) * element, data + begin(r) * element, (end(r) - begin(r)) * element);
  }
  sync();
  uint8_t* mine = data + begin(rank_) * element;
  const size_t my_count = end(rank_) - begin(rank_);
  for (int k = 1; k < size() && my_count > 0; ++k) {
    const int r = (rank_ + k) % size();
    reduce_into(mine, slot(r, buffer) + at + begin(rank_) * element, my_count, dtype, op);
  }
  if (root != rank_) copy(own_slot + begin(rank_) * element, mine, my_count * element);
  sync();
  if (root != kEveryMember && root != rank_) return;
  for (int k = 1; k < size(); ++k) {
    const int r = (rank_ + k) % size();
    copy(data + begin(r) * element, slot(r, buffer) + at + begin(r) * element, (end(r) - begin(r)) * element);
  }
}

// Rounds of one slot per member: in round k each member puts bytes
// [k*S, (k+1)*S) of its input in its slot; after the sync every member
// copies each member's piece to its place in the output.
void ShmBackend::allgatherv(const void* in, void* out, const std::vector<size_t>& recv_bytes) {
  expect_one_per_member("allgatherv", recv_bytes);
  if (size() == 1) return copy(out, in, recv_bytes[0]);
  const size_t largest = *std::max_element(recv_bytes.begin(), recv_bytes.end());
  if (largest == 0) return;
  run("allgatherv", recv_bytes[rank_], [&] {
    const size_t round_bytes = segment_.layout().slot_bytes;
    std::vector<size_t> offsets(recv_bytes.size(), 0);
    for (size_t r = 1; r < recv_bytes.size(); ++r) offsets[r] = offsets[r - 1] + recv_bytes[r - 1];
    const auto* input = static_cast<const uint8_t*>(in);
    auto* output = static_cast<uint8_t*>(out);
    const size_t rounds = (largest + round_bytes - 1) / round_bytes;
    for (size_t k = 0; k < rounds; ++k) {
      const int buffer = static_cast<int>(chunks_++ % 2);
      copy(slot(rank_, buffer), input + k * round_bytes, piece_of(recv_bytes[rank_], k, round_bytes));
      sync();
      for (int r = 0; r < size(); ++r) {
        copy(output + offsets[r] + k * round_bytes, slot(r, buffer), piece_of(recv_bytes[r], k, round_bytes));
      }
    }
  });
}

void ShmBackend::broadcast(void* buf, size_t bytes, int root) {
  if (root < 0 || root >= size())
    throw InvalidArgument(set_name_ + ": broadcast root " + std::to_string(root) + " is not a set rank");
  if (size() == 1 || bytes == 0) return;
  run("broadcast", rank_ == root ? bytes : 0, [&] {
    const size_t round_bytes = segment_.layout().slot_bytes;
    auto* data = static_cast<uint8_t*>(buf);
    for (size_t k = 0; k * round_bytes < bytes; ++k) {
      const int buffer = static_cast<int>(chunks_++ % 2);
      const size_t piece = piece_of(bytes, k, round_bytes);
      if (rank_ == root) copy(slot(root, buffer), data + k * round_bytes, piece);
      sync();
      if (rank_ != root) copy(data + k * round_bytes, slot(root, buffer), piece);
    }
  });
}

// Each member's slot is cut into one region per receiver. In round k a
// member puts bytes [k*R, (k+1)*R) of its block for member j into region
// j of its slot; after the sync member j copies region j of every slot.
// Nobody knows every block size, so the first sync also carries each
// member's largest block as side data, which fixes the number of rounds.
void ShmBackend::alltoallv(const void* in, const std::vector<size_t>& send_bytes, void* out,
                           const std::vector<size_t>& recv_bytes) {
  expect_one_per_member("alltoallv", send_bytes);
  expect_one_per_member("alltoallv", recv_bytes);
  if (size() == 1) {
    if (send_bytes[0] != recv_bytes[0])
      throw InvalidArgument(set_name_ + ": alltoallv sends " + std::to_string(send_bytes[0]) +
                            " bytes to itself but expects " + std::to_string(recv_bytes[0]));
    return copy(out, in, send_bytes[0]);
  }
  run("alltoallv", segment_.layout().slot_bytes, [&] {
    const size_t share = segment_.layout().slot_bytes / static_cast<size_t>(size());
    const size_t region = share >= kLine ? share / kLine * kLine : share;
    std::vector<size_t> send_offsets(size(), 0), recv_offsets(size(), 0);
    for (int r = 1; r < size(); ++r) {
      send_offsets[r] = send_offsets[r - 1] + send_bytes[r - 1];
      recv_offsets[r] = recv_offsets[r - 1] + recv_bytes[r - 1];
    }
    const size_t largest = std::max(*std::max_element(send_bytes.begin(), send_bytes.end()),
                                    *std::max_element(recv_bytes.begin(), recv_bytes.end()));
    const auto* input = static_cast<const uint8_t*>(in);
    auto* output = static_cast<uint8_t*>(out);
    size_t rounds = 1;
    for (size_t k = 0; k < rounds; ++k) {
      const int buffer = static_cast<int>(chunks_++ % 2);
      for (int r = 0; r < size(); ++r)
        copy(slot(rank_, buffer) + r * region, input + send_offsets[r] + k * region, piece_of(send_bytes[r], k, region));
      const uint64_t phase = sync(k == 0 ? largest : 0);
      if (k == 0) {
        uint64_t overall = 0;
        for (int r = 0; r < size(); ++r) overall = std::max(overall, side_of(r, phase));
        if (overall > kMaxSlotBytes * kMaxRanks * kMaxRanks)
          throw Internal("a member published an impossible alltoallv block of " + std::to_string(overall) + " bytes");
        rounds = std::max<size_t>(1, (overall + region - 1) / region);
      }
      for (int r = 0; r < size(); ++r)
        copy(output + recv_offsets[r] + k * region, slot(r, buffer) + rank_ * region, piece_of(recv_bytes[r], k, region));
    }
  });
}

void ShmBackend::barrier() {
  if (size() == 1) return;
  run("barrier", 0, [&] { sync(); });
}

}  // namespace hora::shm
