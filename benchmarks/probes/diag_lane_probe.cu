// Diagonal lanes: does a lane whose K columns each work on a different row (column g on row t - g at step t, the
// anti-diagonal wavefront inside the lane) beat today's layout (the lane's K columns on one row, t - L)?
// Standalone probe for benchmarks/OPTIMIZATION_LOG.md, "Diagonal lanes (probe)".
//
// Why: row_tile_probe.cu's R = 1 rows put a step at ~43 ns per cell of the lane's chain plus ~57 ns
// (K = 2 / 4 / 8: 143 / 230 / 398 ns a step; W = 1 and W = 4 alike at K = 4), so a pass of N rows over NL
// lanes costs (N + NL) (43 K + 57) ns: the K cells of a row are one dependent chain. In a diagonal lane they
// are independent (each reads its own column's last two values and its left column's), so a step's critical
// path is one cell plus the shuffle, and its K cells are instruction-level parallelism. The pass takes
// N + 32 W K - 1 steps instead of N + 32 W - 1.
//
// Layout (one block of W warps per strip of M = 32 W K columns; value-only forward; univariate squared
// Euclidean cost in log2 units): lane L owns columns g = L K + k; at step t column g is on row t - g. Column k
// reads up = its own last value r[k], left = r[k - 1], diag = the value r[k - 1] held a step earlier; column 0
// takes left from lane L - 1's r[K - 1] by __shfl_up_sync (from lane 31 of warp w - 1 through shared memory,
// one barrier a step), and its diag is the left it took a step earlier. x moves along the same way (column k
// takes column k - 1's x; lane 0 reads x from shared memory). Nothing is guarded: a column before its row 0
// computes smin(BIG, BIG, BIG) ~ BIG, one past its last row computes values nobody reads.
//
// Build and run: nvcc -O3 -arch=sm_90 -o diag_lane_probe benchmarks/probes/diag_lane_probe.cu && ./diag_lane_probe
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>
#include <cuda_runtime.h>

#define CK(x)                                                                                   \
  do {                                                                                          \
    cudaError_t e_ = (x);                                                                       \
    if (e_ != cudaSuccess) {                                                                    \
      printf("CUDA error %s at %s:%d\n", cudaGetErrorString(e_), __FILE__, __LINE__);           \
      exit(1);                                                                                  \
    }                                                                                           \
  } while (0)

constexpr float BIG = 1e30f;
constexpr unsigned FULL = 0xffffffffu;

