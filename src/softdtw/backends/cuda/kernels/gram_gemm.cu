// The "gram" cost's GEMMs where the problem is small (backends/cuda/__init__.py, own_gram_gemm; fastpath.cpp):
// one launch each way instead of the torch calls, whose host time was the step's cost at the sizes people train at
// (32 x 128², D = 64: issue 446-536 µs of host against 137 µs of GPU; benchmarks/OPTIMIZATION_LOG.md, "The gram
// cost's small GEMMs in one launch each").
//
// gram_xy_kernel: G = x·yᵀ (B, N, M) and the norms |x_i|, |y_j| (as norms_kernel, the same bits) in one launch;
//   it replaces norms_kernel + at::bmm.
// gram_grads_kernel: dx = 2 (rs x - E y), dy = 2 (cs y - Eᵀ x) in one launch (E = grad_b E_b, rs and cs its row and
//   column sums, which backward_kernel writes); it replaces two mul + baddbmm_ pairs.
//
// Plain SIMT tiles: 64 x 64 outputs per block of 256 threads, 4 x 4 per thread, k in steps of 16 through shared
// memory, the accumulation in the data dtype as cuBLAS's float32 GEMM (no TF32: these sizes gain nothing from it).
// Each output's sum runs in k's order, so results are the same bits on every run and every path.
#include "norms.cuh"

namespace sdtw {

constexpr int GG_TILE = 64;     // output tile edge
constexpr int GG_K = 16;        // k per shared-memory stage
constexpr int GG_THREADS = 256; // 16 x 16 threads, 4 x 4 outputs each

// acc[a][c] += sum over k in [0, K) of A(r0 + ty + 16 a, k) · Bm(s0 + tx + 16 c, k), where A(r, k) = A[r ar + k ak]
// and Bm(s, k) = Bm[s bs + k bk]; rows past R, columns past S and k past K count as 0. Loads run along whichever
// index is contiguous (ak == 1: along k; else along r), so each warp reads whole segments.
template <typename T>
__device__ __forceinline__ void gg_tile(const T* __restrict__ A, long long ar, long long ak,
                                        const T* __restrict__ Bm, long long bs, long long bk, int R, int S, int K,
                                        int r0, int s0, T (&acc)[4][4], T (*As)[GG_TILE + 1],
                                        T (*Bs)[GG_TILE + 1]) {
  const int t = threadIdx.x, tx = t & 15, ty = t >> 4;
  for (int k0 = 0; k0 < K; k0 += GG_K) {
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      const int ra = ak == 1 ? (t >> 4) + 16 * q : t & 63, ka = ak == 1 ? t & 15 : (t >> 6) + 4 * q;
      const int sb = bk == 1 ? (t >> 4) + 16 * q : t & 63, kb = bk == 1 ? t & 15 : (t >> 6) + 4 * q;
      const int gr = r0 + ra, gs = s0 + sb, gka = k0 + ka, gkb = k0 + kb;
      As[ka][ra] = (gr < R && gka < K) ? A[gr * ar + gka * ak] : T(0);
      Bs[kb][sb] = (gs < S && gkb < K) ? Bm[gs * bs + gkb * bk] : T(0);
    }
    __syncthreads();
#pragma unroll
    for (int k = 0; k < GG_K; ++k) {
      T a[4], b[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        a[i] = As[k][ty + 16 * i];
        b[i] = Bs[k][tx + 16 * i];
      }
#pragma unroll
      for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int c = 0; c < 4; ++c) acc[i][c] = fma(a[i], b[c], acc[i][c]);
    }
    __syncthreads();
  }
}

