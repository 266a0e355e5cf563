// Value-only soft-DTW forward with skewed lanes: the K cells of a lane's step are independent.
//
// forward_pair.cuh gives lane L row t - L at step t: the K cells of its step lie on one row, each needs
// the value its left neighbour computed in the same step, and a step is a chain of K dependent soft-mins
// (~75 cycles each: min, ex2, add, lg2, add). Here column k of lane L works on row t - (L K + k), so every
// cell of step t lies on one anti-diagonal (i + j = t + c CW for chunk c) and needs only values of the two
// steps before: up = its own column's last value, left = the column on its left one step ago, diag = what
// was that column's left one step ago. The K soft-mins of a step are independent and their latencies
// overlap; the one dependent link left per step is the shuffle from the lane on the left.
//
// The price is the ramp: a pass takes n + min(CW, columns left) - 1 steps instead of n + NL - 1, and the
// x row (window bounds) of each column moves along a K-deep shift register of the lane. That pays off where
// a step's latency bounds the time (few pairs: chained plans and W > 1, benchmarks/OPTIMIZATION_LOG.md),
// not where many warps per SM already hide it. memory="none" only: nothing is stored, so the backward's
// table layout (forward_pair.cuh) is untouched; values agree bit for bit with forward_kernel's value-only
// mode (the same operations on the same operands, cell by cell).
//
// Kernels: forward_skew_kernel (a group of W warps walks the pair's chunks in turn, grid as forward_kernel)
// and forward_skew_chain_kernel (one block per (pair, chunk), the chunks handing their last column over
// through L2 flags as in forward_chain_kernel).
#include "common.cuh"

