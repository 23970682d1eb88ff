// fa_bwd_cuda / fa_bwd_workspace_size / fa_cuda_backward_available: argument checks, workspace,
// the preprocess kernel (D = rowsum(dO * O), lse * log2(e), zeroed dQ accumulator), dispatch to the
// instantiation whose head-dim tile width is the smallest compiled one >= head_dim (pad columns
// are zero-filled on load and never written), and the dQ convert kernel.
//
// Workspace (bytes; each part rounded up to 256):
//   lse2, dsum: 2 * 4 * B * H * round_up(Nq, 128)       always
//   dq_acc:     4 * B * H * round_up(Nq, 128) * W         atomic (non-deterministic) mode only
//               (W: the head-dim tile width the kernel runs, 64 / 128 / 256; placement: DqLayout)
// (0 bytes when B, H or Nq is 0).
// Taken from the caller's p->workspace when given, else cudaMallocAsync / cudaFreeAsync on the
// same stream (stream-ordered: no synchronisation).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <math.h>

#include <cmath>
#include <cstdlib>

#include <string>
#include <type_traits>

#include "common/errors.h"
#include "cuda/api_checks.h"
#include "cuda/bwd_args.cuh"
#include "cuda/bwd_common.cuh"
#include "cuda/bwd_traits.cuh"
#include "cuda/tma_maps.h"
#include "fa_core.h"
#include "cuda/widths.cuh"

