// Host-side pieces of inference_api.cu that fwd_api.cu uses (the split-KV combine).
#pragma once
#include <cuda_runtime.h>

#include "cuda/combine.cuh"
#include "fa_core.h"

namespace fa {
namespace cuda {
// Combines up to kMaxCombine partials (TI or fp32, CombineArgs::f32_mask) into an output of type TO.
template <typename TI, typename TO>
fa_status launch_combine(const CombineArgs& c, cudaStream_t s);
}  // namespace cuda
}  // namespace fa
