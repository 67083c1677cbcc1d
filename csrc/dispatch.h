// The project's one dtype dispatch: the op's floating dtype (bf16, fp16 or fp32) to a C++ type.
// Each backend names its own element types (c10::BFloat16 on the CPU, __nv_bfloat16 in CUDA),
// the body sees the chosen one as `scalar_t`.
#pragma once

#include <c10/core/ScalarType.h>
#include <c10/util/Exception.h>

#define XPRESS_DISPATCH_FLOAT(DTYPE, OP, BF16_T, F16_T, F32_T, ...)                      \
  [&] {                                                                                   \
    switch (DTYPE) {                                                                      \
      case c10::ScalarType::BFloat16: {                                                   \
        using scalar_t = BF16_T;                                                          \
        return __VA_ARGS__();                                                             \
      }                                                                                   \
      case c10::ScalarType::Half: {                                                       \
        using scalar_t = F16_T;                                                           \
        return __VA_ARGS__();                                                             \
      }                                                                                   \
      case c10::ScalarType::Float: {                                                      \
        using scalar_t = F32_T;                                                           \
        return __VA_ARGS__();                                                             \
      }                                                                                   \
      default:                                                                            \
        TORCH_CHECK_TYPE(false, OP, ": unsupported dtype ", DTYPE,                        \
                         " (expected bfloat16, float16 or float32)");                     \
    }                                                                                     \
  }()