namespace fa {
namespace cuda {
namespace {

// Tile widths that scripts/generate_bwd_kernels.py writes files for (keep the lists in step).
constexpr int kBwdWidths16[] = {64, 128, 256};  // fp16 and bf16
constexpr int kBwdWidths32[] = {64, 128, 256};  // fp32

// Smallest compiled width >= d for this dtype, or 0.
int pick_bwd_width(fa_dtype dtype, int d) { return pick_width(kBwdWidths16, kBwdWidths32, dtype, d); }

template <typename T, int W>
bool try_run(int width, bool det, const BwdArgs& a, cudaStream_t s, fa_status* st) {
  constexpr bool kCompiled = width_built(W) && (std::is_same<T, float>::value ? listed(kBwdWidths32, W)
                                                                                : listed(kBwdWidths16, W));
  if constexpr (kCompiled) {
    if (width == W) {
      *st = det ? run_bwd_det<T, W>(a, s) : run_bwd_atomic<T, W>(a, s);
      return true;
    }
  }
  return false;
}

// The Hopper (wgmma) main kernel: fp16 / bf16, atomic dQ, where sm90_kernels_usable().
constexpr int kBwdWidthsSm90[] = {64, 128, 256};  // keep equal to WIDTHS_SM90 in generate_bwd_kernels.py

// Its warp-specialised sibling (TMA loads, dQ through shared memory and bulk reduce-adds, ordered
// in deterministic mode): dense calls at these tiles, where the tensor maps can be made.
// FA_BWD_SM90=cpasync keeps every call on the cp.async kernel (comparisons).
constexpr int kBwdWidthsSm90Ws[] = {64, 128, 256};  // keep equal to WIDTHS_SM90_WS in generate_bwd_kernels.py
bool sm90_bwd_ws_enabled() {
  static const bool on = !env_is("FA_BWD_SM90", "cpasync");
  return on;
}

template <typename T, int W>
bool try_sm90_ws(const BwdArgs& a, cudaStream_t s, fa_status* st) {
  constexpr bool kCompiled = width_built(W) && listed(kBwdWidthsSm90Ws, W) && !std::is_same<T, float>::value;
#if defined(FA_HAVE_SM90A)
  if constexpr (kCompiled) {
    if (a.cu_seqlens_q != nullptr || a.dq_acc == nullptr || !sm90_bwd_ws_enabled()) return false;
    BwdTmaArgs ta;
    ta.a = a;
    static const int overlap = env_flag("FA_BWD_WS_OVERLAP", -1);
    ta.overlap = overlap;
    constexpr int kRows = Sm90BwdWsTraits<T, W>::kBlockM, kKeys = Sm90BwdWsTraits<T, W>::kBlockN;
    if (!encode_rows_map(a.q, a.head_dim, a.seqlen_q, a.heads, a.batch, a.q_row, a.q_head, a.q_batch, kRows, &ta.tq) ||
        !encode_rows_map(a.dout, a.head_dim, a.seqlen_q, a.heads, a.batch, a.do_row, a.do_head, a.do_batch, kRows,
                         &ta.tdo) ||
        !encode_rows_map(a.k, a.head_dim, a.seqlen_k, a.heads_k, a.batch, a.k_row, a.k_head, a.k_batch, kKeys, &ta.tk) ||
        !encode_rows_map(a.v, a.head_dim, a.seqlen_k, a.heads_k, a.batch, a.v_row, a.v_head, a.v_batch, kKeys, &ta.tv))
      return false;
#if FA_BWD_WS_TMA_DKDV
    if (!Sm90BwdWsTraits<T, W>::kRowSplit &&
        (!encode_rows_map(a.dk, a.head_dim, a.seqlen_k, a.heads_k, a.batch, a.dk_row, a.dk_head, a.dk_batch, kKeys,
                          &ta.tdk) ||
         !encode_rows_map(a.dv, a.head_dim, a.seqlen_k, a.heads_k, a.batch, a.dv_row, a.dv_head, a.dv_batch, kKeys,
                          &ta.tdv)))
      return false;
#endif
    *st = run_bwd_sm90_ws<T, W>(ta, s);
    return true;
  }
#else
  (void)a, (void)s, (void)st, (void)kCompiled;
#endif
  return false;
}

template <typename T, int W>
bool try_sm90(int width, bool det, BwdArgs* a, bool run, cudaStream_t s, fa_status* st) {
  constexpr bool kCompiled = width_built(W) && listed(kBwdWidthsSm90, W) && !std::is_same<T, float>::value;
#if defined(FA_HAVE_SM90A)
  if constexpr (kCompiled) {
    if (width == W && (!det || a->dq_sem != nullptr) && sm90_kernels_usable()) {
      if (run) {
        if (!try_sm90_ws<T, W>(*a, s, st)) *st = run_bwd_sm90<T, W>(*a, s);
      } else {
        a->dql = sm90_dq_layout<Sm90BwdTraits<T, W>>();
      }
      return true;
    }
  }
#else
  (void)width, (void)det, (void)a, (void)run, (void)s, (void)st, (void)kCompiled;
#endif
  return false;
}
// Sets a->dql for the sm_90 kernel and returns true when it will run (run = false), or runs it.
template <typename T>
bool sm90_bwd(int width, bool det, BwdArgs* a, bool run, cudaStream_t s, fa_status* st) {
  return try_sm90<T, 64>(width, det, a, run, s, st) || try_sm90<T, 128>(width, det, a, run, s, st) ||
         try_sm90<T, 256>(width, det, a, run, s, st);
}

template <typename T>
fa_status dispatch(int width, bool det, const BwdArgs& a, cudaStream_t s) {
  fa_status st = FA_ERR_UNSUPPORTED;
  const bool ran = try_run<T, 64>(width, det, a, s, &st) || try_run<T, 128>(width, det, a, s, &st) ||
                   try_run<T, 256>(width, det, a, s, &st);
  if (!ran) return fa::fail(FA_ERR_UNSUPPORTED, "CUDA backward: no kernel for tile width " + std::to_string(width));
  return st;
}

fa_status cuda_err(cudaError_t err, const char* what) {
  return fa::fail(FA_ERR_CUDA, std::string(cudaGetErrorName(err)) + ": " + cudaGetErrorString(err) + " (" +
                                   what + ")");
}

size_t round256(size_t x) { return (x + 255) & ~static_cast<size_t>(255); }

// True when a deterministic backward of p runs on the Hopper kernel with ordered dQ sums (dq_sem):
// fp16 / bf16 at a head-dim tile that kernel has, on a device where it runs.
bool det_on_sm90(const fa_bwd_params* p) {
#if defined(FA_HAVE_SM90A)
  if (p->dtype != FA_FLOAT16 && p->dtype != FA_BFLOAT16) return false;
  const int w = pick_bwd_width(p->dtype, p->head_dim);
  const bool built = (w == 64 && width_built(64)) || (w == 128 && width_built(128)) || (w == 256 && width_built(256));
  return built && sm90_kernels_usable();
#else
  (void)p;
  return false;
#endif
}

struct WorkspaceLayout {
  size_t lse2 = 0, dsum = 0, dq_acc = 0, dq_sem = 0, total = 0;  // byte offsets / total
  bool has_acc = false, has_sem = false;
};
WorkspaceLayout workspace_layout(const fa_bwd_params* p) {
  WorkspaceLayout w;
  if (p->batch <= 0 || p->heads <= 0 || p->seqlen_q <= 0) return w;
  // Rows: dense [B, H, nq_pad]; packed [H, rows] with each sequence's padded stretch (bwd_ws_row0).
  const size_t rows_total = p->cu_seqlens_q != nullptr
      ? static_cast<size_t>(p->heads) * bwd_ws_rows_packed(p->total_q, p->batch)
      : static_cast<size_t>(p->batch) * p->heads *
            ((static_cast<size_t>(p->seqlen_q) + kBwdRowPad - 1) / kBwdRowPad * kBwdRowPad);
  const size_t row_bytes = round256(rows_total * 4);
  w.lse2 = 0;
  w.dsum = row_bytes;
  w.dq_acc = 2 * row_bytes;
  w.total = 2 * row_bytes;
  const bool sem = p->deterministic && p->head_dim > 0 && det_on_sm90(p);
  if ((!p->deterministic || sem) && p->head_dim > 0) {
    const int width = pick_bwd_width(p->dtype, p->head_dim);
    w.total += round256(rows_total * static_cast<size_t>(width > p->head_dim ? width : p->head_dim) * 4);
    w.has_acc = true;
  }
  if (sem) {  // one counter per 64 workspace rows (+2: packed stretches start anywhere)
    w.dq_sem = w.total;
    w.total += round256((rows_total / 64 + 2) * 4);
    w.has_sem = true;
  }
  return w;
}

// ---- preprocess: D, lse2, zeroed dQ accumulator ---------------------------------------------------
// 8 lanes per row (4 rows per warp), 16-byte loads; the loop trip count is uniform per warp so that
// the shuffles see all 32 lanes.
template <typename T>
__global__ void __launch_bounds__(256) bwd_preprocess_kernel(const BwdArgs a) {
  constexpr int E = sizeof(T);
  const int lane = threadIdx.x & 31;
  const int sub = lane & 7;
  const int64_t rows = static_cast<int64_t>(a.batch) * a.heads * a.nq_pad;
  const int64_t warp_global = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) >> 5;
  const int64_t warp_stride = (static_cast<int64_t>(gridDim.x) * blockDim.x) >> 5;
  const int chunks = a.head_dim * E / 16;
  for (int64_t r4 = warp_global * 4; r4 < rows; r4 += warp_stride * 4) {
    const int64_t r = r4 + (lane >> 3);
    const bool valid = r < rows;
    const int64_t bh = valid ? r / a.nq_pad : 0;
    const int i = valid ? static_cast<int>(r - bh * a.nq_pad) : a.nq_pad;
    const int h = static_cast<int>(bh % a.heads);
    const int b = static_cast<int>(bh / a.heads);
    const SeqInfo seq = bwd_seq(a, b);
    // This sequence's padded stretch: whole row blocks, pad rows lse2 = +inf, dsum = 0.
    const int nq_pad_b = a.cu_seqlens_q == nullptr ? a.nq_pad : (seq.nq + kBwdRowPad - 1) / kBwdRowPad * kBwdRowPad;
    const bool in_ws = valid && i < nq_pad_b;
    const bool real = in_ws && i < seq.nq;
    const int64_t qr = seq.q_row0 + i;
    float d = 0.f;
    if (real) {
      const char* po = static_cast<const char*>(a.o) + E * (b * a.o_batch + qr * a.o_row + h * a.o_head);
      const char* pd = static_cast<const char*>(a.dout) + E * (b * a.do_batch + qr * a.do_row + h * a.do_head);
      for (int c = sub; c < chunks; c += 8) {
        const uint4 x = *reinterpret_cast<const uint4*>(po + c * 16);
        const uint4 y = *reinterpret_cast<const uint4*>(pd + c * 16);
        const uint32_t xs[4] = {x.x, x.y, x.z, x.w}, ys[4] = {y.x, y.y, y.z, y.w};
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          if constexpr (E == 4) {
            d = fmaf(__uint_as_float(xs[j]), __uint_as_float(ys[j]), d);
          } else if constexpr (std::is_same<T, __half>::value) {
            const float2 fx = __half22float2(*reinterpret_cast<const __half2*>(&xs[j]));
            const float2 fy = __half22float2(*reinterpret_cast<const __half2*>(&ys[j]));
            d = fmaf(fx.x, fy.x, fmaf(fx.y, fy.y, d));
          } else {
            const float2 fx = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&xs[j]));
            const float2 fy = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&ys[j]));
            d = fmaf(fx.x, fy.x, fmaf(fx.y, fy.y, d));
          }
        }
      }
    }
    d += __shfl_xor_sync(0xffffffffu, d, 1);
    d += __shfl_xor_sync(0xffffffffu, d, 2);
    d += __shfl_xor_sync(0xffffffffu, d, 4);
    if (!in_ws) continue;
    const int64_t w = bwd_ws_base(a, b, h, seq) + i;
    const int64_t li = b * a.lse_batch + h * a.lse_head + qr;
    if (sub == 0) {
      a.dsum[w] = d;
      // fp16/bf16 kernels read lse * log2(e); the fp32 kernels lse itself (see softmax_grad_tile).
      const float lse = real ? a.lse[li] : INFINITY;
      a.lse2[w] = E == 4 ? lse : lse * 1.4426950408889634f;
      if (real && a.softmax_d != nullptr) a.softmax_d[li] = d;
    }
    if (a.dq_sem != nullptr && sub == 0 && (i & 63) == 0) a.dq_sem[w >> 6] = 0;  // its row block's counter
    if (a.dq_acc != nullptr) {  // this row's share of the head's nq_pad x width floats
      float4* z = reinterpret_cast<float4*>(a.dq_acc + w * a.dql.width);
      for (int c = sub; c < a.dql.width / 4; c += 8) z[c] = make_float4(0.f, 0.f, 0.f, 0.f);
    }
  }
}

