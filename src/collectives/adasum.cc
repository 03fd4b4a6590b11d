// Adasum by recursive vector halving with distance doubling, then recursive
// doubling back, the algorithm of Horovod's CPU implementation.
//
// The Adasum of two vectors a and b is
//     (1 - a.b / (2 |a|^2)) a + (1 - a.b / (2 |b|^2)) b,
// which is a + b when they are orthogonal and a when they are equal. A
// coefficient whose squared norm is below sqrt(DBL_MIN) stays 1, so a zero
// vector adds nothing. Over n = 2^k members the vectors combine as a binary
// tree: at distance d = 1, 2, 4, ... the result of members [g, g + d) (the
// "left" vector a) combines with that of [g + d, g + 2d) (the "right" vector
// b), g being a multiple of 2d. Tensors fused into one buffer are combined
// tensor by tensor: each gets its own dot product, norms and coefficients.
//
// Halving. Each member holds a range of the packed buffer, at first all of
// it. At distance d it pairs with partner = rank ^ d, which holds the same
// range: the left member keeps the lower half (the smaller one when the
// count is odd), the right member the upper half; each sends the half it
// gives up and receives the partner's copy of the half it keeps. For its
// kept range the member now holds a slice of both the left and the right
// vector. The dot product and squared norms of the two are sums over the
// slices that the 2d members of the group [g, g + 2d) hold: each member
// computes its partial sums in float64, the group adds them up in rank
// order (so every member of it gets the same bits) and each member combines
// its slice. After k levels each member holds 1/n of the result.
//
// Doubling. The levels are undone in reverse: at distance d each member
// sends its range to its partner and receives the partner's range next to
// it, until every member holds the whole result.
//
// Transport. The Backend offers collectives only, so a pairwise exchange is
// an alltoallv in which every other member sends and receives nothing, and
// the group's partial sums travel in an allgatherv of 3 doubles per tensor
// from every member. Each member moves the same payload as over
// point-to-point messages (about twice the buffer in all), but every level
// is a collective over the whole set: 3 log2(n) collectives per op, each as
// slow as the slowest member, and on Gloo each alltoallv still exchanges an
// empty message with every other member. That is cheap next to the payload
// for the set sizes hora runs on; a point-to-point Backend call would make
// the levels independent of the set's size.
#include "collectives/adasum.h"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <string>

#include "core/half.h"
#include "hora/errors.h"

namespace hora {
namespace {

// Element types: what lies in the buffer, and conversions to and from the
// float64 the arithmetic runs in.
template <typename T>
struct Native {
  using Storage = T;
  static double load(T value) { return value; }
  static T store(double value) { return static_cast<T>(value); }
};

struct Float16 {
  using Storage = uint16_t;
  static double load(uint16_t bits) { return fp16_to_float(bits); }
  static uint16_t store(double value) { return float_to_fp16(static_cast<float>(value)); }
};

struct BFloat16 {
  using Storage = uint16_t;
  static double load(uint16_t bits) { return bf16_to_float(bits); }
  static uint16_t store(double value) { return float_to_bf16(static_cast<float>(value)); }
};

// Partial sums over one slice of one tensor.
struct Dots {
  double dot = 0;        // mine . theirs
  double mine_sq = 0;    // |mine|^2
  double theirs_sq = 0;  // |theirs|^2
};

template <typename Element>
Dots dots_of(const std::byte* mine, const std::byte* theirs, size_t count) {
  const auto* a = reinterpret_cast<const typename Element::Storage*>(mine);
  const auto* b = reinterpret_cast<const typename Element::Storage*>(theirs);
  Dots d;
  for (size_t i = 0; i < count; ++i) {
    const double x = Element::load(a[i]);
    const double y = Element::load(b[i]);
    d.dot += x * y;
    d.mine_sq += x * x;
    d.theirs_sq += y * y;
  }
  return d;
}

// mine = mine_coeff * mine + theirs_coeff * theirs, in float64.
template <typename Element>
void combine_slice(std::byte* mine, double mine_coeff, const std::byte* theirs, double theirs_coeff,
                   size_t count) {
  auto* a = reinterpret_cast<typename Element::Storage*>(mine);
  const auto* b = reinterpret_cast<const typename Element::Storage*>(theirs);
  for (size_t i = 0; i < count; ++i) {
    a[i] = Element::store(mine_coeff * Element::load(a[i]) + theirs_coeff * Element::load(b[i]));
  }
}

struct Kernels {
  Dots (*dots)(const std::byte* mine, const std::byte* theirs, size_t count);
  void (*combine)(std::byte* mine, double mine_coeff, const std::byte* theirs, double theirs_coeff, size_t count);
};

template <typename Element>
Kernels kernels_of() {
  return {&dots_of<Element>, &combine_slice<Element>};
}

Kernels kernels_for(DataType dtype) {
  switch (dtype) {
    case DataType::kFloat16: return kernels_of<Float16>();
    case DataType::kBFloat16: return kernels_of<BFloat16>();
    case DataType::kFloat32: return kernels_of<Native<float>>();
    case DataType::kFloat64: return kernels_of<Native<double>>();
    default:
      throw InvalidArgument("Adasum supports float16, bfloat16, float32 and float64 tensors, not " +
                            std::string(dtype_name(dtype)));
  }
}

// Elements [begin, begin + count) of the packed buffer.
struct Range {
  size_t begin = 0;
  size_t count = 0;
  size_t end() const { return begin + count; }
};

Range overlap(Range a, Range b) {
  const size_t begin = std::max(a.begin, b.begin);
  const size_t end = std::min(a.end(), b.end());
  return end > begin ? Range{begin, end - begin} : Range{begin, 0};
}

// One member's view of one Adasum allreduce.
struct AdasumRun {
  Backend& backend;
  std::byte* data;
  std::byte* scratch;  // during halving: the partner's copy of the kept range
  size_t element_bytes;
  Kernels kernels;
  std::vector<Range> tensors;  // each tensor's range in the packed buffer