__device__ __forceinline__ float ex2f_(float v) {
  float r;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(v));
  return r;
}
__device__ __forceinline__ float lg2f_(float v) {
  float r;
  asm("lg2.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(v));
  return r;
}
__device__ __forceinline__ float smin3(float a, float b, float c) {
  const float lo = fminf(a, b), hi = fmaxf(a, b);
  const float m = fminf(lo, c), M = fmaxf(hi, c);
  const float med = fmaxf(lo, fminf(hi, c));
  return m - lg2f_(1.f + ex2f_(m - med) + ex2f_(m - M));
}

// Today's layout (row_tile_probe.cu with R = 1): lane L's K columns on row t - L.
template <int K, int W>
__global__ void __launch_bounds__(32 * W) row_fwd(const float* __restrict__ X, const float* __restrict__ Y,
                                                 float* __restrict__ out, int N) {
  extern __shared__ float4 smem_raw[];
  float* xs = reinterpret_cast<float*>(smem_raw);
  float* hand = xs + N + 8;  // [2][W]
  const int b = blockIdx.x;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int L = threadIdx.x;
  const float* x = X + (size_t)b * N;
  const float* y = Y + (size_t)b * 32 * W * K;
  for (int i = threadIdx.x; i < N; i += 32 * W) xs[i] = x[i];
  float yv[K], r[K];
#pragma unroll
  for (int k = 0; k < K; ++k) { yv[k] = y[L * K + k]; r[k] = BIG; }
  __syncthreads();
  float last = BIG, prevleft = (L == 0) ? 0.f : BIG;
  const int steps = N + 32 * W - 1;
  for (int t = 0; t < steps; ++t) {
    float left = __shfl_up_sync(FULL, last, 1);
    if (W > 1) {
      if (lane == 31) hand[(t & 1) * W + warp] = last;
      __syncthreads();
      if (lane == 0) left = warp > 0 ? hand[(t & 1) * W + warp - 1] : BIG;
    } else if (lane == 0) {
      left = BIG;
    }
    const int i = t - L;
    if (i >= 0 && i < N) {
      const float xv = xs[i];
      float diag = prevleft, lf = left;
#pragma unroll
      for (int k = 0; k < K; ++k) {
        const float up = r[k];
        const float d = xv - yv[k];
        const float v = fmaf(d, d, smin3(up, lf, diag));
        diag = up;
        lf = v;
        r[k] = v;
      }
      last = lf;
      prevleft = left;
      if (L == 32 * W - 1 && i == N - 1) out[b] = r[K - 1];
    }
  }
}

// Diagonal lanes: column g = L K + k on row t - g at step t.
template <int K, int W>
__global__ void __launch_bounds__(32 * W) diag_fwd(const float* __restrict__ X, const float* __restrict__ Y,
                                                  float* __restrict__ out, int N) {
  extern __shared__ float4 smem_raw[];
  float* xs = reinterpret_cast<float*>(smem_raw);
  float* hand = xs + N + 8;  // [2][W]
  const int b = blockIdx.x;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int L = threadIdx.x;
  constexpr int M = 32 * W * K;
  const float* x = X + (size_t)b * N;
  const float* y = Y + (size_t)b * M;
  for (int i = threadIdx.x; i < N; i += 32 * W) xs[i] = x[i];
  float yv[K], r[K], pr[K], xv[K];
#pragma unroll
  for (int k = 0; k < K; ++k) { yv[k] = y[L * K + k]; r[k] = BIG; pr[k] = BIG; xv[k] = 0.f; }
  __syncthreads();
  float pleft = (L == 0) ? 0.f : BIG;  // diag of column 0: R[-1, -1] = 0 for the pair's first column
  const int g0 = 32 * warp * K;         // the warp's first column; its lane 0 reads x[t - g0] at step t
  const int steps = N + M - 1;
  for (int t = 0; t < steps; ++t) {
    float lin = __shfl_up_sync(FULL, r[K - 1], 1);
    const float xup = __shfl_up_sync(FULL, xv[K - 1], 1);
    if (W > 1) {
      if (lane == 31) hand[(t & 1) * W + warp] = r[K - 1];
      __syncthreads();
      if (lane == 0) lin = warp > 0 ? hand[(t & 1) * W + warp - 1] : BIG;
    } else if (lane == 0) {
      lin = BIG;
    }
    const int xi = min(max(t - g0, 0), N - 1);
    const float x0 = (lane == 0) ? xs[xi] : xup;
#pragma unroll
    for (int k = K - 1; k > 0; --k) xv[k] = xv[k - 1];
    xv[0] = x0;
    float nv[K];
    {
      const float d = xv[0] - yv[0];
      nv[0] = fmaf(d, d, smin3(r[0], lin, pleft));
    }
#pragma unroll
    for (int k = 1; k < K; ++k) {
      const float d = xv[k] - yv[k];
      nv[k] = fmaf(d, d, smin3(r[k], r[k - 1], pr[k - 1]));
    }
#pragma unroll
    for (int k = 0; k < K; ++k) { pr[k] = r[k]; r[k] = nv[k]; }
    pleft = (L == 0) ? BIG : lin;
  }
  // Column M - 1 reached row N - 1 at the last step.
  if (L == 32 * W - 1) out[b] = r[K - 1];
}

double ref_sdtw(const float* x, const float* y, int N, int M, double gamma) {
  std::vector<double> Rm((size_t)(N + 1) * (M + 1), 1e300);
  Rm[0] = 0;
  for (int i = 1; i <= N; i++)
    for (int j = 1; j <= M; j++) {
      const double a = Rm[(size_t)(i - 1) * (M + 1) + j], b = Rm[(size_t)i * (M + 1) + j - 1],
                   c = Rm[(size_t)(i - 1) * (M + 1) + j - 1];
      const double m = std::min(a, std::min(b, c));
      const double sm = m - gamma * std::log(std::exp(-(a - m) / gamma) + std::exp(-(b - m) / gamma) +
                                             std::exp(-(c - m) / gamma));
      const double d = (double)x[i - 1] - y[j - 1];
      Rm[(size_t)i * (M + 1) + j] = d * d + sm;
    }
  return Rm[(size_t)N * (M + 1) + M];
}

template <int K, int W, bool DIAG>
void run(int B, int N, bool check) {
  const int M = 32 * W * K;
  const float gamma = 1.f;
  std::vector<float> hx((size_t)B * N), hy((size_t)B * M);
  srand(1234 + K + 7 * W);
  for (auto& v : hx) v = (float)rand() / RAND_MAX * 2.f - 1.f;
  for (auto& v : hy) v = (float)rand() / RAND_MAX * 2.f - 1.f;
  const double scale = 1.0 / std::sqrt(gamma * std::log(2.0));
  std::vector<float> sx(hx), sy(hy);
  for (auto& v : sx) v *= scale;
  for (auto& v : sy) v *= scale;
  float *dx, *dy, *dout;
  CK(cudaMalloc(&dx, sx.size() * 4));
  CK(cudaMalloc(&dy, sy.size() * 4));
  CK(cudaMalloc(&dout, (size_t)B * 4));
  CK(cudaMemcpy(dx, sx.data(), sx.size() * 4, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(dy, sy.data(), sy.size() * 4, cudaMemcpyHostToDevice));
  const size_t shm = (size_t)(N + 8 + 2 * W) * 4;
  auto kern = DIAG ? diag_fwd<K, W> : row_fwd<K, W>;
  CK(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)shm));
  kern<<<B, 32 * W, shm>>>(dx, dy, dout, N);
  CK(cudaGetLastError());
  CK(cudaDeviceSynchronize());
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  std::vector<float> ts;
  for (int rep = 0; rep < 9; ++rep) {
    CK(cudaEventRecord(e0));
    kern<<<B, 32 * W, shm>>>(dx, dy, dout, N);
    CK(cudaEventRecord(e1));
    CK(cudaEventSynchronize(e1));
    float ms;
    CK(cudaEventElapsedTime(&ms, e0, e1));
    ts.push_back(ms);
  }
  std::sort(ts.begin(), ts.end());
  const float ms = ts[ts.size() / 2];
  const int steps = DIAG ? N + M - 1 : N + 32 * W - 1;
  double err = -1;
  if (check) {
    std::vector<float> ho(B);
    CK(cudaMemcpy(ho.data(), dout, (size_t)B * 4, cudaMemcpyDeviceToHost));
    err = 0;
    for (int bb = 0; bb < std::min(B, 2); ++bb) {
      const double ref = ref_sdtw(&hx[(size_t)bb * N], &hy[(size_t)bb * M], N, M, gamma);
      const double got = ho[bb] * gamma * std::log(2.0);
      err = std::max(err, std::fabs(got - ref) / std::max(1e-9, std::fabs(ref)));
    }
  }
  printf("{\"layout\": \"%s\", \"K\": %d, \"W\": %d, \"B\": %d, \"N\": %d, \"M\": %d, \"ms\": %.4f, \"steps\": %d, "
         "\"ns_per_step\": %.1f, \"gcups\": %.1f, \"rel_err\": %.2e}\n",
         DIAG ? "diag" : "row", K, W, B, N, M, ms, steps, ms * 1e6 / steps, (double)B * N * M / (ms * 1e-3) / 1e9,
         err);
  fflush(stdout);
  CK(cudaFree(dx));
  CK(cudaFree(dy));
  CK(cudaFree(dout));
}

