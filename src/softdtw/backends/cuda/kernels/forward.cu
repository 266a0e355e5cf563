// Soft-DTW forward: R[i, j] = cost(i, j) + smin(R[i-1, j-1], R[i-1, j], R[i, j-1]) for a batch of pairs.
//
// One group of NL = 32 * W lanes per pair (see common.cuh for the skewed layout). Costs are either
// computed in the kernel from x `(B, N, DT)` and y `(B, M, DT)` (COST_SQEUCLIDEAN, COST_L1; y's K
// columns of a lane sit in registers) or read from C `(B, N, M)`.
//
// Nothing on a step's critical path waits for DRAM:
//   * per-row inputs (x row, window bounds, the previous chunk's boundary value) are loaded by each warp
//     32 rows at a time, one block ahead, and handed to lane 0 by a shuffle; the row then moves one lane
//     per step with the DP's own wavefront (__shfl_up_sync);
//   * per-cell inputs (precomputed C) stream through a cp.async ring, P - 1 steps ahead.
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

// The per-row inputs that travel along the lanes with the wavefront.
template <typename T, int DT>
struct FwdRow {
  T x[DT];
  int lo, hi;  // window columns [lo, hi)
  T left;      // R[i, c * CW - 1] from the previous chunk (read by lane 0 of warp 0 only)
};

