// Row tiles: does a lane that takes R rows x K columns per step (instead of 1 row x K columns) shorten
// latency-bound passes? Standalone probe for benchmarks/OPTIMIZATION_LOG.md, "Row tiles (probe)".
//
// The kernels' step has a fixed part (row shuffles, the hand-over between warps through shared memory, the
// block barrier, bookkeeping: ~195 ns a step at B = 16, N = 8192, "Where B = 16, N = 8192 value-only stands")
// and ~18 ns per cell of the lane's chain. A pass over N rows and NL lanes takes N + NL steps. With R rows per
// step it takes N / R + NL steps: the fixed part is paid once per R rows, and the K x R cells of a step have a
// critical path of K + R - 1 cells (the tile's anti-diagonals are independent).
//
// Layout (one block of W warps per (pair, chunk); value-only forward; univariate squared Euclidean cost in
// log2 units): lane L (0 .. 32 W - 1) owns columns [L K, L K + K); at step t it works on rows [(t - L) R,
// (t - L) R + R). Its left neighbour hands over the R values of its last column (shuffle; through shared
// memory between warps, one barrier a step). x sits in shared memory (each lane reads its R rows as one
// vector). R = 1 is the kernels' layout today. A run over B blocks times the pass at the occupancy of a
// chained launch of B (pair, chunk) blocks.
//
// Build and run: nvcc -O3 -arch=sm_90 -o row_tile_probe benchmarks/probes/row_tile_probe.cu && ./row_tile_probe
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

template <int R>
struct RowVec { float v[R]; };

template <int R>
__device__ __forceinline__ void load_rows(const float* s, float (&out)[R]) {
  if constexpr (R % 4 == 0) {
#pragma unroll
    for (int q = 0; q < R / 4; ++q) {
      const float4 f = reinterpret_cast<const float4*>(s)[q];
      out[4 * q] = f.x; out[4 * q + 1] = f.y; out[4 * q + 2] = f.z; out[4 * q + 3] = f.w;
    }
  } else if constexpr (R == 2) {
    const float2 f = *reinterpret_cast<const float2*>(s);
    out[0] = f.x; out[1] = f.y;
  } else {
#pragma unroll
    for (int r = 0; r < R; ++r) out[r] = s[r];
  }
}