template <int K, int W>
void both(int B, int N, bool check) {
  run<K, W, false>(B, N, check);
  run<K, W, true>(B, N, check);
}

int main() {
  cudaDeviceProp p;
  CK(cudaGetDeviceProperties(&p, 0));
  fprintf(stderr, "device %s, %d SMs\n", p.name, p.multiProcessorCount);
  // Correctness against float64 on small strips.
  both<4, 1>(4, 256, true);
  both<4, 4>(4, 512, true);
  both<2, 4>(4, 256, true);
  both<8, 2>(4, 300, true);
  // The 32 x 512² training row: one block per pair.
  both<4, 4>(32, 512, false);
  both<2, 8>(32, 512, false);
  both<8, 2>(32, 512, false);
  both<16, 1>(32, 512, false);
  // The occupancy of B = 16, N = 8192 chained: 256 blocks of 8192 x 512 (K = 4, W = 4) and the alternatives.
  both<4, 4>(256, 8192, false);
  both<2, 4>(512, 8192, false);
  both<8, 4>(128, 8192, false);
  both<4, 1>(1024, 8192, false);
  both<8, 1>(512, 8192, false);
  both<8, 2>(256, 8192, false);
  both<16, 1>(256, 8192, false);
  // B = 32, N = 2048 occupancy (K = 4, W = 2: 256 blocks).
  both<4, 2>(256, 2048, false);
  both<8, 1>(256, 2048, false);
  return 0;
}