  std::byte* at(Range r) const { return data + r.begin * element_bytes; }
};

// Sends `send` to set rank `partner` and receives `receive_bytes` from it,
// as an alltoallv in which no other member sends or receives anything.
void exchange(Backend& backend, int partner, const std::byte* send, size_t send_bytes, std::byte* receive,
              size_t receive_bytes) {
  std::vector<size_t> send_sizes(backend.size(), 0);
  std::vector<size_t> receive_sizes(backend.size(), 0);
  send_sizes[partner] = send_bytes;
  receive_sizes[partner] = receive_bytes;
  backend.alltoallv(send, send_sizes, receive, receive_sizes);
}

// Adds up `partial` over the members of this member's group of
// `group_size` (a power of two), in rank order.
std::vector<double> sum_over_group(Backend& backend, const std::vector<double>& partial, int group_size) {
  const int n = backend.size();
  std::vector<double> everyone(partial.size() * n);
  backend.allgatherv(partial.data(), everyone.data(), std::vector<size_t>(n, partial.size() * sizeof(double)));
  const int first = backend.rank() & ~(group_size - 1);
  std::vector<double> sum(partial.size(), 0.0);
  for (int member = first; member < first + group_size; ++member)
    for (size_t i = 0; i < partial.size(); ++i) sum[i] += everyone[member * partial.size() + i];
  return sum;
}

double coefficient(double dot, double norm_sq) {
  static const double kSmallestNormSq = std::sqrt(DBL_MIN);
  return norm_sq >= kSmallestNormSq ? 1.0 - dot / (2.0 * norm_sq) : 1.0;
}

// Combines the kept range at distance `distance`: this member's data there
// with the partner's copy in scratch.
void combine_level(const AdasumRun& run, int distance, Range kept) {
  const bool left = (run.backend.rank() & distance) == 0;
  // Per tensor: a.b, |a|^2, |b|^2 over this member's slice.
  std::vector<double> partial(3 * run.tensors.size(), 0.0);
  for (size_t t = 0; t < run.tensors.size(); ++t) {
    const Range slice = overlap(run.tensors[t], kept);
    if (slice.count == 0) continue;
    const Dots d = run.kernels.dots(run.at(slice), run.scratch + (slice.begin - kept.begin) * run.element_bytes,
                                    slice.count);
    partial[3 * t] = d.dot;
    partial[3 * t + 1] = left ? d.mine_sq : d.theirs_sq;
    partial[3 * t + 2] = left ? d.theirs_sq : d.mine_sq;
  }
  const std::vector<double> total = sum_over_group(run.backend, partial, 2 * distance);
  for (size_t t = 0; t < run.tensors.size(); ++t) {
    const Range slice = overlap(run.tensors[t], kept);
    if (slice.count == 0) continue;
    const double left_coeff = coefficient(total[3 * t], total[3 * t + 1]);
    const double right_coeff = coefficient(total[3 * t], total[3 * t + 2]);
    run.kernels.combine(run.at(slice), left ? left_coeff : right_coeff,
                        run.scratch + (slice.begin - kept.begin) * run.element_bytes,
                        left ? right_coeff : left_coeff, slice.count);
  }
}

}  // namespace

bool adasum_supports(DataType dtype) {
  return dtype == DataType::kFloat16 || dtype == DataType::kBFloat16 || dtype == DataType::kFloat32 ||
         dtype == DataType::kFloat64;
}

size_t adasum_scratch_bytes(size_t total_count, DataType dtype) {
  return std::max<size_t>(1, (total_count + 1) / 2 * dtype_size(dtype));  // never a null buffer
}

void adasum_in_place(Backend& backend, std::byte* data, const std::vector<size_t>& counts, DataType dtype,
                     std::byte* scratch) {
  const int n = backend.size();
  if (n < 1 || (n & (n - 1)) != 0)
    throw InvalidArgument("Adasum needs a process set whose size is a power of two; this one has " +
                          std::to_string(n) + " members");
  AdasumRun run{backend, data, scratch, dtype_size(dtype), kernels_for(dtype), {}};
  size_t total = 0;
  for (size_t count : counts) {
    run.tensors.push_back({total, count});
    total += count;
  }
  if (n == 1 || total == 0) return;
  const int rank = backend.rank();
  const size_t bytes = run.element_bytes;
  std::vector<Range> held{{0, total}};  // this member's range before each level
  for (int distance = 1; distance < n; distance *= 2) {
    const Range range = held.back();
    const Range lower{range.begin, range.count / 2};
    const Range upper{lower.end(), range.count - lower.count};
    const bool left = (rank & distance) == 0;
    const Range kept = left ? lower : upper;
    const Range given = left ? upper : lower;
    exchange(backend, rank ^ distance, run.at(given), given.count * bytes, scratch, kept.count * bytes);
    combine_level(run, distance, kept);
    held.push_back(kept);
  }
  for (int distance = n / 2; distance >= 1; distance /= 2) {
    const Range kept = held.back();
    held.pop_back();
    const Range range = held.back();
    const bool left = (rank & distance) == 0;
    const Range partners{left ? kept.end() : range.begin, range.count - kept.count};
    exchange(backend, rank ^ distance, run.at(kept), kept.count * bytes, run.at(partners), partners.count * bytes);
  }
}

}  // namespace hora