namespace sdtw {

template <typename T>
struct SkewArgs {
  const T* x;             // (B, N, DT), fused costs
  const T* y;             // (B, M, DT), fused costs
  const T* C;             // (B, N, M), precomputed cost
  const long long* xlen;  // (B,)
  const long long* ylen;  // (B,)
  const int* window;      // (B, N, 2) column ranges [lo, hi), or unused
  T* value;               // (B,)
  T* bnd;                 // SEQ: (B, N); CHAIN: (B, nch, N): R of a chunk's last column, for the next chunk
  int* flags;             // CHAIN: (B, nch) rows of bnd published by each chunk (release / acquire)
  int N, M, nch;
};

template <typename T, int DT>
struct SkewRow {  // per-row inputs streamed 32 rows at a time per warp
  T x[DT];
  int lo, hi;
  T left;  // R[i, c CW - 1] from the previous chunk (lane 0 of warp 0)
};

template <typename T, int COST, int DT, int K, int W, bool WINDOW, bool HARD, int P, bool CHAIN>
__device__ __forceinline__ void forward_skew_pair(const SkewArgs<T>& a, const int b, const T scale, const T unit,
                                                  const T xs, T (*hand)[W], T* ring, const int c0) {
  constexpr int NL = 32 * W;
  constexpr int CW = NL * K;
  constexpr bool FUSED = COST != COST_PRECOMPUTED;
  const int lane = threadIdx.x & 31;
  const unsigned tid = (W == 1) ? (threadIdx.x & 31) + 32 * (threadIdx.x >> 5) : threadIdx.x;
  const unsigned nthreads = blockDim.x;
  const int wg = (W == 1) ? 0 : int(threadIdx.x >> 5);
  const int L = wg * 32 + lane;
  const T BIG = Num<T>::big();
  const int N = a.N, M = a.M;
  const int n = int(a.xlen[b]), m = int(a.ylen[b]);
  const int nch_b = (m + CW - 1) / CW;
  const T* xb = a.x + size_t(b) * N * DT;
  const T* yb = a.y + size_t(b) * M * DT;
  const T* Cb = a.C + size_t(b) * N * M;
  const int* wb = a.window + size_t(b) * N * 2;
  T* my_ring = ring + size_t(tid) * K;

  const int c_lo = CHAIN ? c0 : 0, c_hi = CHAIN ? c0 + 1 : nch_b;
  for (int c = c_lo; c < c_hi; ++c) {
    const T* bnd_in = CHAIN ? a.bnd + (size_t(b) * a.nch + c - 1) * N : a.bnd + size_t(b) * N;
    T* bnd_out = CHAIN ? a.bnd + (size_t(b) * a.nch + c) * N : a.bnd + size_t(b) * N;
    const int* flag_in = a.flags + size_t(b) * a.nch + c - 1;
    int* flag_out = a.flags + size_t(b) * a.nch + c;
    const bool waits = CHAIN && c > 0 && wg == 0;
    const int j0 = c * CW + L * K;
    // Column CW - 1 of the chunk (or the pair's last column) finishes row n - 1 at step n - 1 + its index.
    const int steps = n + min(CW, m - c * CW) - 1;
    T yv[K][DT];
    if (FUSED) {
#pragma unroll
      for (int k = 0; k < K; ++k)
#pragma unroll
        for (int d = 0; d < DT; ++d) yv[k][d] = (j0 + k < M) ? yb[size_t(j0 + k) * DT + d] * xs : T(0);
    }
    T r[K];    // R of each column at the row it processed last (BIG before its first row)
    T lft[K];  // the left value each column used one step ago: its diagonal now
    T xk[K][DT];
    int lok[K], hik[K];
#pragma unroll
    for (int k = 0; k < K; ++k) {
      r[k] = BIG;
      lft[k] = BIG;
      lok[k] = hik[k] = 0;
#pragma unroll
      for (int d = 0; d < DT; ++d) xk[k][d] = T(0);
    }
    if (W > 1) {
      if (lane == 31) { hand[0][wg] = BIG; hand[1][wg] = BIG; }
      __syncthreads();
    }
    const bool owns_end = (c == nch_b - 1) && (j0 <= m - 1) && (m - 1 < j0 + K);
    const int t_end = n - 1 + (m - 1 - c * CW);  // the step at which R[n - 1, m - 1] is computed

    // Lane 0 of warp wg starts row t - 32 wg K at step t; its warp loads those rows 32 at a time.
    const int lead = 32 * wg * K;
    auto load_row = [&](const int row, SkewRow<T, DT>& q) {
      const bool ok = row >= 0 && row < n;
#pragma unroll
      for (int d = 0; d < DT; ++d) q.x[d] = (FUSED && ok) ? xb[size_t(row) * DT + d] * xs : T(0);
      q.lo = (WINDOW && ok) ? wb[2 * row] : 0;
      q.hi = (WINDOW && ok) ? wb[2 * row + 1] : 0;
      q.left = (c > 0 && wg == 0 && ok) ? __ldcg(bnd_in + row) : BIG;
    };
    SkewRow<T, DT> cur, nxt;
    if (waits) wait_rows(flag_in, min(n, 64));
    load_row(lane - lead, cur);
    load_row(32 + lane - lead, nxt);

    // C ring (precomputed cost): step t's K cells (row t - L K - k, column j0 + k), P - 1 steps ahead.
    auto issue_c = [&](const int t) {
      if constexpr (!FUSED) {
        T* dst = my_ring + size_t(t % P) * nthreads * K;
#pragma unroll
        for (int k = 0; k < K; ++k) {
          const int row = t - L * K - k;
          const bool ok = row >= 0 && row < n && j0 + k < M;
          cp_async<int(sizeof(T))>(dst + k, ok ? Cb + size_t(row) * M + j0 + k : Cb, ok);
        }
        cp_async_commit();
      }
    };
    if (!FUSED)
      for (int t = 0; t < P - 1; ++t) issue_c(t);

    T last = BIG;  // r[K - 1] after the previous step: lane L + 1's left now
    for (int t = 0; t < steps; ++t) {
      if ((t & 31) == 0 && t > 0) {
        cur = nxt;
        if (waits) wait_rows(flag_in, min(n, t + 64));
        load_row(t + 32 + lane - lead, nxt);
      }
      // Row inputs: column k takes what column k - 1 had one step ago; column 0 what the lane on the left
      // had in its last column (lane 0: the next row of the warp's block).
      const int src = t & 31;
#pragma unroll
      for (int d = 0; d < DT; ++d) {
        const T in = __shfl_sync(FULL_MASK, cur.x[d], src);
        const T up = __shfl_up_sync(FULL_MASK, xk[K - 1][d], 1);
#pragma unroll
        for (int k = K - 1; k > 0; --k) xk[k][d] = xk[k - 1][d];
        xk[0][d] = (lane == 0) ? in : up;
      }
      if (WINDOW) {
        const int lin = __shfl_sync(FULL_MASK, cur.lo, src), hin = __shfl_sync(FULL_MASK, cur.hi, src);
        const int lup = __shfl_up_sync(FULL_MASK, lok[K - 1], 1), hup = __shfl_up_sync(FULL_MASK, hik[K - 1], 1);
#pragma unroll
        for (int k = K - 1; k > 0; --k) { lok[k] = lok[k - 1]; hik[k] = hik[k - 1]; }
        lok[0] = (lane == 0) ? lin : lup;
        hik[0] = (lane == 0) ? hin : hup;
      }
      T chunk_left = BIG;
      if (c > 0 && wg == 0) chunk_left = __shfl_sync(FULL_MASK, cur.left, src);
      T leftin = __shfl_up_sync(FULL_MASK, last, 1);
      T in0 = chunk_left;
      if (W > 1 && wg > 0) in0 = hand[(t + 1) & 1][wg - 1];
      if (lane == 0) leftin = in0;
      T cr[K];
      if constexpr (!FUSED) {
        issue_c(t + P - 1);
        cp_async_wait<P - 1>();
        const T* src_c = my_ring + size_t(t % P) * nthreads * K;
#pragma unroll
        for (int k = 0; k < K; ++k) cr[k] = src_c[k];
      }
      const int i0 = t - L * K;  // column 0's row; column k's is i0 - k
      // Straight-line code over the K cells (no branch per cell), so that their latencies overlap: every
      // cell is computed, and only those on a row of the pair keep their value.
      T v[K];
#pragma unroll
      for (int k = 0; k < K; ++k) {
        const T left = (k == 0) ? leftin : r[k - 1];
        T diag = lft[k];
        if (k == 0 && L == 0 && c == 0) diag = (i0 == 0) ? T(0) : BIG;  // R[-1, -1] = 0
        T cst;
        if (!FUSED) {
          cst = cr[k] * scale;
        } else {
          cst = T(0);
#pragma unroll
          for (int d = 0; d < DT; ++d) cst += cost_term<T, COST>(xk[k][d] - yv[k][d]);
        }
        if (HARD) {
          int choice;
          v[k] = hard_min3(diag, r[k], left, choice) + cst;
        } else {
          v[k] = Link<T>::value(diag, r[k], left) + cst;
        }
        if (WINDOW) {
          const int j = j0 + k;
          if (j < lok[k] || j >= hik[k]) v[k] = BIG;
        }
      }
#pragma unroll
      for (int k = K - 1; k >= 0; --k) {
        lft[k] = (k == 0) ? leftin : r[k - 1];
        const int i = i0 - k;
        if (i >= 0 && i < n) r[k] = v[k];
      }
      if (owns_end && t == t_end) {
#pragma unroll
        for (int k = 0; k < K; ++k)
          if (j0 + k == m - 1) a.value[b] = r[k] * unit;
      }
      last = r[K - 1];
      const int iK = i0 - (K - 1);  // the row the last column finished
      if (L == NL - 1 && c + 1 < nch_b && iK >= 0 && iK < n) {
        bnd_out[iK] = last;
        if (CHAIN && (((iK + 1) & 31) == 0 || iK == n - 1)) st_release(flag_out, iK + 1);
      }
      if (W > 1) {
        if (lane == 31) hand[t & 1][wg] = last;
        __syncthreads();
      }
    }
    if (!FUSED) cp_async_wait<0>();
    if (W > 1) __syncthreads(); else __syncwarp();  // bnd written by this chunk is read by the next
  }
}

// The kernels take gamma on the device, as forward_kernel: scale = 1 / (gamma ln 2) puts values in log2
// units; fused costs scale their inputs instead of each cell's cost.
template <typename T, int COST, int DT, int K, int W, bool WINDOW, bool CHAIN>
__device__ __forceinline__ void forward_skew_run(const SkewArgs<T>& a, const int b, const T* gamma, T (*hand)[W],
                                                 T* ring, const int c) {
  constexpr int THREADS = W == 1 ? 128 : 32 * W;
  constexpr int STAGE = COST == COST_PRECOMPUTED ? THREADS * K * int(sizeof(T)) : 0;
  constexpr int P = ring_depth(STAGE);
  const T g = *gamma;
  if (g == T(0)) {
    forward_skew_pair<T, COST, DT, K, W, WINDOW, true, P, CHAIN>(a, b, T(1), T(1), T(1), hand, ring, c);
  } else {
    const T scale = T(1) / (g * T(LN2));
    const T xs = COST == COST_SQEUCLIDEAN ? sqrt(scale) : scale;
    forward_skew_pair<T, COST, DT, K, W, WINDOW, false, P, CHAIN>(a, b, scale, g * T(LN2), xs, hand, ring, c);
  }
}

template <typename T, int COST, int K, int W>
struct SkewShared {
  static constexpr int THREADS = W == 1 ? 128 : 32 * W;
  static constexpr int STAGE = COST == COST_PRECOMPUTED ? THREADS * K * int(sizeof(T)) : 0;
  static constexpr int P = ring_depth(STAGE);
  static constexpr int RING = STAGE > 0 ? P * THREADS * K : 1;
};

// Grid: W == 1: ceil(B / 4) blocks of 4 warps, a pair per warp; W > 1: B blocks of W warps. bnd: (B, N).
template <typename T, int COST, int DT, int K, int W, bool WINDOW>
__global__ void __launch_bounds__(W == 1 ? 128 : 32 * W)
forward_skew_kernel(const T* __restrict__ x, const T* __restrict__ y, const T* __restrict__ C,
                    const T* __restrict__ gamma, const long long* __restrict__ xlen,
                    const long long* __restrict__ ylen, const int* __restrict__ window, T* __restrict__ value,
                    T* __restrict__ bnd, int B, int N, int M, int nch) {
  using S = SkewShared<T, COST, K, W>;
  __shared__ T hand[2][W];
  __shared__ __align__(16) T ring[S::RING];
  const int b = (W == 1) ? int(blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5)) : int(blockIdx.x);
  if (b >= B) return;
  const SkewArgs<T> a{x, y, C, xlen, ylen, window, value, bnd, nullptr, N, M, nch};
  forward_skew_run<T, COST, DT, K, W, WINDOW, false>(a, b, gamma, hand, ring, 0);
}

