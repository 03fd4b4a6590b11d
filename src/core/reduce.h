// Element-wise reduction and scaling kernels for every DataType.
#pragma once

#include <cstddef>

#include "hora/types.h"

namespace hora {

// inout[i] = op(inout[i], in[i]) for i < count. `op` is kSum, kMin, kMax or
// kProduct (kAverage reduces as kSum). float16/bfloat16 compute in float and
// round to nearest even. bool: Sum and Max are logical or, Min and Product
// are logical and.
void reduce_into(void* inout, const void* in, size_t count, DataType dtype, ReduceOp op);
// inout[i] = op(first[i], inout[i]): the same bits as reducing `first` with
// inout's values in that order, written in place (no copy back).
void reduce_into_after(void* inout, const void* first, size_t count, DataType dtype, ReduceOp op);

// buf[i] *= factor. Integer types compute in double and truncate toward zero;
// bool is rejected with InvalidArgument (callers check first).
void scale_buffer(void* buf, size_t count, DataType dtype, double factor);

}  // namespace hora
