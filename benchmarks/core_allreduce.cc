// Allreduce latency of hora's C++ core with no front end: the figure the
// Python benchmarks' "hora-core" peer reports. Run it under horarun, one
// process per rank (benchmarks/allreduce.py does):
//
//     horarun -np 2 build/hora_core_bench --sizes 4,1024,262144
//
// Every rank times in-place float32 Sum allreduces of each size on the
// global set, submitted as a caller that waits (OpArgs::caller_waits), after
// a warm-up; it prints {"RESULT": {"<bytes>": <median seconds>, ...}}.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "hora/runtime.h"

namespace {

int iterations(size_t bytes) { return bytes <= (16 << 10) ? 2000 : bytes <= (4 << 20) ? 60 : 8; }

double median_seconds(hora::Runtime& runtime, size_t bytes) {
  std::vector<float> buffer(std::max<size_t>(bytes / 4, 1), 1.0f);
  hora::OpArgs args;
  args.op = hora::OpType::kAllreduce;
  args.name = "bench";
  args.input = hora::TensorView{buffer.data(), hora::DataType::kFloat32, {static_cast<int64_t>(buffer.size())}};
  args.output = args.input;
  args.reduce_op = hora::ReduceOp::kSum;
  args.caller_waits = true;
  std::vector<double> samples;
  for (int i = 0; i < iterations(bytes) + 5; ++i) {
    const auto start = std::chrono::steady_clock::now();
    runtime.enqueue(0, args)->wait();
    const std::chrono::duration<double> took = std::chrono::steady_clock::now() - start;
    if (i >= 5) samples.push_back(took.count());
  }
  std::nth_element(samples.begin(), samples.begin() + samples.size() / 2, samples.end());
  return samples[samples.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<size_t> sizes{4};
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::strcmp(argv[i], "--sizes") != 0) continue;
    sizes.clear();
    for (char* part = std::strtok(argv[i + 1], ","); part; part = std::strtok(nullptr, ","))
      sizes.push_back(std::strtoull(part, nullptr, 10));
  }
  hora::Runtime runtime(hora::runtime_config_from_env(), {});
  std::string result = "{\"RESULT\": {";
  for (size_t i = 0; i < sizes.size(); ++i) {
    char seconds[32];
    std::snprintf(seconds, sizeof(seconds), "%.9e", median_seconds(runtime, sizes[i]));
    result += (i ? ", \"" : "\"") + std::to_string(sizes[i]) + "\": " + seconds;
  }
  std::printf("%s}}\n", result.c_str());
  std::fflush(stdout);
  runtime.shutdown();
  return 0;
}
