// Tensor maps (TMA descriptors) of the attention tensors, one place for the forward and backward
// warp-specialised kernels and the decode kernel's cache maps: the driver's encoder, and a rows map
// of a [batch, rows, heads, head dim] tensor with a cache of recent encodings.
#pragma once
#include <cuda.h>
#include <cudaTypedefs.h>
#include <stdint.h>

namespace fa {
namespace cuda {

// The driver's cuTensorMapEncodeTiled (null when the driver has none).
PFN_cuTensorMapEncodeTiled_v12000 tensor_map_encoder();

// A 16-bit tensor of `batch` x `rows` x `heads` rows of `head_dim` elements (element strides row,
// head, batch) as a rank-4 map {head dim, rows, heads, batch} with boxes of {64 columns, box_rows
// rows, 1, 1} in the 128-byte swizzle that the wgmma descriptors read: rows past `rows` and columns
// past `head_dim` come in as zeros. False when the driver has no tensor maps, refuses the map, or a
// stride of a dimension longer than 1 is zero or negative (the caller then takes its cp.async
// kernel). Recent maps are kept per host thread: a map depends only on these inputs, so calls on
// the same tensors (back-to-back calls, a model's layers) skip the driver's encoding.
bool encode_rows_map(const void* base, int head_dim, int rows, int heads, int batch, int64_t row, int64_t head,
                     int64_t batch_stride, int box_rows, CUtensorMap* map);

// One paged cache (K or V; `rows` = pages x page size, element strides row and head) as a rank-5 map
// {64 elements, 8 rows, width / 64 column blocks, rows / 8, kv heads} with boxes of {64, 8, width /
// 64, box_rows / 8, 1} in the 128-byte swizzle: a box of box_rows rows lands as [8-row group][column
// block][8][128 bytes], all column blocks of a group before the next group. The head dim must equal
// the width (columns past it are not zero-filled: they are the next head's); rows and box_rows are
// multiples of 8. Cached as encode_rows_map's maps; false as there.
bool encode_grouped_map(const void* base, uint64_t rows, int64_t row, int64_t head, int width, int heads_k,
                        int box_rows, CUtensorMap* map);

}  // namespace cuda
}  // namespace fa
