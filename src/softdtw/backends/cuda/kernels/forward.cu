// Soft-DTW forward: R[i, j] = cost(i, j) + smin(R[i-1, j-1], R[i-1, j], R[i, j-1]) for a batch of pairs.
//
// One group of NL = 32 * W lanes per pair (see common.cuh for the skewed layout). Costs are either
// computed in the kernel from x `(B, N, DT)` and y `(B, M, DT)` (COST_SQEUCLIDEAN, COST_L1; y's K
// columns of a lane sit in registers, x's row is read each step) or read from C `(B, N, M)`.
//
// STORE: one word per cell for the backward (Link<T> in common.cuh: packed normalised weights for float,
// S for double) is written step-major, saved[b][c][t mod N][layout(L, k)], so that each step of a warp
// writes contiguous memory and the backward reads the same rows in reverse (research/gpu-kernels.md,
// lesson 1).
#include "common.cuh"

namespace sdtw {

template <typename T>
struct ForwardArgs {
  const T* x;               // (B, N, DT), fused costs
  const T* y;               // (B, M, DT), fused costs
  const T* C;               // (B, N, M), precomputed cost
  const long long* xlen;    // (B,)
  const long long* ylen;    // (B,)
  const int* window;        // (B, N, 2) column ranges [lo, hi), or unused
  T* value;                 // (B,)
  typename Link<T>::Word* saved;  // (B, nch, N, CW) step-major links, or unused
  T* bnd;                   // (B, N): R of the last column of the previous chunk (nch > 1)
  int N, M, nch;
};

template <typename T, int COST, int DT, int K, int W, bool WINDOW, bool STORE, bool HARD>
__device__ __forceinline__ void forward_pair(const ForwardArgs<T>& a, const int b, const T scale,
                                             const T unit, T (*hand)[W]) {
  constexpr int NL = 32 * W;
  constexpr int CW = NL * K;
  const int lane = threadIdx.x & 31;
  const int wg = (W == 1) ? 0 : int(threadIdx.x >> 5);
  const int L = wg * 32 + lane;
  const T BIG = Num<T>::big();
  const int N = a.N, M = a.M;
  const int n = int(a.xlen[b]), m = int(a.ylen[b]);
  const int nch_b = (m + CW - 1) / CW;
  const int steps = n + NL - 1;
  const T* xb = a.x + size_t(b) * N * DT;
  const T* yb = a.y + size_t(b) * M * DT;
  const T* Cb = a.C + size_t(b) * N * M;
  const int* wb = a.window + size_t(b) * N * 2;
  T* bnd = a.bnd + size_t(b) * N;

  for (int c = 0; c < nch_b; ++c) {
    const int j0 = c * CW + L * K;
    T yv[K][DT];
    if (COST != COST_PRECOMPUTED) {
#pragma unroll
      for (int k = 0; k < K; ++k)
#pragma unroll
        for (int d = 0; d < DT; ++d) yv[k][d] = (j0 + k < M) ? yb[size_t(j0 + k) * DT + d] : T(0);
    }
    T r[K];  // R of this lane's columns on the row it processed last
#pragma unroll
    for (int k = 0; k < K; ++k) r[k] = BIG;
    T last = BIG;      // r[K - 1], what lane L + 1 reads as its left neighbour
    T prevleft = BIG;  // left neighbour received one step ago = diagonal neighbour now
    if (W > 1) {
      if (lane == 31) { hand[0][wg] = BIG; hand[1][wg] = BIG; }
      __syncthreads();
    }
    using Word = typename Link<T>::Word;
    Word* sbase = STORE ? a.saved + (size_t(b) * a.nch + c) * size_t(N) * CW : nullptr;
    // Row data of the row this lane works on next, loaded one step ahead (software pipelining: the
    // loads are in flight during the current step's arithmetic).
    T xn[DT];
    T cn[K];
#pragma unroll
    for (int d = 0; d < DT; ++d) xn[d] = T(0);
#pragma unroll
    for (int k = 0; k < K; ++k) cn[k] = T(0);
    int lon = 0, hin = 0;
    auto fetch = [&](const int row) {
      if (row < 0 || row >= n) return;
      if (COST != COST_PRECOMPUTED) {
#pragma unroll
        for (int d = 0; d < DT; ++d) xn[d] = xb[size_t(row) * DT + d];
      } else {
#pragma unroll
        for (int k = 0; k < K; ++k) cn[k] = (j0 + k < M) ? Cb[size_t(row) * M + j0 + k] : T(0);
      }
      if (WINDOW) { lon = wb[2 * row]; hin = wb[2 * row + 1]; }
    };
    fetch(-L);
    int slot = 0;  // t mod N
    for (int t = 0; t < steps; ++t) {
      const int i = t - L;
      const bool live = (i >= 0) && (i < n);
      T leftin = __shfl_up_sync(FULL_MASK, last, 1);
      if (lane == 0) {
        if (W > 1 && wg > 0) leftin = hand[(t + 1) & 1][wg - 1];  // lane 31 of the warp on the left, step t - 1
        else if (c > 0) leftin = live ? bnd[i] : BIG;             // previous chunk's last column
        else leftin = BIG;                                        // R[i, -1] border
      }
      T diag = prevleft;
      if (L == 0 && c == 0) diag = (i == 0) ? T(0) : BIG;  // R[-1, -1] = 0
      prevleft = leftin;
      T xr[DT];
      T cr[K];
#pragma unroll
      for (int d = 0; d < DT; ++d) xr[d] = xn[d];
#pragma unroll
      for (int k = 0; k < K; ++k) cr[k] = cn[k];
      const int lo = lon, hi = hin;
      fetch(i + 1);
      if (live) {
        T left = leftin;
        Word sv[K];
#pragma unroll
        for (int k = 0; k < K; ++k) {
          T cst;
          if (COST == COST_PRECOMPUTED) {
            cst = cr[k];
          } else {
            cst = T(0);
#pragma unroll
            for (int d = 0; d < DT; ++d) cst += cost_term<T, COST>(xr[d] - yv[k][d]);
          }
          const T up = r[k];
          Word w = Word(0);
          T v;
          if (HARD) {
            int choice;
            v = hard_min3(diag, up, left, choice) + cst;
            w = Link<T>::hard(choice);
          } else if (STORE) {
            v = Link<T>::soft(diag, up, left, w) + cst * scale;
          } else {
            v = soft_min3(diag, up, left) + cst * scale;
          }
          if (WINDOW) {
            const int j = j0 + k;
            if (j < lo || j >= hi) v = BIG;  // outside the band: unreachable
          }
          sv[k] = w;
          diag = up;
          left = v;
          r[k] = v;
        }
        last = r[K - 1];
        if (STORE) store_step<Word, K>(sbase + size_t(slot) * CW, L, NL, sv);
        if (L == NL - 1 && c + 1 < nch_b) bnd[i] = last;
        if (i == n - 1 && c == nch_b - 1) {
#pragma unroll
          for (int k = 0; k < K; ++k)
            if (j0 + k == m - 1) a.value[b] = r[k] * unit;
        }
      }
      if (++slot == N) slot = 0;
      if (W > 1) {
        if (lane == 31) hand[t & 1][wg] = last;
        __syncthreads();
      }
    }
    group_sync<W>();  // bnd written by this chunk is read by the next
  }
}

// Grid: W == 1: ceil(B / 4) blocks of 4 warps, a pair per warp; W > 1: B blocks of W warps.
// Register cap: one-warp pairs keep >= 20 (float) / 16 (double) warps per SM, which the MUFU pipe needs
// (research/gpu-kernels.md: occupancy scan); without it ptxas picked 96 registers and double spilled.
template <typename T, int COST, int DT, int K, int W, bool WINDOW, bool STORE>
__global__ void __launch_bounds__(W == 1 ? 128 : 32 * W, W == 1 ? (sizeof(T) == 4 ? 5 : 4) : (W < 16 ? 16 / W : 1))
forward_kernel(const T* __restrict__ x, const T* __restrict__ y, const T* __restrict__ C,
               const T* __restrict__ gamma, const long long* __restrict__ xlen,
               const long long* __restrict__ ylen, const int* __restrict__ window, T* __restrict__ value,
               typename Link<T>::Word* __restrict__ saved, T* __restrict__ bnd, int B, int N, int M, int nch) {
  __shared__ T hand[2][W];
  const int b = (W == 1) ? int(blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5)) : int(blockIdx.x);
  if (b >= B) return;  // only the last block of a W == 1 grid; W > 1 grids have exactly B blocks
  const ForwardArgs<T> a{x, y, C, xlen, ylen, window, value, saved, bnd, N, M, nch};
  // gamma is read on the device: no host sync, and CUDA-graph replays see its current value.
  const T g = *gamma;
  if (g == T(0)) forward_pair<T, COST, DT, K, W, WINDOW, STORE, true>(a, b, T(1), T(1), hand);
  else forward_pair<T, COST, DT, K, W, WINDOW, STORE, false>(a, b, T(1) / (g * T(LN2)), g * T(LN2), hand);
}

}  // namespace sdtw
