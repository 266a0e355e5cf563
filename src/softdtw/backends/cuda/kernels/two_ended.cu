// Few long pairs from both ends (backends/cuda/two_ended.py): the two halves' inputs, the value from their last rows,
// and for a gradient the open end's seeds and the halves' dx, dy mapped back.
//
// A chained value-only pass takes about N + nch (32 W + lag) lane steps: one pair's critical path, where few long
// pairs leave most of the GPU idle. Every monotone path crosses from row h - 1 to row h exactly once, down (column j
// to j) or diagonally (j to j + 1), so
//     value = smin_j ( R[h - 1, j] + smin(S[h, j], S[h, j + 1]) )
// with R the forward DP over rows [0, h) and S[i, j] the soft-DTW of the suffixes x[i:], y[j:] (cell (i, j)'s cost
// included): the forward DP of rows [h, n) reversed against y reversed, whose last row is S[h, :] reversed. The two
// halves run as one chained launch of 2B pairs of about N / 2 rows (forward_chain_kernel with the open end, which
// keeps R of each pair's last row in float64), so a pair's path loses N / 2 steps.
#include "common.cuh"

namespace sdtw {

// A pair's length as the kernels read it, inside [1, cap].
__device__ __forceinline__ int length_in(const long long* len, int b, int cap) {
  return int(min(max(len[b], 1LL), (long long)cap));
}

// The 2B pairs of the launch: pair b < B is rows [0, h_b) of x[b] against y[b]; pair B + b is rows [h_b, n_b) of x[b]
// reversed against y[b][:m_b] reversed; h_b = ceil(n_b / 2). x2 (2B, H, DT) with H = ceil(N / 2), y2 (2B, M, DT),
// lengths xl2, yl2 (2B,). A one-row pair's bottom half is one dummy row: two_ended_value_kernel does not read it.
// Rows and columns past a pair's length are copies nobody reads. One thread per (pair of the 2B, index < max(H, M)).
template <typename T>
__global__ void __launch_bounds__(256) two_ended_inputs_kernel(const T* __restrict__ x, const T* __restrict__ y,
                                                               const long long* __restrict__ xlen,
                                                               const long long* __restrict__ ylen, int B, int N,
                                                               int M, int DT, T* __restrict__ x2, T* __restrict__ y2,
                                                               long long* __restrict__ xl2,
                                                               long long* __restrict__ yl2) {
  const int H = (N + 1) / 2, span = max(H, M);
  const long long r = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (r >= 2LL * B * span) return;
  const int p = int(r / span), i = int(r % span);
  const int b = p % B;
  const bool bottom = p >= B;
  const int n = length_in(xlen, b, N), m = length_in(ylen, b, M);
  const int h = (n + 1) / 2;
  if (i == 0) {
    xl2[p] = bottom ? max(n - h, 1) : h;
    yl2[p] = m;
  }
  if (i < H) {
    const int src = bottom ? max(n - 1 - i, 0) : i;  // top: i < H <= N
    for (int d = 0; d < DT; ++d) x2[(size_t(p) * H + i) * DT + d] = x[(size_t(b) * N + src) * DT + d];
  }
  if (i < M) {
    const int src = bottom ? max(m - 1 - i, 0) : i;
    for (int d = 0; d < DT; ++d) y2[(size_t(p) * M + i) * DT + d] = y[(size_t(b) * M + src) * DT + d];
  }
}

constexpr int TWO_ENDED_THREADS = 256;
constexpr double TWO_ENDED_FAR = 1e300;  // S past column m - 1, R before column 0: no path

// S[h, j] from the bottom half's last row (reversed), +FAR past column m - 1.
__device__ __forceinline__ double bottom_at(const double* bot, int m, int j) {
  return j < m ? bot[m - 1 - j] : TWO_ENDED_FAR;
}

// The soft-min of two values in log2 units (common.cuh, soft_min2), their min for hard DTW.
template <bool HARD>
__device__ __forceinline__ double smin_or_min(double a, double b) {
  return HARD ? fmin(a, b) : soft_min2(a, b);
}

// The block's soft-min (EndAcc) of every thread's acc: each warp's merged, then the warps' by thread 0 through shared
// memory. The result is valid in thread 0 only.
template <typename Acc>
__device__ __forceinline__ Acc block_merge(Acc acc) {
  __shared__ double sm[TWO_ENDED_THREADS / 32];
  __shared__ typename Acc::S ss[TWO_ENDED_THREADS / 32];
  acc.warp_merge();
  const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
  if (lane == 0) {
    sm[w] = acc.m;
    ss[w] = acc.s;
  }
  __syncthreads();
  Acc all;
  if (threadIdx.x == 0)
    for (int q = 0; q < TWO_ENDED_THREADS / 32; ++q) all.merge(sm[q], ss[q]);
  return all;
}

// value[b] from end (2B, M): R of each half's last row, float64, in log2 units (natural for gamma = 0) as
// forward_chain_kernel's open end keeps them. One block of TWO_ENDED_THREADS per pair; the soft-min over j as
// EndAcc's running (min, sum), in float64.
template <typename T, bool HARD>
__device__ __forceinline__ void two_ended_fold(const double* __restrict__ top, const double* __restrict__ bot, int m,
                                               double unit, T* out) {
  using Acc = EndAcc<double, HARD>;
  Acc acc;
  for (int j = threadIdx.x; j < m; j += TWO_ENDED_THREADS)
    acc.add(top[j] + smin_or_min<HARD>(bottom_at(bot, m, j), bottom_at(bot, m, j + 1)), j);
  const Acc all = block_merge(acc);
  if (threadIdx.x == 0) *out = T(all.value() * unit);
}

template <typename T>
__global__ void __launch_bounds__(TWO_ENDED_THREADS) two_ended_value_kernel(const double* __restrict__ end,
                                                                            const T* __restrict__ gamma,
                                                                            const long long* __restrict__ xlen,
                                                                            const long long* __restrict__ ylen,
                                                                            int B, int N, int M,
                                                                            T* __restrict__ value) {
  const int b = blockIdx.x;
  const int n = length_in(xlen, b, N), m = length_in(ylen, b, M);
  const double* top = end + size_t(b) * M;
  const double* bot = end + size_t(B + b) * M;
  const T g = *gamma;
  const double unit = g == T(0) ? 1.0 : double(g) * LN2;
  if (n == 1) {  // the top half is the whole pair
    if (threadIdx.x == 0) value[b] = T(top[m - 1] * unit);
    return;
  }
  if (g == T(0)) {
    two_ended_fold<T, true>(top, bot, m, unit, value + b);
  } else {
    two_ended_fold<T, false>(top, bot, m, unit, value + b);
  }
}


// The gradient from both ends (fastpath.cpp, a two-ended plan). The open end's backward seeds each pair's last row with
// 2^(v - endr[j]) (hard: one-hot on endv's column; kernels/backward.cu), so seeds written as
//     top:    endr[j] = t_j = R[h - 1, j] + smin(S[h, j], S[h, j + 1])
//     bottom: endr[j'] = u_j = S[h, j] + smin(R[h - 1, j], R[h - 1, j - 1]),  j = m - 1 - j' (reversed)
//     both:   endv = (v, first argmin), v = smin_j t_j = smin_j u_j
// make it seed d value / d R[h - 1, j] and d value / d S[h, j]: every path through (h - 1, j) crosses down or
// diagonally, and 2^(v - t_j) is the share of the paths crossing from column j (2^(v - u_j) of those crossing into j).
// end: the forward's (2B, M) last rows then (2B, 2) end values, float64; seeds: the same layout, written here (the
// backward's endbuf); value[b] (B,) in natural units; ones (2B,): 1, the halves' grad in the backward (which runs
// unscaled: two_ended_grads_kernel scales by the call's grad, so the host needs no copies of grad). A one-row pair
// (no bottom half): the top seeds its last cell alone, the dummy bottom half nothing. Columns past m_b stay unseeded
// (+FAR).
template <typename T, bool HARD>
__device__ __forceinline__ void two_ended_seed_pair(const double* __restrict__ top, const double* __restrict__ bot,
                                                    double* __restrict__ st, double* __restrict__ sb,
                                                    double* __restrict__ vt, double* __restrict__ vb, int n, int m,
                                                    int M, double unit, T* out) {
  using Acc = EndAcc<double, HARD>;
  constexpr double FAR = TWO_ENDED_FAR;
  Acc acc;
  for (int j = threadIdx.x; j < M; j += TWO_ENDED_THREADS) {
    double t = FAR, u = FAR;
    if (n == 1) {
      t = j == m - 1 ? top[j] : FAR;
    } else if (j < m) {
      const double s0 = bottom_at(bot, m, j), s1 = bottom_at(bot, m, j + 1);
      const double r0 = top[j], r1 = j > 0 ? top[j - 1] : FAR;
      t = r0 + smin_or_min<HARD>(s0, s1);
      u = s0 + smin_or_min<HARD>(r0, r1);
      sb[m - 1 - j] = u;
    }
    if (j >= m || n == 1) sb[j] = FAR;  // (n > 1: columns past m - 1 of the reversed row)
    st[j] = t;
    if (j < m) acc.add(t, j);
  }
  const Acc all = block_merge(acc);
  if (threadIdx.x == 0) {
    const double v = all.value();
    vt[0] = v;
    vb[0] = n == 1 ? 0.0 : v;
    vt[1] = vb[1] = -1.0;
    if (HARD) {
      // One path: the top's first argmin column j, then down (S[h, j]) unless the diagonal (S[h, j + 1]) is
      // strictly smaller; the bottom's column reversed.
      const int j = int(all.s);
      vt[1] = double(j);
      if (n > 1) {
        const double s0 = bottom_at(bot, m, j), s1 = bottom_at(bot, m, j + 1);
        vb[1] = double(m - 1 - (s1 < s0 ? j + 1 : j));
      }
    }
    *out = T(v * unit);
  }
}

template <typename T>
__global__ void __launch_bounds__(TWO_ENDED_THREADS) two_ended_seed_kernel(const double* __restrict__ end,
                                                                           const T* __restrict__ gamma,
                                                                           const long long* __restrict__ xlen,
                                                                           const long long* __restrict__ ylen,
                                                                           int B, int N, int M,
                                                                           double* __restrict__ seeds,
                                                                           T* __restrict__ value,
                                                                           T* __restrict__ ones) {
  const int b = blockIdx.x;
  if (threadIdx.x == 0) ones[b] = ones[B + b] = T(1);
  const int n = length_in(xlen, b, N), m = length_in(ylen, b, M);
  const size_t B2 = 2 * size_t(B);
  const double* er = end;
  double* sr = seeds;
  double* sv = seeds + B2 * M;
  const T g = *gamma;
  const double unit = g == T(0) ? 1.0 : double(g) * LN2;
  if (g == T(0)) {
    two_ended_seed_pair<T, true>(er + size_t(b) * M, er + (B + size_t(b)) * M, sr + size_t(b) * M,
                                 sr + (B + size_t(b)) * M, sv + 2 * size_t(b), sv + 2 * (B + size_t(b)), n, m, M,
                                 unit, value + b);
  } else {
    two_ended_seed_pair<T, false>(er + size_t(b) * M, er + (B + size_t(b)) * M, sr + size_t(b) * M,
                                  sr + (B + size_t(b)) * M, sv + 2 * size_t(b), sv + 2 * (B + size_t(b)), n, m, M,
                                  unit, value + b);
  }
}

// dx, dy of the B pairs from the halves' dx2 (2B, H, DT) and dy2 (2B, M, DT), their backward's with grad 1: rows
// [0, h_b) from the top half, rows [h_b, n_b) from the bottom half reversed; dy the top's plus the bottom's reversed
// (none from a one-row pair's dummy half); times grad[b]; zero past the lengths. One thread per (pair, index <
// max(N, M)).
template <typename T>
__global__ void __launch_bounds__(256) two_ended_grads_kernel(const T* __restrict__ dx2, const T* __restrict__ dy2,
                                                              const T* __restrict__ grad,
                                                              const long long* __restrict__ xlen,
                                                              const long long* __restrict__ ylen, int B, int N,
                                                              int M, int DT, T* __restrict__ dx,
                                                              T* __restrict__ dy) {
  const int H = (N + 1) / 2, span = max(N, M);
  const long long r = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (r >= (long long)B * span) return;
  const int b = int(r / span), i = int(r % span);
  const int n = length_in(xlen, b, N), m = length_in(ylen, b, M);
  const int h = (n + 1) / 2;
  const T g = grad[b];
  if (i < N) {
    const T* src = i < h ? dx2 + (size_t(b) * H + i) * DT
                         : dx2 + ((size_t(B) + b) * H + (n - 1 - i)) * DT;  // read only for h <= i < n
    for (int d = 0; d < DT; ++d) dx[(size_t(b) * N + i) * DT + d] = i < n ? g * src[d] : T(0);
  }
  if (i < M) {
    for (int d = 0; d < DT; ++d) {
      T v = T(0);
      if (i < m) {
        v = dy2[(size_t(b) * M + i) * DT + d];
        if (n > 1) v += dy2[((size_t(B) + b) * M + (m - 1 - i)) * DT + d];
        v *= g;
      }
      dy[(size_t(b) * M + i) * DT + d] = v;
    }
  }
}

}  // namespace sdtw
