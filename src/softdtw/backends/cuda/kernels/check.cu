// Input value checks on the device (softdtw/backends/cuda/checks.py).
//
// Whether every value of a and b is finite, and gamma (if given) a finite number >= 0. A block that finds a
// bad value stores 1 into `flag`, an int in mapped, page-locked host memory that the host zeroed before the
// launch, and writes NaN into the npoison values at `poison` (the call's results, when the check runs behind
// the kernels that wrote them): a result computed from bad inputs is NaN whether or not the host has read the
// flag yet. Blocks that find nothing write nothing, so no atomics are needed (every writer writes the same).
namespace sdtw {

__device__ __forceinline__ float quiet_nan(float) { return __int_as_float(0x7fc00000); }
__device__ __forceinline__ double quiet_nan(double) { return __longlong_as_double(0x7ff8000000000000LL); }

template <typename T>
__global__ void __launch_bounds__(256) check_kernel(const T* __restrict__ a, long long na, const T* __restrict__ b,
                                                    long long nb, const T* __restrict__ gamma, int* flag, T* poison,
                                                    int npoison) {
  bool bad = false;
  const long long stride = (long long)gridDim.x * blockDim.x;
  const long long first = (long long)blockIdx.x * blockDim.x + threadIdx.x;
#pragma unroll 4
  for (long long i = first; i < na; i += stride) bad |= !isfinite(a[i]);
#pragma unroll 4
  for (long long i = first; i < nb; i += stride) bad |= !isfinite(b[i]);
  if (gamma != nullptr && first == 0) {
    const T g = *gamma;
    bad |= !(isfinite(g) && g >= T(0));
  }
  if (__syncthreads_or(bad)) {
    if (threadIdx.x == 0) *(volatile int*)flag = 1;
    if (poison != nullptr)
      for (int i = threadIdx.x; i < npoison; i += blockDim.x) poison[i] = quiet_nan(T(0));
  }
}

}  // namespace sdtw
