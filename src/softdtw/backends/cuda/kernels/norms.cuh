// The norm of one row, as the "gram" cost's kernels take it (norms.cu's norms_kernel, gram_gemm.cu's gram_xy_kernel):
// summed in float64 in the row's order and rounded once to the data dtype, so both give the same bits.
#pragma once

namespace sdtw {

// Row r of the ra rows of a and then the rb rows of b: its norm into na or nb (nothing past both).
template <typename T>
__device__ __forceinline__ void norm_of_row(const T* __restrict__ a, long long ra, const T* __restrict__ b,
                                            long long rb, int D, T* __restrict__ na, T* __restrict__ nb, long long r) {
  const T* src;
  T* dst;
  if (r < ra) {
    src = a + r * D;
    dst = na + r;
  } else if (r < ra + rb) {
    r -= ra;
    src = b + r * D;
    dst = nb + r;
  } else {
    return;
  }
  double s = 0.0;
  for (int d = 0; d < D; ++d) {
    const double v = double(src[d]);
    s = fma(v, v, s);
  }
  *dst = T(sqrt(s));
}

}  // namespace sdtw
