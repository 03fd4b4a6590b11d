// Adasum: Horovod's adaptive summation of the members' gradients, run by a
// process set's engine thread as the reduction of an allreduce.
#pragma once

#include <cstddef>
#include <vector>

#include "hora/types.h"
#include "transport/backend.h"

namespace hora {

// True for the element types Adasum reduces: float16, bfloat16, float32 and
// float64.
bool adasum_supports(DataType dtype);

// Bytes of scratch memory adasum_in_place needs for `total_count` elements.
size_t adasum_scratch_bytes(size_t total_count, DataType dtype);

// In place: `data` holds tensors packed back to back, tensor i being
// counts[i] elements of `dtype`; on return every member holds, tensor by
// tensor, the Adasum of every member's data (the same bits on every member).
// `scratch` is adasum_scratch_bytes of the caller's memory. Blocks like the
// Backend's collectives and throws their errors; InvalidArgument when the
// set's size is not a power of two or the dtype is not a float type.
void adasum_in_place(Backend& backend, std::byte* data, const std::vector<size_t>& counts, DataType dtype,
                     std::byte* scratch);

}  // namespace hora
