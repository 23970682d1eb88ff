// Tensor maps of the attention tensors (tma_maps.h).
#include "cuda/tma_maps.h"

#include <cuda_runtime.h>

#include <algorithm>

namespace fa {
namespace cuda {

PFN_cuTensorMapEncodeTiled_v12000 tensor_map_encoder() {
  static PFN_cuTensorMapEncodeTiled_v12000 encode = [] {
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult q{};
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &q) != cudaSuccess ||
        q != cudaDriverEntryPointSuccess)
      fn = nullptr;
    (void)cudaGetLastError();
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(fn);
  }();
  return encode;
}

bool encode_rows_map(const void* base, int head_dim, int rows, int heads, int batch, int64_t row, int64_t head,
                     int64_t batch_stride, int box_rows, CUtensorMap* map) {
  const PFN_cuTensorMapEncodeTiled_v12000 encode = tensor_map_encoder();
  if (encode == nullptr) return false;
  struct Key {
    const void* base;
    cuuint64_t dims[4];
    cuuint64_t strides[3];
    cuuint32_t box_rows;
    bool operator==(const Key& o) const {
      return base == o.base && box_rows == o.box_rows && std::equal(dims, dims + 4, o.dims) &&
             std::equal(strides, strides + 3, o.strides);
    }
  };
  struct Entry {
    Key key;
    CUtensorMap map;
    bool used;
  };
  constexpr int kEntries = 32;
  thread_local Entry recent[kEntries];
  thread_local int next_slot = 0;
  // A dimension of extent 1 is never stepped: any valid stride will do there.
  bool ok = true;
  auto stride = [&ok](int64_t extent, int64_t elems) -> cuuint64_t {
    if (extent <= 1) return 16;
    if (elems <= 0) ok = false;
    return cuuint64_t(elems) * 2;
  };
  Key k{};
  k.base = base;
  k.dims[0] = cuuint64_t(head_dim), k.dims[1] = cuuint64_t(rows), k.dims[2] = cuuint64_t(heads);
  k.dims[3] = cuuint64_t(batch);
  k.strides[0] = stride(rows, row), k.strides[1] = stride(heads, head), k.strides[2] = stride(batch, batch_stride);
  k.box_rows = cuuint32_t(box_rows);
  if (!ok || head_dim <= 0 || rows <= 0 || heads <= 0 || batch <= 0) return false;
  for (const Entry& e : recent) {
    if (e.used && e.key == k) {
      *map = e.map;
      return true;
    }
  }
  const cuuint32_t box[4] = {64, k.box_rows, 1, 1};
  const cuuint32_t estr[4] = {1, 1, 1, 1};
  if (encode(map, CU_TENSOR_MAP_DATA_TYPE_UINT16, 4, const_cast<void*>(base), k.dims, k.strides, box, estr,
             CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
             CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) != CUDA_SUCCESS)
    return false;
  Entry& e = recent[next_slot];
  next_slot = (next_slot + 1) % kEntries;
  e.key = k;
  e.map = *map;
  e.used = true;
  return true;
}

}  // namespace cuda
}  // namespace fa
