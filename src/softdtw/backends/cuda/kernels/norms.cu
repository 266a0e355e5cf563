// Row norms of the "gram" cost's inputs (backends/cuda/__init__.py, _norms; fastpath.cpp, gram_inputs).
//
// na[r] = |a[r, :]| for the ra rows of a (B·N, D) and nb[r] = |b[r, :]| for the rb rows of b (B·M, D), in one launch:
// the kernels of the gram cost take |x_i| and |y_j| beside x·yᵀ (common.cuh, COST_GRAM). Two torch norms were two
// dispatches on the host before the forward could be queued (benchmarks/OPTIMIZATION_LOG.md, "The gram cost's
// norms in one launch"). One thread per row sums the squares in float64 in the row's order (the
// same bits on every path and every run) and rounds the root once to the data dtype. kernels/gram_gemm.cu's
// gram_xy_kernel takes norm_of_row too.
#include "norms.cuh"

namespace sdtw {

template <typename T>
__global__ void __launch_bounds__(256) norms_kernel(const T* __restrict__ a, long long ra, const T* __restrict__ b,
                                                    long long rb, int D, T* __restrict__ na, T* __restrict__ nb) {
  norm_of_row(a, ra, b, rb, D, na, nb, (long long)blockIdx.x * blockDim.x + threadIdx.x);
}

}  // namespace sdtw
