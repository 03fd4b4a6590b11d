// Tensors across the Python boundary: DLPack-capable arrays (NumPy, PyTorch,
// ...) to TensorView without a copy, and core-allocated outputs back to NumPy
// arrays that keep their Work alive.
#pragma once

#include <nanobind/ndarray.h>

#include <memory>

#include "hora/tensor_view.h"
#include "hora/work.h"

namespace hora::bindings {

using Array = nanobind::ndarray<nanobind::device::cpu>;

// Throws InvalidArgument for unsupported dtypes and non-contiguous arrays.
TensorView to_view(const Array& array, const char* which);
// `object` as an array; InvalidArgument naming `which` when it is none.
Array as_array(nanobind::handle object, const char* which);

// The Work's output as a NumPy array of `dtype` sharing its memory.
nanobind::object output_array(const std::shared_ptr<Work>& work, DataType dtype);

}  // namespace hora::bindings