// X: (B, N) pre-scaled, Y: (B, 32 W K) pre-scaled; out[b] = R[N - 1][M - 1] in log2 units. N % R == 0,
// N <= NMAX (x in shared memory).
template <int K, int R, int W>
__global__ void __launch_bounds__(32 * W) tile_fwd(const float* __restrict__ X, const float* __restrict__ Y,
                                                  float* __restrict__ out, int N) {
  extern __shared__ float4 smem_raw[];
  float* xs = reinterpret_cast<float*>(smem_raw);                 // N (+ pad) floats
  float* hand = xs + N + 8;                                       // [2][W][R] hand-over between warps
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
  float last[R];   // this lane's last column on its rows of the previous step (what the right lane reads)
#pragma unroll
  for (int q = 0; q < R; ++q) last[q] = BIG;
  float prevtop = BIG;  // the left value of the row above this step's first row (diag of its column 0)
  const int NR = N / R;
  const int steps = NR + 32 * W - 1;
  for (int t = 0; t < steps; ++t) {
    float left[R];
#pragma unroll
    for (int q = 0; q < R; ++q) left[q] = __shfl_up_sync(FULL, last[q], 1);
    if (W > 1) {
      if (lane == 31) {
#pragma unroll
        for (int q = 0; q < R; ++q) hand[((t & 1) * W + warp) * R + q] = last[q];
      }
      __syncthreads();
      if (lane == 0) {
#pragma unroll
        for (int q = 0; q < R; ++q) left[q] = warp > 0 ? hand[((t & 1) * W + warp - 1) * R + q] : BIG;
      }
    } else if (lane == 0) {
#pragma unroll
      for (int q = 0; q < R; ++q) left[q] = BIG;
    }
    const int tile = t - L;
    if (tile >= 0 && tile < NR) {
      float xv[R];
      load_rows<R>(xs + tile * R, xv);
      // column -1 (lane 0 of warp 0): R[i][-1] = BIG, R[-1][-1] = 0.
      float diag = (L == 0) ? (tile == 0 ? 0.f : BIG) : prevtop;
#pragma unroll
      for (int q = 0; q < R; ++q) {
        float lf = left[q];
        const float nextdiag = lf;
#pragma unroll
        for (int k = 0; k < K; ++k) {
          const float up = r[k];
          const float d = xv[q] - yv[k];
          const float v = fmaf(d, d, smin3(up, lf, diag));
          diag = up;
          lf = v;
          r[k] = v;
        }
        last[q] = lf;
        diag = (L == 0) ? BIG : nextdiag;
      }
      prevtop = left[R - 1];
      if (L == 32 * W - 1 && tile == NR - 1) out[b] = r[K - 1];
    }
  }
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

template <int K, int R, int W>
void run(int B, int N, bool check) {
  const int M = 32 * W * K;
  const float gamma = 1.f;
  std::vector<float> hx((size_t)B * N), hy((size_t)B * M);
  srand(1234 + K + 7 * R);
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
  const size_t shm = (size_t)(N + 8 + 2 * W * R) * 4;
  auto kern = tile_fwd<K, R, W>;
  CK(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)shm));
  kern<<<B, 32 * W, shm>>>(dx, dy, dout, N);
  CK(cudaGetLastError());
  CK(cudaDeviceSynchronize());
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  std::vector<float> ts;
  for (int rep = 0; rep < 7; ++rep) {
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
  const int steps = N / R + 32 * W - 1;
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
  printf("{\"K\": %d, \"R\": %d, \"W\": %d, \"B\": %d, \"N\": %d, \"M\": %d, \"ms\": %.4f, \"steps\": %d, "
         "\"ns_per_step\": %.1f, \"gcups\": %.1f, \"rel_err\": %.2e}\n",
         K, R, W, B, N, M, ms, steps, ms * 1e6 / steps, (double)B * N * M / (ms * 1e-3) / 1e9, err);
  fflush(stdout);
  CK(cudaFree(dx));
  CK(cudaFree(dy));
  CK(cudaFree(dout));
}

template <int K, int W>
void rows(int B, int N, bool check) {
  run<K, 1, W>(B, N, check);
  run<K, 2, W>(B, N, check);
  run<K, 4, W>(B, N, check);
  run<K, 8, W>(B, N, check);
}

int main(int argc, char** argv) {
  cudaDeviceProp p;
  CK(cudaGetDeviceProperties(&p, 0));
  fprintf(stderr, "device %s, %d SMs\n", p.name, p.multiProcessorCount);
  // Correctness against float64 on small pairs.
  rows<4, 1>(4, 256, true);
  rows<4, 4>(4, 512, true);
  rows<2, 4>(4, 256, true);
  // B = 32, N = M = 512, K = 4, W = 4 (the 32 x 512² training row: one block per pair).
  rows<4, 4>(32, 512, false);
  rows<2, 8>(32, 512, false);
  rows<8, 2>(32, 512, false);
  // The occupancy of B = 16, N = 8192 chained (K = 4, W = 4: 16 chunks a pair, 256 blocks), each block a
  // 8192 x 512 strip: ns per step; the chained pass is about N / R + 16 * 128 steps.
  rows<4, 4>(256, 8192, false);
  rows<2, 4>(512, 8192, false);
  rows<8, 4>(128, 8192, false);
  // The occupancy of B = 32, N = 2048 (K = 4, W = 2: 8 chunks a pair, 256 blocks).
  rows<4, 2>(256, 2048, false);
  return 0;
}
