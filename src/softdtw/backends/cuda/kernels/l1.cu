// The l1 cost of large D and its vector-Jacobian product (softdtw/backends/cuda/l1.py).
//
// Past FUSED_D_MAX the DP kernels read the l1 cost from a table, C[b, i, j] = sum_d |x[b, i, d] - y[b, j, d]|,
// and the backward turns grad_b E_b, written over that table, into
//   dx[b, i, d] =  sum_j G[b, i, j] sign(x[b, i, d] - y[b, j, d]),
//   dy[b, j, d] = -sum_i G[b, i, j] sign(x[b, i, d] - y[b, j, d]) = sum_i G[b, i, j] sign(y[b, j, d] - x[b, i, d]),
// with sign(0) = 0 (torch's subgradient of |u| at 0). Neither has a GEMM form: each is B N M D terms of a
// compare and a multiply-add. Done with PyTorch's elementwise ops they took 12 ms (cost) and ~14 ms (gradients) at
// B = 32, N = M = 1024, D = 32 on the H100, passes over (B, N, M) temporaries per feature; here each is one
// kernel that keeps its tiles in shared memory and its sums in registers (benchmarks/OPTIMIZATION_LOG.md,
// "Large D: l1 cost and gradients in tiles").
//
// Layouts: x (B, N, D) and y (B, M, D) with D contiguous and rows D apart (any batch stride: y may be one band of
// columns of a larger y); C and G (B, N, ldc). Both kernels take a 1-D grid (launch.launch).
namespace sdtw {

constexpr int L1_THREADS = 256;  // 16 x 16 threads
constexpr int L1_TILE = 64;      // cost: 64 rows x 64 columns per block, 4 x 4 per thread
constexpr int L1_DC = 16;        // cost: features per shared-memory stage

// C[b, i, j] = sum_d |x[b, i, d] - y[b, j, d]|, d ascending (the order of the elementwise form, so the two agree
// to the bit). Blocks: B * tiles_i * tiles_j, (b, ti, tj) with tj fastest.
template <typename T>
__global__ void __launch_bounds__(L1_THREADS) l1_cost_kernel(const T* __restrict__ x, const T* __restrict__ y,
                                                             T* __restrict__ C, int N, int M, int D, long long xb,
                                                             long long yb, int ldc, int tiles_i, int tiles_j) {
  __shared__ T xs[L1_DC][L1_TILE + 1];
  __shared__ T ys[L1_DC][L1_TILE + 1];
  const int tid = threadIdx.x, tx = tid & 15, ty = tid >> 4;
  const int tj = blockIdx.x % tiles_j, ti = (blockIdx.x / tiles_j) % tiles_i, b = blockIdx.x / (tiles_j * tiles_i);
  const int i0 = ti * L1_TILE, j0 = tj * L1_TILE;
  const T* xp = x + b * xb;
  const T* yp = y + b * yb;
  T acc[4][4];
#pragma unroll
  for (int r = 0; r < 4; ++r)
#pragma unroll
    for (int c = 0; c < 4; ++c) acc[r][c] = T(0);
  for (int d0 = 0; d0 < D; d0 += L1_DC) {
    // Stage the tiles' next L1_DC features (zeros past D and past the rows: |0 - 0| adds nothing, and rows past
    // N or M are never stored).
#pragma unroll
    for (int k = 0; k < L1_TILE * L1_DC / L1_THREADS; ++k) {
      const int e = tid + k * L1_THREADS, row = e / L1_DC, d = e % L1_DC;
      const bool fd = d0 + d < D;
      xs[d][row] = (fd && i0 + row < N) ? xp[size_t(i0 + row) * D + d0 + d] : T(0);
      ys[d][row] = (fd && j0 + row < M) ? yp[size_t(j0 + row) * D + d0 + d] : T(0);
    }
    __syncthreads();
#pragma unroll
    for (int d = 0; d < L1_DC; ++d) {
      T xv[4], yv[4];
#pragma unroll
      for (int r = 0; r < 4; ++r) xv[r] = xs[d][ty + 16 * r];
#pragma unroll
      for (int c = 0; c < 4; ++c) yv[c] = ys[d][tx + 16 * c];
#pragma unroll
      for (int r = 0; r < 4; ++r)
#pragma unroll
        for (int c = 0; c < 4; ++c) acc[r][c] += fabs(xv[r] - yv[c]);
    }
    __syncthreads();
  }
  T* Cp = C + size_t(b) * N * ldc;
#pragma unroll
  for (int r = 0; r < 4; ++r) {
    const int i = i0 + ty + 16 * r;
#pragma unroll
    for (int c = 0; c < 4; ++c) {
      const int j = j0 + tx + 16 * c;
      if (i < N && j < M) Cp[size_t(i) * ldc + j] = acc[r][c];
    }
  }
}

constexpr int L1V_ROWS = 64;  // vjp: 64 rows x 32 features per block, 4 x 2 per thread
constexpr int L1V_FEAT = 32;
constexpr int L1V_COLS = 32;  // columns per shared-memory stage

// out[b, r, f] = sum_c G[b, r, c] sign(a[b, r, f] - o[b, c, f]) over c < Cn, G[b, r, c] at G + b gb + r gr + c gc:
// dx with (a, o) = (x, y) and (gr, gc) = (ldc, 1), dy with (y, x) and (1, ldc). Blocks: B * tiles_r * tiles_f,
// (b, tr, tf) with tf fastest. out is (B, R, D) contiguous.
template <typename T>
__global__ void __launch_bounds__(L1_THREADS) l1_vjp_kernel(const T* __restrict__ a, const T* __restrict__ o,
                                                            const T* __restrict__ G, T* __restrict__ out, int R,
                                                            int Cn, int D, long long ab, long long ob, long long gb,
                                                            long long gr, long long gc, int tiles_r, int tiles_f) {
  __shared__ T gs[L1V_COLS][L1V_ROWS + 1];
  __shared__ T os[L1V_COLS][L1V_FEAT + 1];
  const int tid = threadIdx.x, tx = tid & 15, ty = tid >> 4;
  const int tf = blockIdx.x % tiles_f, tr = (blockIdx.x / tiles_f) % tiles_r, b = blockIdx.x / (tiles_f * tiles_r);
  const int r0 = tr * L1V_ROWS, f0 = tf * L1V_FEAT;
  const T* ap = a + b * ab;
  const T* op = o + b * ob;
  const T* gp = G + b * gb;
  T av[4][2], acc[4][2];
#pragma unroll
  for (int r = 0; r < 4; ++r)
#pragma unroll
    for (int q = 0; q < 2; ++q) {
      const int row = r0 + ty + 16 * r, f = f0 + tx + 16 * q;
      av[r][q] = (row < R && f < D) ? ap[size_t(row) * D + f] : T(0);
      acc[r][q] = T(0);
    }
  const bool gcols = gc == 1;  // G's columns contiguous (dx): stage along them; else along its rows (dy)
  for (int c0 = 0; c0 < Cn; c0 += L1V_COLS) {
#pragma unroll
    for (int k = 0; k < L1V_ROWS * L1V_COLS / L1_THREADS; ++k) {
      const int e = tid + k * L1_THREADS;
      const int c = gcols ? e % L1V_COLS : e / L1V_ROWS, row = gcols ? e / L1V_COLS : e % L1V_ROWS;
      // Columns past Cn stage a zero weight (no term); rows past R are never stored.
      gs[c][row] = (c0 + c < Cn && r0 + row < R) ? gp[(r0 + row) * gr + (c0 + c) * gc] : T(0);
    }
#pragma unroll
    for (int k = 0; k < L1V_COLS * L1V_FEAT / L1_THREADS; ++k) {
      const int e = tid + k * L1_THREADS, c = e / L1V_FEAT, f = e % L1V_FEAT;
      os[c][f] = (c0 + c < Cn && f0 + f < D) ? op[size_t(c0 + c) * D + f0 + f] : T(0);
    }
    __syncthreads();
#pragma unroll 8
    for (int c = 0; c < L1V_COLS; ++c) {
      T g[4], ov[2];
#pragma unroll
      for (int r = 0; r < 4; ++r) g[r] = gs[c][ty + 16 * r];
#pragma unroll
      for (int q = 0; q < 2; ++q) ov[q] = os[c][tx + 16 * q];
#pragma unroll
      for (int r = 0; r < 4; ++r)
#pragma unroll
        for (int q = 0; q < 2; ++q) {
          // sign(a - o) without the subtraction: a - o > 0 exactly when a > o (gradual underflow), 0 on a tie.
          const T s = T(av[r][q] > ov[q]) - T(av[r][q] < ov[q]);
          acc[r][q] = fma(g[r], s, acc[r][q]);
        }
    }
    __syncthreads();
  }
  T* outp = out + size_t(b) * R * D;
#pragma unroll
  for (int r = 0; r < 4; ++r) {
    const int row = r0 + ty + 16 * r;
#pragma unroll
    for (int q = 0; q < 2; ++q) {
      const int f = f0 + tx + 16 * q;
      if (row < R && f < D) outp[size_t(row) * D + f] = acc[r][q];
    }
  }
}

}  // namespace sdtw
