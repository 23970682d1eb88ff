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

namespace {

// cuTensorMapEncodeTiled of a 16-bit tensor in the 128-byte swizzle (unit element strides), with the
// maps of recent calls kept per host thread: a map depends only on these inputs, so calls on the
// same tensors (back-to-back calls, a model's layers) skip the driver's encoding.
bool encode_cached(int rank, const void* base, const cuuint64_t* dims, const cuuint64_t* strides, const cuuint32_t* box,
                   CUtensorMap* map) {
  const PFN_cuTensorMapEncodeTiled_v12000 encode = tensor_map_encoder();
  if (encode == nullptr) return false;
  struct Key {
    const void* base;
    int rank;
    cuuint64_t dims[5];
    cuuint64_t strides[4];
    cuuint32_t box[5];
    bool operator==(const Key& o) const {
      return base == o.base && rank == o.rank && std::equal(dims, dims + 5, o.dims) &&
             std::equal(strides, strides + 4, o.strides) && std::equal(box, box + 5, o.box);
    }
  };
  struct Entry {
    Key key;
    CUtensorMap map;
    bool used;
  };
  // 64: the K and V maps of a 32-layer model's paged caches (one per layer each) stay in.
  constexpr int kEntries = 64;
  thread_local Entry recent[kEntries];
  thread_local int next_slot = 0;
  Key k{};
  k.base = base;
  k.rank = rank;
  std::copy(dims, dims + rank, k.dims);
  std::copy(strides, strides + rank - 1, k.strides);
  std::copy(box, box + rank, k.box);
  for (const Entry& e : recent) {
    if (e.used && e.key == k) {
      *map = e.map;
      return true;
    }
  }
  const cuuint32_t estr[5] = {1, 1, 1, 1, 1};
  if (encode(map, CU_TENSOR_MAP_DATA_TYPE_UINT16, cuuint32_t(rank), const_cast<void*>(base), k.dims, k.strides, k.box,
             estr, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
             CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) != CUDA_SUCCESS)
    return false;
  Entry& e = recent[next_slot];
  next_slot = (next_slot + 1) % kEntries;
  e.key = k;
  e.map = *map;
  e.used = true;
  return true;
}

}  // namespace

bool encode_rows_map(const void* base, int head_dim, int rows, int heads, int batch, int64_t row, int64_t head,
                     int64_t batch_stride, int box_rows, CUtensorMap* map) {
  // A dimension of extent 1 is never stepped: any valid stride will do there.
  bool ok = true;
  auto stride = [&ok](int64_t extent, int64_t elems) -> cuuint64_t {
    if (extent <= 1) return 16;
    if (elems <= 0) ok = false;
    return cuuint64_t(elems) * 2;
  };
  const cuuint64_t dims[4] = {cuuint64_t(head_dim), cuuint64_t(rows), cuuint64_t(heads), cuuint64_t(batch)};
  const cuuint64_t strides[3] = {stride(rows, row), stride(heads, head), stride(batch, batch_stride)};
  const cuuint32_t box[4] = {64, cuuint32_t(box_rows), 1, 1};
  if (!ok || head_dim <= 0 || rows <= 0 || heads <= 0 || batch <= 0) return false;
  return encode_cached(4, base, dims, strides, box, map);
}

bool encode_grouped_map(const void* base, uint64_t rows, int64_t row, int64_t head, int width, int heads_k,
                        int box_rows, CUtensorMap* map) {
  if (rows == 0 || rows % 8 != 0 || box_rows % 8 != 0 || width % 64 != 0 || row <= 0 || (heads_k > 1 && head <= 0))
    return false;
  const cuuint64_t dims[5] = {64, 8, cuuint64_t(width / 64), rows / 8, cuuint64_t(heads_k)};
  const cuuint64_t strides[4] = {cuuint64_t(row) * 2, 128, cuuint64_t(row) * 16,
                                 heads_k > 1 ? cuuint64_t(head) * 2 : 16};  // bytes, dims 1..4
  const cuuint32_t box[5] = {64, 8, cuuint32_t(width / 64), cuuint32_t(box_rows / 8), 1};
  return encode_cached(5, base, dims, strides, box, map);
}

}  // namespace cuda
}  // namespace fa
