// The gradient of a backward run ahead (fastpath.cpp, a plan whose backward the forward already ran with grad 1):
// dx = grad[b] * dx1, dy = grad[b] * dy1, zero past each pair's lengths.
//
// backward_kernel writes its fused dx, dy as g * (unit * acc), grad last (backward.cu), and zeros past the lengths,
// so with g = 1 it writes unit * acc exactly and this kernel's g * that is bitwise what backward_kernel writes with
// grad g, for every g (inf and NaN too: the rows past the lengths are written as zeros, not g * 0). One thread per
// (pair, index < max(N, M)), as two_ended_grads_kernel.
#include "common.cuh"

namespace sdtw {

template <typename T>
__global__ void __launch_bounds__(256) scale_grads_kernel(const T* __restrict__ dx1, const T* __restrict__ dy1,
                                                          const T* __restrict__ grad,
                                                          const long long* __restrict__ xlen,
                                                          const long long* __restrict__ ylen, int B, int N, int M,
                                                          int DT, T* __restrict__ dx, T* __restrict__ dy) {
  const int span = max(N, M);
  const long long r = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (r >= (long long)B * span) return;
  const int b = int(r / span), i = int(r % span);
  const T g = grad[b];
  if (dx != nullptr && i < N) {
    const bool live = i < xlen[b];  // as backward_kernel reads it (clamped by the check's lengths_kernel)
    const size_t o = (size_t(b) * N + i) * DT;
    for (int d = 0; d < DT; ++d) dx[o + d] = live ? g * dx1[o + d] : T(0);
  }
  if (dy != nullptr && i < M) {
    const bool live = i < ylen[b];
    const size_t o = (size_t(b) * M + i) * DT;
    for (int d = 0; d < DT; ++d) dy[o + d] = live ? g * dy1[o + d] : T(0);
  }
}

}  // namespace sdtw
