// Adasum allreduce: results against a direct computation of the same
// recursive rule, on the local and the Gloo backend at 1, 2 and 4 members,
// the rule's known cases, per-tensor coefficients in a fused buffer, and
// what enqueue refuses.
#include <gtest/gtest.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "collectives/collectives.h"
#include "core/half.h"
#include "hora/errors.h"
#include "ranks_as_threads.h"
#include "transport/backend.h"

namespace hora {
namespace {

using Vector = std::vector<double>;

// ------------------------------------------------------------ the reference

// (1 - a.b / 2|a|^2) a + (1 - a.b / 2|b|^2) b; a coefficient stays 1 when
// its squared norm is below sqrt(DBL_MIN).
Vector adasum_pair(const Vector& a, const Vector& b) {
  double dot = 0, a_sq = 0, b_sq = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    dot += a[i] * b[i];
    a_sq += a[i] * a[i];
    b_sq += b[i] * b[i];
  }
  const double tiny = std::sqrt(DBL_MIN);
  const double a_coeff = a_sq >= tiny ? 1 - dot / (2 * a_sq) : 1;
  const double b_coeff = b_sq >= tiny ? 1 - dot / (2 * b_sq) : 1;
  Vector out(a.size());
  for (size_t i = 0; i < a.size(); ++i) out[i] = a_coeff * a[i] + b_coeff * b[i];
  return out;
}

// Members [first, last) combined as the binary tree the algorithm follows:
// the lower half's result is `a`, the upper half's `b`.
Vector adasum_tree(const std::vector<Vector>& members, size_t first, size_t last) {
  if (last - first == 1) return members[first];
  const size_t middle = first + (last - first) / 2;
  return adasum_pair(adasum_tree(members, first, middle), adasum_tree(members, middle, last));
}

// The reference for fused tensors: each tensor on its own.
Vector adasum_reference(const std::vector<Vector>& members, const std::vector<size_t>& counts) {
  Vector out;
  size_t begin = 0;
  for (size_t count : counts) {
    std::vector<Vector> slices;
    for (const Vector& m : members) slices.emplace_back(m.begin() + begin, m.begin() + begin + count);
    Vector combined = adasum_tree(slices, 0, slices.size());
    out.insert(out.end(), combined.begin(), combined.end());
    begin += count;
  }
  return out;
}

// ------------------------------------------------ buffers of any float type

// Elements of `dtype` holding values as close as the type allows.
struct Buffer {
  DataType dtype;
  std::vector<std::byte> bytes;

  Buffer(DataType type, const Vector& values) : dtype(type), bytes(values.size() * dtype_size(type)) {
    for (size_t i = 0; i < values.size(); ++i) set(i, values[i]);
  }
  size_t size() const { return bytes.size() / dtype_size(dtype); }
  void set(size_t i, double v) {
    std::byte* at = bytes.data() + i * dtype_size(dtype);
    if (dtype == DataType::kFloat16) put(at, float_to_fp16(static_cast<float>(v)));
    if (dtype == DataType::kBFloat16) put(at, float_to_bf16(static_cast<float>(v)));
    if (dtype == DataType::kFloat32) put(at, static_cast<float>(v));
    if (dtype == DataType::kFloat64) put(at, v);
  }
  double get(size_t i) const {
    const std::byte* at = bytes.data() + i * dtype_size(dtype);
    if (dtype == DataType::kFloat16) return fp16_to_float(take<uint16_t>(at));
    if (dtype == DataType::kBFloat16) return bf16_to_float(take<uint16_t>(at));
    if (dtype == DataType::kFloat32) return take<float>(at);
    return take<double>(at);
  }
  Vector values() const {
    Vector out(size());
    for (size_t i = 0; i < out.size(); ++i) out[i] = get(i);
    return out;
  }