// One block per (pair, chunk), taken from a ticket in start order (forward_chain_kernel): a block only
// waits on blocks that started before it. sync: [ticket, flags (B, nch)] zeroed by the caller; bnd (B, nch, N).
template <typename T, int COST, int DT, int K, int W, bool WINDOW>
__global__ void __launch_bounds__(32 * W)
forward_skew_chain_kernel(const T* __restrict__ x, const T* __restrict__ y, const T* __restrict__ C,
                          const T* __restrict__ gamma, const long long* __restrict__ xlen,
                          const long long* __restrict__ ylen, const int* __restrict__ window,
                          T* __restrict__ value, T* bnd, int* sync, int B, int N, int M, int nch) {
  using S = SkewShared<T, COST, K, W>;
  __shared__ T hand[2][W];
  __shared__ __align__(16) T ring[S::RING];
  __shared__ int ticket;
  if (threadIdx.x == 0) ticket = atomicAdd(sync, 1);
  __syncthreads();
  const int b = ticket / nch, c = ticket % nch;
  if (b >= B) return;
  if (c * 32 * W * K >= int(ylen[b])) return;  // past this pair's columns: nobody waits on this chunk
  const SkewArgs<T> a{x, y, C, xlen, ylen, window, value, bnd, sync + 1, N, M, nch};
  forward_skew_run<T, COST, DT, K, W, WINDOW, true>(a, b, gamma, hand, ring, c);
}

}  // namespace sdtw