// ---- convert: dq = scale * dq_acc in the input dtype, through dq's strides ---------------------------
template <typename T>
__global__ void __launch_bounds__(256) bwd_convert_dq_kernel(const BwdArgs a) {
  constexpr int E = sizeof(T);
  const int groups = a.head_dim / 8;  // 8 elements per thread and step
  const int64_t total = static_cast<int64_t>(a.batch) * a.heads * a.seqlen_q * groups;
  const float sc = a.scale;
  for (int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; idx < total;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int c = static_cast<int>(idx % groups);
    const int64_t row = idx / groups;  // (b * H + h) * Nq + i
    const int i = static_cast<int>(row % a.seqlen_q);
    const int64_t bh = row / a.seqlen_q;
    const int h = static_cast<int>(bh % a.heads);
    const int b = static_cast<int>(bh / a.heads);
    const SeqInfo seq = bwd_seq(a, b);
    if (i >= seq.nq) continue;
    const float* head = a.dq_acc + bwd_ws_base(a, b, h, seq) * a.dql.width;
    float4 x, y;
    if (a.dql.vec == 4) {  // eight columns: four float2 pieces at 16-byte steps
      const int64_t o = dq_acc_offset(a.dql, i, c * 8);
      const float2 p0 = *reinterpret_cast<const float2*>(head + o), p1 = *reinterpret_cast<const float2*>(head + o + 4);
      const float2 p2 = *reinterpret_cast<const float2*>(head + o + 8), p3 = *reinterpret_cast<const float2*>(head + o + 12);
      x = make_float4(p0.x, p0.y, p1.x, p1.y), y = make_float4(p2.x, p2.y, p3.x, p3.y);
    } else {  // eight contiguous columns
      const float4* src = reinterpret_cast<const float4*>(head + dq_acc_offset(a.dql, i, c * 8));
      x = src[0], y = src[1];
    }
    x.x *= sc, x.y *= sc, x.z *= sc, x.w *= sc;
    y.x *= sc, y.y *= sc, y.z *= sc, y.w *= sc;
    char* dst = static_cast<char*>(a.dq) + E * (b * a.dq_batch + (seq.q_row0 + i) * a.dq_row + h * a.dq_head + c * 8);
    if constexpr (E == 4) {
      reinterpret_cast<float4*>(dst)[0] = x;
      reinterpret_cast<float4*>(dst)[1] = y;
    } else {
      uint4 o;
      if constexpr (std::is_same<T, __half>::value) {
        __half2 h0 = __floats2half2_rn(x.x, x.y), h1 = __floats2half2_rn(x.z, x.w);
        __half2 h2 = __floats2half2_rn(y.x, y.y), h3 = __floats2half2_rn(y.z, y.w);
        o = make_uint4(*reinterpret_cast<uint32_t*>(&h0), *reinterpret_cast<uint32_t*>(&h1),
                       *reinterpret_cast<uint32_t*>(&h2), *reinterpret_cast<uint32_t*>(&h3));
      } else {
        __nv_bfloat162 h0 = __floats2bfloat162_rn(x.x, x.y), h1 = __floats2bfloat162_rn(x.z, x.w);
        __nv_bfloat162 h2 = __floats2bfloat162_rn(y.x, y.y), h3 = __floats2bfloat162_rn(y.z, y.w);
        o = make_uint4(*reinterpret_cast<uint32_t*>(&h0), *reinterpret_cast<uint32_t*>(&h1),
                       *reinterpret_cast<uint32_t*>(&h2), *reinterpret_cast<uint32_t*>(&h3));
      }
      *reinterpret_cast<uint4*>(dst) = o;
    }
  }
}

