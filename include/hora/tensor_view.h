// A non-owning view of a dense, contiguous tensor in caller memory.
#pragma once

#include <cstdint>
#include <vector>

#include "hora/types.h"

namespace hora {

struct TensorView {
  void* data = nullptr;
  DataType dtype = DataType::kFloat32;
  std::vector<int64_t> shape;

  int64_t num_elements() const {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
  }
  size_t byte_size() const { return static_cast<size_t>(num_elements()) * dtype_size(dtype); }
};

}  // namespace hora