// Grid: tiles blocks of G (pair, row tile, column tile), then ceil(B (N + M) / 256) blocks of norms, one thread per
// row: xn (B, N) = |x_i|, yn (B, M) = |y_j| by norms_kernel's norm_of_row (the same bits).
template <typename T>
__global__ void __launch_bounds__(GG_THREADS) gram_xy_kernel(const T* __restrict__ x, const T* __restrict__ y,
                                                             int B, int N, int M, int D, T* __restrict__ G,
                                                             T* __restrict__ xn, T* __restrict__ yn, int tiles) {
  __shared__ T As[GG_K][GG_TILE + 1], Bs[GG_K][GG_TILE + 1];
  if (int(blockIdx.x) >= tiles) {
    norm_of_row(x, (long long)B * N, y, (long long)B * M, D, xn, yn,
                (long long)(blockIdx.x - tiles) * GG_THREADS + threadIdx.x);
    return;
  }
  const int ti = (N + GG_TILE - 1) / GG_TILE, tj = (M + GG_TILE - 1) / GG_TILE;
  int blk = blockIdx.x;
  const int b = blk / (ti * tj);
  blk %= ti * tj;
  const int r0 = (blk / tj) * GG_TILE, s0 = (blk % tj) * GG_TILE;
  T acc[4][4];
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int c = 0; c < 4; ++c) acc[i][c] = T(0);
  gg_tile(x + (long long)b * N * D, D, 1, y + (long long)b * M * D, D, 1, N, M, D, r0, s0, acc, As, Bs);
  T* Gb = G + (long long)b * N * M;
  const int tx = threadIdx.x & 15, ty = threadIdx.x >> 4;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int r = r0 + ty + 16 * i;
    if (r >= N) continue;
#pragma unroll
    for (int c = 0; c < 4; ++c) {
      const int s = s0 + tx + 16 * c;
      if (s < M) Gb[(long long)r * M + s] = acc[i][c];
    }
  }
}

// Grid: tiles_x blocks of dx (pair, row tile of N, tile of D; 0 when dx is not wanted), then those of dy (pair, row
// tile of M, tile of D; none when dy is null). dx[b, i] = 2 (rs[b, i] x[b, i]) - 2 sum_j E[b, i, j] y[b, j],
// dy[b, j] = 2 (cs[b, j] y[b, j]) - 2 sum_i E[b, i, j] x[b, i]: rows past a pair's lengths have E, rs, cs zero.
template <typename T>
__global__ void __launch_bounds__(GG_THREADS)
    gram_grads_kernel(const T* __restrict__ E, const T* __restrict__ x, const T* __restrict__ y,
                      const T* __restrict__ rs, const T* __restrict__ cs, int B, int N, int M, int D,
                      T* __restrict__ dx, T* __restrict__ dy, int tiles_x) {
  __shared__ T As[GG_K][GG_TILE + 1], Bs[GG_K][GG_TILE + 1];
  int blk = blockIdx.x;
  const bool isx = blk < tiles_x;
  if (!isx) blk -= tiles_x;
  const int R = isx ? N : M, tr = (R + GG_TILE - 1) / GG_TILE, td = (D + GG_TILE - 1) / GG_TILE;
  const int b = blk / (tr * td);
  blk %= tr * td;
  const int r0 = (blk / td) * GG_TILE, s0 = (blk % td) * GG_TILE;
  const T* Eb = E + (long long)b * N * M;
  const T* xb = x + (long long)b * N * D;
  const T* yb = y + (long long)b * M * D;
  T acc[4][4];
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int c = 0; c < 4; ++c) acc[i][c] = T(0);
  // dx: E (N, M) by rows, times y (M, D); dy: Eᵀ, E by columns, times x (N, D).
  if (isx) {
    gg_tile(Eb, M, 1, yb, 1, D, N, D, M, r0, s0, acc, As, Bs);
  } else {
    gg_tile(Eb, 1, M, xb, 1, D, M, D, N, r0, s0, acc, As, Bs);
  }
  const T* base = isx ? xb : yb;
  const T* sc = isx ? rs + (long long)b * N : cs + (long long)b * M;
  T* out = (isx ? dx + (long long)b * N * D : dy + (long long)b * M * D);
  const int tx = threadIdx.x & 15, ty = threadIdx.x >> 4;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int r = r0 + ty + 16 * i;
    if (r >= R) continue;
    const T w = sc[r];
#pragma unroll
    for (int c = 0; c < 4; ++c) {
      const int s = s0 + tx + 16 * c;
      if (s < D) out[(long long)r * D + s] = fma(T(-2), acc[i][c], T(2) * (w * base[(long long)r * D + s]));
    }
  }
}

}  // namespace sdtw