template <typename T, int COST, int DT, int K, int W, bool WINDOW, bool STORE, bool HARD, int P>
__device__ __forceinline__ void forward_pair(const ForwardArgs<T>& a, const int b, const T scale,
                                             const T unit, const T xs, T (*hand)[W], T* ring) {
  constexpr int NL = 32 * W;
  constexpr int CW = NL * K;
  constexpr bool FUSED = COST != COST_PRECOMPUTED;
  using Word = typename Link<T>::Word;
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
  T* my_ring = ring + size_t(threadIdx.x) * K;  // stage s at my_ring + s * blockDim.x * K

  for (int c = 0; c < nch_b; ++c) {
    const int j0 = c * CW + L * K;
    T yv[K][DT];
    if (FUSED) {
#pragma unroll
      for (int k = 0; k < K; ++k)
#pragma unroll
        for (int d = 0; d < DT; ++d) yv[k][d] = (j0 + k < M) ? yb[size_t(j0 + k) * DT + d] * xs : T(0);
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
    Word* sbase = STORE ? a.saved + (size_t(b) * a.nch + c) * size_t(N) * CW : nullptr;
    const bool owns_end = (c == nch_b - 1) && (j0 <= m - 1) && (m - 1 < j0 + K);  // holds R[n-1, m-1]

    // Row stream: lane l of warp wg holds row (32 * floor(t / 32) - 32 * wg + l) in `cur`, the next
    // block in `nxt`; lane 0 of the warp needs row t - 32 * wg at step t.
    auto load_row = [&](const int row, FwdRow<T, DT>& q) {
      const bool ok = row >= 0 && row < n;
#pragma unroll
      for (int d = 0; d < DT; ++d) q.x[d] = (FUSED && ok) ? xb[size_t(row) * DT + d] * xs : T(0);
      q.lo = (WINDOW && ok) ? wb[2 * row] : 0;
      q.hi = (WINDOW && ok) ? wb[2 * row + 1] : 0;
      q.left = (c > 0 && wg == 0 && ok) ? bnd[row] : BIG;
    };
    FwdRow<T, DT> cur, nxt, mine;  // mine: the row this lane works on now
    load_row(-32 * wg + lane, cur);
    load_row(32 - 32 * wg + lane, nxt);
#pragma unroll
    for (int d = 0; d < DT; ++d) mine.x[d] = T(0);
    mine.lo = mine.hi = 0;

    // C ring (precomputed cost): step t's K values of row t - L, issued P - 1 steps ahead.
    auto issue_c = [&](const int t) {
      if (FUSED) return;
      const int row = t - L;
      const bool ok = row >= 0 && row < n;
      T* dst = my_ring + size_t(t % P) * blockDim.x * K;
#pragma unroll
      for (int k = 0; k < K; ++k)
        cp_async<int(sizeof(T))>(dst + k, ok && j0 + k < M ? Cb + size_t(row) * M + j0 + k : Cb, ok && j0 + k < M);
      cp_async_commit();
    };
    if (!FUSED)
      for (int t = 0; t < P - 1; ++t) issue_c(t);

    int slot = 0;  // t mod N
    for (int t = 0; t < steps; ++t) {
      const int i = t - L;
      const bool live = (i >= 0) && (i < n);
      if ((t & 31) == 0 && t > 0) {
        cur = nxt;
        load_row(t + 32 - 32 * wg + lane, nxt);
      }
      // Move the row inputs one lane along; lane 0 takes the next row from the warp's block.
      const int src = t & 31;
#pragma unroll
      for (int d = 0; d < DT; ++d) {
        const T in = __shfl_sync(FULL_MASK, cur.x[d], src);
        const T up = __shfl_up_sync(FULL_MASK, mine.x[d], 1);
        mine.x[d] = (lane == 0) ? in : up;
      }
      if (WINDOW) {
        const int lin = __shfl_sync(FULL_MASK, cur.lo, src), hin = __shfl_sync(FULL_MASK, cur.hi, src);
        const int lup = __shfl_up_sync(FULL_MASK, mine.lo, 1), hup = __shfl_up_sync(FULL_MASK, mine.hi, 1);
        mine.lo = (lane == 0) ? lin : lup;
        mine.hi = (lane == 0) ? hin : hup;
      }
      T chunk_left = BIG;
      if (c > 0 && wg == 0) chunk_left = __shfl_sync(FULL_MASK, cur.left, src);  // warp-uniform
      T leftin = __shfl_up_sync(FULL_MASK, last, 1);
      // Lane 0 takes its left neighbour from lane 31 of the warp on the left (one step ago, through shared
      // memory; every lane reads the broadcast and selects, no divergent branch), from the previous
      // chunk's last column, or the border.
      T in0 = chunk_left;
      if (W > 1 && wg > 0) in0 = hand[(t + 1) & 1][wg - 1];  // warp-uniform
      if (lane == 0) leftin = in0;
      T diag = prevleft;
      if (L == 0 && c == 0) diag = (i == 0) ? T(0) : BIG;  // R[-1, -1] = 0
      prevleft = leftin;
      T cr[K];
      if (!FUSED) {
        issue_c(t + P - 1);
        cp_async_wait<P - 1>();
        const T* src_c = my_ring + size_t(t % P) * blockDim.x * K;
#pragma unroll
        for (int k = 0; k < K; ++k) cr[k] = src_c[k];
      }
      if (live) {
        T left = leftin;
        Word sv[K];
#pragma unroll
        for (int k = 0; k < K; ++k) {
          T cst;  // in log2 units: x and y came pre-scaled, C is scaled here
          if (!FUSED) {
            cst = cr[k] * scale;
          } else {
            cst = T(0);
#pragma unroll
            for (int d = 0; d < DT; ++d) cst += cost_term<T, COST>(mine.x[d] - yv[k][d]);
          }
          const T up = r[k];
          Word w = Word(0);
          T v;
          if (HARD) {
            int choice;
            v = hard_min3(diag, up, left, choice) + cst;
            w = Link<T>::hard(choice);
          } else if (STORE) {
            v = Link<T>::soft(diag, up, left, w) + cst;
          } else {
            v = Link<T>::value(diag, up, left) + cst;
          }
          if (WINDOW) {
            const int j = j0 + k;
            if (j < mine.lo || j >= mine.hi) v = BIG;  // outside the band: unreachable
          }
          sv[k] = w;
          diag = up;
          left = v;
          r[k] = v;
        }
        last = r[K - 1];
        if (STORE) store_step<Word, K>(sbase + size_t(slot) * CW, L, NL, sv);
        if (L == NL - 1 && c + 1 < nch_b) bnd[i] = last;
        if (i == n - 1 && owns_end) {
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
    if (!FUSED) cp_async_wait<0>();
    group_sync<W>();  // bnd written by this chunk is read by the next
  }
}

// Grid: W == 1: ceil(B / 4) blocks of 4 warps, a pair per warp; W > 1: B blocks of W warps.
// Register cap: one-warp pairs keep >= 20 (float, D <= 4) / 16 warps per SM, which the MUFU pipe needs
// (research/gpu-kernels.md: occupancy scan); without it ptxas picked 96 registers and double spilled.
template <typename T, int COST, int DT, int K, int W, bool WINDOW, bool STORE>
__global__ void __launch_bounds__(W == 1 ? 128 : 32 * W, W == 1 ? (sizeof(T) == 4 && DT <= 4 ? 5 : 4) : (W < 16 ? 16 / W : 1))
forward_kernel(const T* __restrict__ x, const T* __restrict__ y, const T* __restrict__ C,
               const T* __restrict__ gamma, const long long* __restrict__ xlen,
               const long long* __restrict__ ylen, const int* __restrict__ window, T* __restrict__ value,
               typename Link<T>::Word* __restrict__ saved, T* __restrict__ bnd, int B, int N, int M, int nch) {
  constexpr int THREADS = W == 1 ? 128 : 32 * W;
  constexpr int STAGE = COST == COST_PRECOMPUTED ? THREADS * K * int(sizeof(T)) : 0;
  constexpr int P = ring_depth(STAGE);
  static_assert(P * STAGE <= 40960, "ring too large: the planner limits K for this W (launch.k_max)");
  __shared__ T hand[2][W];
  __shared__ __align__(16) T ring[STAGE > 0 ? P * THREADS * K : 1];
  const int b = (W == 1) ? int(blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5)) : int(blockIdx.x);
  if (b >= B) return;  // only the last block of a W == 1 grid; W > 1 grids have exactly B blocks
  const ForwardArgs<T> a{x, y, C, xlen, ylen, window, value, saved, bnd, N, M, nch};
  // gamma is read on the device: no host sync, and CUDA-graph replays see its current value.
  // Soft: values in log2 units, scale = 1 / (gamma ln 2). Fused costs scale their inputs instead of each
  // cell's cost (one multiply per loaded value, none per cell): by sqrt(scale) for the squared
  // Euclidean cost, by scale for L1.
  const T g = *gamma;
  if (g == T(0)) {
    forward_pair<T, COST, DT, K, W, WINDOW, STORE, true, P>(a, b, T(1), T(1), T(1), hand, ring);
  } else {
    const T scale = T(1) / (g * T(LN2));
    const T xs = COST == COST_SQEUCLIDEAN ? sqrt(scale) : scale;
    forward_pair<T, COST, DT, K, W, WINDOW, STORE, false, P>(a, b, scale, g * T(LN2), xs, hand, ring);
  }
}

}  // namespace sdtw