unsigned grid_for(int64_t work_items, int per_block) {
  int64_t blocks = (work_items + per_block - 1) / per_block;
  if (blocks > 65536) blocks = 65536;  // grid-stride loops cover the rest
  return static_cast<unsigned>(blocks < 1 ? 1 : blocks);
}

// The dQ accumulator placement of the configuration that runs for (T, width) (BwdConfig; the
// single-buffered fallback has the same warp grid, so the same placement).
template <typename T, int W>
bool try_layout(int width, DqLayout* L) {
  if (width != W) return false;
  *L = dq_layout_of<typename BwdConfig<T, W>::Traits>();
  return true;
}

template <typename T>
fa_status run_all(int width, bool det, BwdArgs a, cudaStream_t s) {
  if (!(try_layout<T, 64>(width, &a.dql) || try_layout<T, 128>(width, &a.dql) || try_layout<T, 256>(width, &a.dql)))
    return fa::fail(FA_ERR_UNSUPPORTED, "CUDA backward: no kernel for tile width " + std::to_string(width));
  fa_status st = FA_OK;
  const bool sm90 = sm90_bwd<T>(width, det, &a, false, s, &st);
  if (!sm90 || !det) a.dq_sem = nullptr;  // ordered dQ sums: the Hopper kernel in deterministic mode only
  if (det && !sm90) a.dq_acc = nullptr;   // the mma.sync deterministic path writes dQ itself
  if (a.seqlen_q > 0) {
    const int64_t rows = static_cast<int64_t>(a.batch) * a.heads * a.nq_pad;
    (void)cudaGetLastError();
    bwd_preprocess_kernel<T><<<grid_for(rows, 32), 256, 0, s>>>(a);
    const cudaError_t err = cudaGetLastError();
    if (err != cudaSuccess) return cuda_err(err, "bwd preprocess launch");
  }
  if (sm90)
    sm90_bwd<T>(width, det, &a, true, s, &st);
  else
    st = dispatch<T>(width, det, a, s);
  if (st != FA_OK) return st;
  if (a.dq_acc != nullptr && a.seqlen_q > 0) {
    const int64_t items = static_cast<int64_t>(a.batch) * a.heads * a.seqlen_q * (a.head_dim / 8);
    if (a.dq_acc != nullptr) {
      bwd_convert_dq_kernel<T><<<grid_for(items, 256), 256, 0, s>>>(a);
      const cudaError_t err = cudaGetLastError();
      if (err != cudaSuccess) return cuda_err(err, "bwd convert launch");
    }
  }
  return FA_OK;
}

}  // namespace
}  // namespace cuda
}  // namespace fa

