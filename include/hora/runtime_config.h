// Everything a Runtime is configured with. Filled from the environment by
// runtime_config_from_env() (the only place hora reads it) or by hand.
#pragma once

#include <chrono>
#include <cstddef>
#include <string>

namespace hora {

struct RuntimeConfig {
  int rank = 0;
  int size = 1;
  int local_rank = 0;
  int local_size = 1;
  int cross_rank = 0;
  int cross_size = 1;
  std::string hostname = "127.0.0.1";  // address this rank's transport listens on
  std::string rendezvous_host;          // empty: a single process, no store needed
  int rendezvous_port = 0;
  std::string secret;
  size_t fusion_threshold = 64 << 20;
  size_t cache_capacity = 1024;
  std::chrono::milliseconds timeout{600'000};        // collective and set-creation timeout
  std::chrono::milliseconds start_timeout{120'000};  // world rendezvous
};

// Reads HORA_* and the Horovod names (HOROVOD_RANK, HOROVOD_FUSION_THRESHOLD,
// HOROVOD_CACHE_CAPACITY, ...). Malformed values throw InvalidArgument
// naming the variable.
RuntimeConfig runtime_config_from_env();

}  // namespace hora
