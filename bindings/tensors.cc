#include "tensors.h"

#include <string>

#include "hora/errors.h"

namespace nb = nanobind;

namespace hora::bindings {
namespace {

DataType to_dtype(nb::dlpack::dtype t, const char* which) {
  using Code = nb::dlpack::dtype_code;
  auto code = static_cast<Code>(t.code);
  if (t.lanes == 1) {
    if (code == Code::UInt && t.bits == 8) return DataType::kUInt8;
    if (code == Code::Int && t.bits == 8) return DataType::kInt8;
    if (code == Code::UInt && t.bits == 16) return DataType::kUInt16;
    if (code == Code::Int && t.bits == 16) return DataType::kInt16;
    if (code == Code::Int && t.bits == 32) return DataType::kInt32;
    if (code == Code::Int && t.bits == 64) return DataType::kInt64;
    if (code == Code::Float && t.bits == 16) return DataType::kFloat16;
    if (code == Code::Bfloat && t.bits == 16) return DataType::kBFloat16;
    if (code == Code::Float && t.bits == 32) return DataType::kFloat32;
    if (code == Code::Float && t.bits == 64) return DataType::kFloat64;
    if (code == Code::Bool && t.bits == 8) return DataType::kBool;
  }
  throw InvalidArgument(std::string(which) + " has an unsupported dtype (code " + std::to_string(t.code) + ", " +
                        std::to_string(t.bits) + " bits); supported: uint8, int8, uint16, int16, int32, "
                        "int64, float16, bfloat16, float32, float64, bool");
}

nb::dlpack::dtype to_dlpack(DataType dtype) {
  using Code = nb::dlpack::dtype_code;
  auto make = [](Code code, int bits) {
    return nb::dlpack::dtype{static_cast<uint8_t>(code), static_cast<uint8_t>(bits), 1};
  };
  switch (dtype) {
    case DataType::kUInt8: return make(Code::UInt, 8);
    case DataType::kInt8: return make(Code::Int, 8);
    case DataType::kUInt16: return make(Code::UInt, 16);
    case DataType::kInt16: return make(Code::Int, 16);
    case DataType::kInt32: return make(Code::Int, 32);
    case DataType::kInt64: return make(Code::Int, 64);
    case DataType::kFloat16: return make(Code::Float, 16);
    case DataType::kBFloat16: return make(Code::Bfloat, 16);
    case DataType::kFloat32: return make(Code::Float, 32);
    case DataType::kFloat64: return make(Code::Float, 64);
    case DataType::kBool: return make(Code::Bool, 8);
  }
  throw Internal("unknown dtype");
}

}  // namespace

Array as_array(nb::handle object, const char* which) {
  Array array;
  if (!nb::try_cast(object, array))
    throw InvalidArgument(std::string(which) + " must be an array on the CPU (buffer protocol or DLPack), got " +
                          nb::type_name(object.type()).c_str());
  return array;
}

TensorView to_view(const Array& array, const char* which) {
  TensorView view;
  view.dtype = to_dtype(array.dtype(), which);
  view.data = array.data();
  bool empty = false;
  for (size_t i = 0; i < array.ndim(); ++i) empty = empty || array.shape(i) == 0;
  int64_t expected_stride = 1;
  for (size_t i = array.ndim(); i-- > 0 && !empty;) {
    int64_t dim = static_cast<int64_t>(array.shape(i));
    if (dim != 1 && array.stride(i) != expected_stride)
      throw InvalidArgument(std::string(which) + " is not contiguous; make it contiguous first");
    expected_stride *= dim;
  }
  for (size_t i = 0; i < array.ndim(); ++i) view.shape.push_back(static_cast<int64_t>(array.shape(i)));
  return view;
}

nb::object output_array(const std::shared_ptr<Work>& work, DataType dtype) {
  auto* keep = new std::shared_ptr<Work>(work);
  nb::capsule owner(keep, [](void* p) noexcept { delete static_cast<std::shared_ptr<Work>*>(p); });
  std::vector<size_t> shape(work->output_shape().begin(), work->output_shape().end());
  nb::ndarray<nb::numpy> array(const_cast<std::byte*>(work->output_data()), shape.size(), shape.data(), owner,
                               nullptr, to_dlpack(dtype));
  return nb::cast(array, nb::rv_policy::reference);
}

}  // namespace hora::bindings
