// The value-only forward of few long pairs from both ends (backends/cuda/two_ended.py): the two halves' inputs, and
// the value from their last rows.
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

// value[b] from end (2B, M): R of each half's last row, float64, in log2 units (natural for gamma = 0) as
// forward_chain_kernel's open end keeps them. One block of TWO_ENDED_THREADS per pair; the soft-min over j as
// EndAcc's running (min, sum), in float64.
template <typename T, bool HARD>
__device__ __forceinline__ void two_ended_fold(const double* __restrict__ top, const double* __restrict__ bot, int m,
                                               double unit, T* out) {
  using Acc = EndAcc<double, HARD>;
  constexpr double FAR = 1e300;  // S past column m - 1: no path
  Acc acc;
  for (int j = threadIdx.x; j < m; j += TWO_ENDED_THREADS) {
    const double s0 = bot[m - 1 - j], s1 = j + 1 < m ? bot[m - 2 - j] : FAR;
    const double lo = fmin(s0, s1), hi = fmax(s0, s1);
    acc.add(top[j] + (HARD ? lo : lo - log2(1.0 + exp2(lo - hi))), j);
  }
  acc.warp_merge();
  __shared__ double sm[TWO_ENDED_THREADS / 32], ss[TWO_ENDED_THREADS / 32];
  const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
  if (lane == 0) {
    sm[w] = acc.m;
    ss[w] = acc.s;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    Acc all;
    for (int q = 0; q < TWO_ENDED_THREADS / 32; ++q) all.merge(sm[q], ss[q]);
    *out = T(all.value() * unit);
  }
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

}  // namespace sdtw