 private:
  template <typename T>
  static void put(std::byte* at, T v) { std::memcpy(at, &v, sizeof(T)); }
  template <typename T>
  static T take(const std::byte* at) {
    T v;
    std::memcpy(&v, at, sizeof(T));
    return v;
  }
};

// Runs the allreduce over `counts` tensors packed in `buffer`, fused when
// there are several, as the engine does.
void adasum_allreduce(Backend& backend, Buffer& buffer, const std::vector<size_t>& counts, double prescale = 1.0,
                      double postscale = 1.0) {
  std::vector<AllreducePart> parts;
  size_t begin = 0;
  for (size_t count : counts) {
    TensorView view{buffer.bytes.data() + begin * dtype_size(buffer.dtype), buffer.dtype,
                    {static_cast<int64_t>(count)}};
    parts.push_back({view, view});
    begin += count;
  }
  FusionBuffer fusion;
  allreduce(backend, parts, AllreduceOptions{buffer.dtype, ReduceOp::kAdasum, prescale, postscale}, fusion);
}

// Tolerance relative to the largest magnitude: the algorithm stores each
// level's result in the element type, the reference keeps float64.
double tolerance(DataType dtype) {
  switch (dtype) {
    case DataType::kFloat16: return 4e-3;
    case DataType::kBFloat16: return 3e-2;
    case DataType::kFloat32: return 1e-5;
    default: return 1e-12;
  }
}

void expect_near(const Vector& got, const Vector& expected, double relative, const std::string& what) {
  ASSERT_EQ(got.size(), expected.size()) << what;
  double scale = 1e-30;
  for (double v : expected) scale = std::max(scale, std::fabs(v));
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_NEAR(got[i], expected[i], relative * scale) << what << ", element " << i;
}

// ---------------------------------------------------------- backend runs

using Body = std::function<void(Backend& backend)>;

// One thread per member, each with its own factory and backend over a
// shared store, as separate processes would have.
void run_members(const std::string& kind, int n, const Body& body) {
  auto store = make_prefix_store("set", make_hash_store());
  std::vector<int> ranks(n);
  for (int i = 0; i < n; ++i) ranks[i] = i;
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      try {
        auto factory = kind == "gloo" ? make_gloo_backend_factory("127.0.0.1") : make_local_backend_factory();
        auto backend = factory->create(ranks, r, store, std::chrono::seconds(20));
        body(*backend);
        backend->barrier();  // keeps every backend alive until all bodies end
      } catch (const std::exception& e) {
        ADD_FAILURE() << kind << " rank " << r << ": " << e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
}

// Correlated random vectors, so that the coefficients are far from 1 and
// from 1/2.
Vector member_values(int rank, size_t count, unsigned seed) {
  std::mt19937 shared(seed), own(seed * 31 + static_cast<unsigned>(rank) + 1);
  std::uniform_real_distribution<double> uniform(-1.0, 1.0);
  Vector v(count);
  for (size_t i = 0; i < count; ++i) v[i] = uniform(shared);
  for (size_t i = 0; i < count; ++i) v[i] = v[i] * (rank + 1) * 0.5 + uniform(own);
  return v;
}

class AdasumOnBackend : public ::testing::TestWithParam<std::tuple<std::string, int>> {};

TEST_P(AdasumOnBackend, FusedTensorsOfEveryFloatTypeMatchTheReference) {
  const auto [kind, n] = GetParam();
  // Odd sizes, an empty tensor, and one element fewer than the members.
  const std::vector<size_t> counts = {37, 0, 3, 1, 64};
  const DataType dtypes[] = {DataType::kFloat16, DataType::kBFloat16, DataType::kFloat32, DataType::kFloat64};
  size_t total = 0;
  for (size_t c : counts) total += c;
  std::vector<std::vector<Vector>> results(std::size(dtypes), std::vector<Vector>(n));
  run_members(kind, n, [&](Backend& b) {
    for (size_t d = 0; d < std::size(dtypes); ++d) {
      Buffer buffer(dtypes[d], member_values(b.rank(), total, 7));
      adasum_allreduce(b, buffer, counts);
      results[d][b.rank()] = buffer.values();
    }
  });
  for (size_t d = 0; d < std::size(dtypes); ++d) {
    const std::string what = std::string(dtype_name(dtypes[d])) + " on " + kind + " with " + std::to_string(n);
    std::vector<Vector> inputs;
    for (int r = 0; r < n; ++r) inputs.push_back(Buffer(dtypes[d], member_values(r, total, 7)).values());
    expect_near(results[d][0], adasum_reference(inputs, counts), tolerance(dtypes[d]), what);
    for (int r = 1; r < n; ++r) EXPECT_EQ(results[d][r], results[d][0]) << what << ": rank " << r << " differs";
  }
}

TEST_P(AdasumOnBackend, SingleLargeTensorMatchesTheReference) {
  const auto [kind, n] = GetParam();
  const size_t count = 100003;
  std::vector<Vector> results(n);
  run_members(kind, n, [&](Backend& b) {
    Buffer buffer(DataType::kFloat32, member_values(b.rank(), count, 11));
    adasum_allreduce(b, buffer, {count});
    results[b.rank()] = buffer.values();
  });
  std::vector<Vector> inputs;
  for (int r = 0; r < n; ++r) inputs.push_back(Buffer(DataType::kFloat32, member_values(r, count, 11)).values());
  expect_near(results[0], adasum_reference(inputs, {count}), 1e-5, kind);
  for (int r = 1; r < n; ++r) EXPECT_EQ(results[r], results[0]) << "rank " << r;
}

INSTANTIATE_TEST_SUITE_P(Backends, AdasumOnBackend,
                         ::testing::Combine(::testing::Values("local", "gloo"), ::testing::Values(1, 2, 4)),
                         [](const auto& info) {
                           return std::get<0>(info.param) + "_" + std::to_string(std::get<1>(info.param));
                         });

// ------------------------------------------------------------ known cases

TEST(Adasum, OrthogonalVectorsAdd) {
  run_members("local", 4, [](Backend& b) {
    Vector unit(4, 0.0);
    unit[b.rank()] = 1.5;
    Buffer buffer(DataType::kFloat32, unit);
    adasum_allreduce(b, buffer, {4});
    EXPECT_EQ(buffer.values(), Vector(4, 1.5));
  });
}

TEST(Adasum, IdenticalVectorsGiveTheVector) {
  run_members("local", 4, [](Backend& b) {
    const Vector v = {3, -1, 0.25, 7, 2};
    Buffer buffer(DataType::kFloat64, v);
    adasum_allreduce(b, buffer, {5});
    EXPECT_EQ(buffer.values(), v);
  });
}

TEST(Adasum, ZeroVectorTakesNothingAway) {
  run_members("local", 2, [](Backend& b) {
    const Vector v = {1, 2, 3};
    Buffer buffer(DataType::kFloat32, b.rank() == 0 ? Vector(3, 0.0) : v);
    adasum_allreduce(b, buffer, {3});
    EXPECT_EQ(buffer.values(), v);
  });
}

TEST(Adasum, EachFusedTensorGetsItsOwnCoefficients) {
  // Tensor 0 is the same on every member (result: itself), tensor 1
  // orthogonal across members (result: the sum). Coefficients over the whole
  // buffer would give neither.
  run_members("local", 4, [](Backend& b) {
    Vector values = {2, 4, 6};
    for (int i = 0; i < 4; ++i) values.push_back(i == b.rank() ? 1.0 : 0.0);
    Buffer buffer(DataType::kFloat32, values);
    adasum_allreduce(b, buffer, {3, 4});
    EXPECT_EQ(buffer.values(), (Vector{2, 4, 6, 1, 1, 1, 1}));
  });
}

TEST(Adasum, PrescaleAndPostscaleApplyAsForSum) {
  run_members("local", 2, [](Backend& b) {
    Vector unit(2, 0.0);
    unit[b.rank()] = 1.0;
    Buffer buffer(DataType::kFloat64, unit);
    adasum_allreduce(b, buffer, {2}, 3.0, 0.5);  // (3 e0 + 3 e1) * 0.5
    EXPECT_EQ(buffer.values(), Vector(2, 1.5));
  });
}

TEST(Adasum, BackendRefusesASetWhoseSizeIsNotAPowerOfTwo) {
  run_members("local", 3, [](Backend& b) {
    Buffer buffer(DataType::kFloat32, Vector(4, 1.0));
    try {
      adasum_allreduce(b, buffer, {4});
      ADD_FAILURE() << "expected InvalidArgument";
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find("3 members"), std::string::npos) << e.what();
    }
  });
}

// ------------------------------------------------------ through the Runtime

using test_support::run_ranks;

OpArgs adasum_args(std::vector<float>& in, std::vector<float>& out, const std::string& name) {
  OpArgs a;
  a.op = OpType::kAllreduce;
  a.name = name;
  a.reduce_op = ReduceOp::kAdasum;
  a.input = {in.data(), DataType::kFloat32, {static_cast<int64_t>(in.size())}};
  a.output = {out.data(), DataType::kFloat32, {static_cast<int64_t>(out.size())}};
  return a;
}

class AdasumThroughRuntime : public ::testing::TestWithParam<int> {};

TEST_P(AdasumThroughRuntime, ConcurrentOpsMatchTheReference) {
  const int n = GetParam();
  const std::vector<size_t> sizes = {5, 9, 1};
  std::vector<std::vector<Vector>> inputs(sizes.size());
  for (size_t t = 0; t < sizes.size(); ++t)
    for (int r = 0; r < n; ++r)
      inputs[t].push_back(Buffer(DataType::kFloat32, member_values(r, sizes[t], 3 + t)).values());
  run_ranks(n, [&](Runtime& rt) {
    // Submitted together, so small ones may travel fused.
    std::vector<std::vector<float>> ins, outs;
    for (size_t t = 0; t < sizes.size(); ++t) {
      ins.emplace_back(inputs[t][rt.rank()].begin(), inputs[t][rt.rank()].end());
      outs.emplace_back(sizes[t]);
    }
    std::vector<std::shared_ptr<Work>> works;
    for (size_t t = 0; t < sizes.size(); ++t)
      works.push_back(rt.enqueue(0, adasum_args(ins[t], outs[t], "grad." + std::to_string(t))));
    for (size_t t = 0; t < sizes.size(); ++t) {
      works[t]->wait();
      expect_near(Vector(outs[t].begin(), outs[t].end()), adasum_reference(inputs[t], {sizes[t]}), 1e-5,
                  "tensor " + std::to_string(t));
    }
  });
}

INSTANTIATE_TEST_SUITE_P(Ranks, AdasumThroughRuntime, ::testing::Values(1, 2, 4));

// Runs `enqueue`, expecting InvalidArgument whose message holds `needle`.
template <typename Enqueue>
void expect_refused(Enqueue&& enqueue, const std::string& needle) {
  try {
    enqueue();
    ADD_FAILURE() << "expected InvalidArgument mentioning " << needle;
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST(AdasumEnqueue, RefusedOnASetOfThree) {
  run_ranks(4, [](Runtime& rt) {
    if (rt.rank() < 3) {  // set 1 is [0, 1, 2]
      std::vector<float> in(4, 1.0f), out(4);
      expect_refused([&] { rt.enqueue(1, adasum_args(in, out, "g")); }, "process set 1 has 3 ranks");
      // The set still works.
      OpArgs sum = adasum_args(in, out, "g");
      sum.reduce_op = ReduceOp::kSum;
      rt.enqueue(1, sum)->wait();
      EXPECT_EQ(out, std::vector<float>(4, 3.0f));
    }
    // The world of four beside it runs Adasum.
    std::vector<float> unit(4, 0.0f), result(4);
    unit[rt.rank()] = 1.0f;
    rt.enqueue(0, adasum_args(unit, result, "world"))->wait();
    EXPECT_EQ(result, std::vector<float>(4, 1.0f));
  }, {{0, 1, 2}});
}

TEST(AdasumEnqueue, RefusesIntegerTensorsAndReducescatter) {
  run_ranks(2, [](Runtime& rt) {
    std::vector<int32_t> in(4, 1), out(4);
    OpArgs ints;
    ints.op = OpType::kAllreduce;
    ints.reduce_op = ReduceOp::kAdasum;
    ints.input = {in.data(), DataType::kInt32, {4}};
    ints.output = {out.data(), DataType::kInt32, {4}};
    expect_refused([&] { rt.enqueue(0, ints); }, "not int32");
    std::vector<float> rows(4, 1.0f), mine(2);
    OpArgs scatter = adasum_args(rows, mine, "rs");
    scatter.op = OpType::kReducescatter;
    expect_refused([&] { rt.enqueue(0, scatter); }, "allreduce only");
  });
}

}  // namespace
}  // namespace hora
