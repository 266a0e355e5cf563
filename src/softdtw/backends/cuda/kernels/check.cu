// Input value checks on the device (softdtw/backends/cuda/checks.py).
//
// Whether every value of a and b is finite, and gamma (if given) a finite number >= 0. A block that finds a bad
// value sets ws[0]. The last block to finish (a ticket in ws[1]) publishes the answer in `flag`, an int in mapped,
// page-locked host memory that the host zeroed before the launch: 1 all finite, 2 a bad value. The flag doubles
// as the completion signal, so the host needs no event: reading it is a load from host memory. The check is
// queued in front of the call's soft-DTW kernels and read after they are launched, so it overlaps the host's
// launches instead of holding the GPU idle. The last block also zeroes ws for the slot's next check (the host
// reuses a slot only after reading its flag).
//
// The same pass gives the range bound of the call (softdtw/_checks.py, REACH_LIMIT): the largest |v| of the values of
// a and b (NaN left out, +inf counted), and the value of gamma, written as doubles to out[1] and out[2] (host memory, next to the flag)
// before the flag. Non-negative doubles order as their bit patterns, so the blocks combine their maxima with an
// integer atomicMax on wmax.
namespace sdtw {

template <typename T>
__global__ void __launch_bounds__(256) check_kernel(const T* __restrict__ a, long long na, const T* __restrict__ b,
                                                    long long nb, const T* __restrict__ gamma,
                                                    const T* __restrict__ gval, int* flag, int* ws,
                                                    unsigned long long* wmax) {
  bool bad = false;
  double vmax = 0.0;
  const long long stride = (long long)gridDim.x * blockDim.x;
  const long long first = (long long)blockIdx.x * blockDim.x + threadIdx.x;
#pragma unroll 4
  for (long long i = first; i < na; i += stride) {
    const T v = a[i];
    bad |= !isfinite(v);
    vmax = fmax(vmax, fabs((double)v));  // fmax drops NaN; +inf counts (a forbidden cell of C is out of range)
  }
#pragma unroll 4
  for (long long i = first; i < nb; i += stride) {
    const T v = b[i];
    bad |= !isfinite(v);
    vmax = fmax(vmax, fabs((double)v));  // fmax drops NaN; +inf counts (a forbidden cell of C is out of range)
  }
  for (int o = 16; o > 0; o >>= 1) vmax = fmax(vmax, __shfl_down_sync(0xffffffffu, vmax, o));
  if ((threadIdx.x & 31) == 0 && vmax > 0.0) atomicMax(wmax, (unsigned long long)__double_as_longlong(vmax));
  if (gamma != nullptr && first == 0) {
    const T g = *gamma;
    bad |= !(isfinite(g) && g >= T(0));
  }
  if (__syncthreads_or(bad) && threadIdx.x == 0) atomicOr(ws, 1);
  __shared__ bool last;
  if (threadIdx.x == 0) {
    __threadfence();  // this block's ws[0] before its ticket
    last = atomicAdd(ws + 1, 1) == int(gridDim.x) - 1;
  }
  __syncthreads();
  if (last && threadIdx.x == 0) {
    __threadfence();
    const int any_bad = atomicExch(ws, 0);
    ws[1] = 0;
    double* out = (double*)flag;  // out[0] holds the flag (an int), out[1] the max |v|, out[2] gamma
    *(volatile double*)(out + 1) = __longlong_as_double((long long)atomicExch(wmax, 0ull));
    *(volatile double*)(out + 2) = (double)*gval;
    __threadfence_system();  // everything above before the flag the host reads
    *(volatile int*)flag = 1 + any_bad;
  }
}

// Per-pair lengths of a call whose value check is deferred (softdtw/_checks.py, _defer). The soft-DTW kernels must
// never see a length outside [1, T], and reading the lengths on the host first would make the host wait for the GPU.
// So the kernels get a copy of each length clamped into [1, T], and one out of range sets ws[0] of the check's slot:
// check_kernel, queued right after this kernel on the same stream, folds it into its answer (flag 2), and the host
// raises the length error once the call's kernels are queued. xl or yl may be null (that side has full lengths).
__global__ void __launch_bounds__(256) lengths_kernel(const long long* __restrict__ xl, long long* __restrict__ xo,
                                                      long long tx, const long long* __restrict__ yl,
                                                      long long* __restrict__ yo, long long ty, int B, int* ws) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  bool bad = false;
  if (i < B) {
    if (xl != nullptr) {
      const long long v = xl[i];
      bad |= v < 1 || v > tx;
      xo[i] = v < 1 ? 1 : (v > tx ? tx : v);
    }
    if (yl != nullptr) {
      const long long v = yl[i];
      bad |= v < 1 || v > ty;
      yo[i] = v < 1 ? 1 : (v > ty ? ty : v);
    }
  }
  if (__syncthreads_or(bad) && threadIdx.x == 0) atomicOr(ws, 1);
}

}  // namespace sdtw
