// Input value checks on the device (softdtw/backends/cuda/checks.py).
//
// Whether every value of a and b is finite, and gamma (if given) a finite number >= 0. A block that finds a
// bad value stores 1 into `flag`, an int in mapped, page-locked host memory that the host zeroed before the
// launch; blocks that find nothing write nothing, so no atomics are needed. The host waits for an event
// recorded right after this kernel, not for the soft-DTW kernels launched behind it, so a call's checks
// overlap its forward instead of holding the GPU idle in front of it.
namespace sdtw {

template <typename T>
__global__ void __launch_bounds__(256) check_kernel(const T* __restrict__ a, long long na, const T* __restrict__ b,
                                                    long long nb, const T* __restrict__ gamma, int* flag) {
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
  if (__syncthreads_or(bad) && threadIdx.x == 0) *(volatile int*)flag = 1;
}

}  // namespace sdtw