extern "C" int fa_cuda_backward_available(void) { return 1; }

extern "C" size_t fa_bwd_workspace_size(const fa_bwd_params* p) {
  if (p == nullptr) return 0;
  return fa::cuda::workspace_layout(p).total;
}

extern "C" fa_status fa_bwd_cuda(const fa_bwd_params* p, void* stream) {
  using namespace fa::cuda;
  if (p == nullptr) return fa::fail(FA_ERR_INVALID, "fa_bwd_cuda: params is NULL");
  const int d = p->head_dim;
  const int width = pick_bwd_width(p->dtype, d);
  const fa_status bad = check_common_args("fa_bwd_cuda", "CUDA backward", p->dtype, p->batch, p->seqlen_q, p->seqlen_k,
                                          p->heads, p->heads_k, d, p->scale, width);
  if (bad != FA_OK) return bad;
  if (p->batch == 0 || p->heads == 0 || (p->seqlen_q == 0 && p->seqlen_k == 0)) return FA_OK;
  if (p->cu_seqlens_q != nullptr && p->cu_seqlens_k == nullptr)
    return fa::fail(FA_ERR_INVALID, "fa_bwd_cuda: packed sequences need cu_seqlens_q and cu_seqlens_k");
  if (p->softcap < 0.f || !std::isfinite(p->softcap))
    return fa::fail(FA_ERR_INVALID, "fa_bwd_cuda: softcap must be finite and >= 0");
  const bool need_q = p->seqlen_q > 0, need_k = p->seqlen_k > 0;
  if ((need_q && (p->q == nullptr || p->o == nullptr || p->dout == nullptr || p->dq == nullptr || p->lse == nullptr)) ||
      (need_k && (p->k == nullptr || p->v == nullptr || p->dk == nullptr || p->dv == nullptr)))
    return fa::fail(FA_ERR_INVALID,
                    "fa_bwd_cuda: dout, q, k, v, o, lse, dq, dk and dv must be device pointers, got NULL");

  const int elem = p->dtype == FA_FLOAT32 ? 4 : 2;
  const int vec = 16 / elem;
  const void* ptrs[] = {p->dout, p->q, p->k, p->v, p->o, p->dq, p->dk, p->dv};
  for (const void* x : ptrs)
    if (!aligned16(x))
      return fa::fail(FA_ERR_UNSUPPORTED, "CUDA backward needs dout, q, k, v, o, dq, dk and dv 16-byte aligned");
  const fa_strides* strs[] = {&p->do_str, &p->q_str, &p->k_str, &p->v_str, &p->o_str, &p->dq_str, &p->dk_str, &p->dv_str};
  for (const fa_strides* x : strs)
    if (!strides_ok(*x, vec))
      return fa::fail(FA_ERR_UNSUPPORTED, "CUDA backward needs batch/row/head strides that are multiples of " +
                                              std::to_string(vec) + " elements (16 bytes); contiguous tensors are");
  if (p->workspace != nullptr && (reinterpret_cast<uintptr_t>(p->workspace) & 255) != 0)
    return fa::fail(FA_ERR_UNSUPPORTED, "CUDA backward: workspace must be 256-byte aligned (cudaMalloc memory is)");

  BwdArgs a{};
  a.q = p->q, a.k = p->k, a.v = p->v, a.o = p->o, a.dout = p->dout;
  a.dq = p->dq, a.dk = p->dk, a.dv = p->dv;
  a.lse = p->lse;
  a.softmax_d = p->softmax_d;
  a.q_batch = p->q_str.batch, a.q_row = p->q_str.row, a.q_head = p->q_str.head;
  a.k_batch = p->k_str.batch, a.k_row = p->k_str.row, a.k_head = p->k_str.head;
  a.v_batch = p->v_str.batch, a.v_row = p->v_str.row, a.v_head = p->v_str.head;
  a.o_batch = p->o_str.batch, a.o_row = p->o_str.row, a.o_head = p->o_str.head;
  a.do_batch = p->do_str.batch, a.do_row = p->do_str.row, a.do_head = p->do_str.head;
  a.dq_batch = p->dq_str.batch, a.dq_row = p->dq_str.row, a.dq_head = p->dq_str.head;
  a.dk_batch = p->dk_str.batch, a.dk_row = p->dk_str.row, a.dk_head = p->dk_str.head;
  a.dv_batch = p->dv_str.batch, a.dv_row = p->dv_str.row, a.dv_head = p->dv_str.head;
  a.batch = p->batch, a.heads = p->heads, a.heads_k = p->heads_k;
  a.seqlen_q = p->seqlen_q, a.seqlen_k = p->seqlen_k;
  a.head_dim = d;
  a.group = p->heads / p->heads_k;
  a.nq_pad = (p->seqlen_q + kBwdRowPad - 1) / kBwdRowPad * kBwdRowPad;
  a.scale = p->scale;
  a.scale_log2 = p->scale * 1.4426950408889634f;
  kernel_window(p->causal, p->has_window, p->window_left, p->window_right, &a.window_left, &a.window_right);
  a.causal = a.window_right >= 0 ? 1 : 0;
  if (p->softcap > 0.f) {
    a.softcap = p->softcap;
    a.softcap_scale = p->scale / p->softcap;
    a.p_scale = 1.f;
    a.p_scale_log2 = 1.4426950408889634f;
  } else {
    a.p_scale = p->scale;
    a.p_scale_log2 = a.scale_log2;
  }
  const bool packed = p->cu_seqlens_q != nullptr;
  a.cu_seqlens_q = p->cu_seqlens_q;
  a.cu_seqlens_k = p->cu_seqlens_k;
  a.total_q = p->total_q;
  a.total_k = p->total_k;
  if (packed) {
    a.q_batch = a.k_batch = a.v_batch = a.o_batch = a.do_batch = a.dq_batch = a.dk_batch = a.dv_batch = 0;
    a.lse_batch = 0;
    a.lse_head = p->total_q;
    a.ws_batch = 0;
    a.ws_head = bwd_ws_rows_packed(p->total_q, p->batch);
  } else {
    a.lse_batch = int64_t(p->heads) * p->seqlen_q;
    a.lse_head = p->seqlen_q;
    a.ws_batch = int64_t(p->heads) * a.nq_pad;
    a.ws_head = a.nq_pad;
  }
  const bool det = p->deterministic != 0;

  cudaStream_t s = static_cast<cudaStream_t>(stream);
  const WorkspaceLayout ws = workspace_layout(p);
  void* base = p->workspace;
  bool owned = false;
  if (base == nullptr && ws.total > 0) {
    const cudaError_t err = cudaMallocAsync(&base, ws.total, s);
    if (err != cudaSuccess) return cuda_err(err, "cudaMallocAsync of the backward workspace");
    owned = true;
  }
  if (ws.total > 0) {
    char* w = static_cast<char*>(base);
    a.lse2 = reinterpret_cast<float*>(w + ws.lse2);
    a.dsum = reinterpret_cast<float*>(w + ws.dsum);
    a.dq_acc = ws.has_acc ? reinterpret_cast<float*>(w + ws.dq_acc) : nullptr;
    a.dq_sem = ws.has_sem ? reinterpret_cast<int*>(w + ws.dq_sem) : nullptr;
  }

  fa_status st;
  switch (p->dtype) {
    case FA_FLOAT16: st = run_all<__half>(width, det, a, s); break;
    case FA_BFLOAT16: st = run_all<__nv_bfloat16>(width, det, a, s); break;
    default: st = run_all<float>(width, det, a, s); break;
  }
  if (owned) {
    const cudaError_t err = cudaFreeAsync(base, s);
    if (err != cudaSuccess && st == FA_OK) st = cuda_err(err, "cudaFreeAsync of the backward workspace");
  }
  return st;
}
