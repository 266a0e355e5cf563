// Shared pieces of the soft-DTW kernels: numeric helpers, soft-min, costs, the group layout.
//
// Layout every kernel uses (research/gpu-kernels.md, "Recommended design"):
//   * a *group* of NL = 32 * W lanes works on one pair (W = 1: one warp; W > 1: a whole block);
//   * lane L owns K consecutive columns [j0, j0 + K) of the current column chunk, j0 = c * CW + L * K,
//     CW = NL * K columns per chunk; longer y are processed chunk after chunk;
//   * rows are skewed: at step t lane L works on row i = t - L, so the left neighbour (lane L - 1)
//     finished the same row one step earlier and hands its last column over by __shfl_up_sync
//     (through shared memory between warps, through a global boundary column between chunks).
// Values live in log2 units (costs scaled by 1 / (gamma ln 2)), so the soft-min needs ex2/lg2 only.
#pragma once

namespace sdtw {

constexpr unsigned FULL_MASK = 0xffffffffu;
constexpr double LN2 = 0.6931471805599453094;

enum Cost { COST_SQEUCLIDEAN = 0, COST_L1 = 1, COST_PRECOMPUTED = 2, COST_GRAM = 3 };
// COST_GRAM: the squared Euclidean cost of large D, from one GEMM. C holds the Gram matrix x·yᵀ and the x, y
// arguments hold the norms |x_i| `(B, N)` and |y_j| `(B, M)`: cost = max(|x_i|² + |y_j|² - 2 C_ij, 0). The
// norms travel like a fused cost's one feature (row stream, column registers), so the scaling and clamp
// that took seven elementwise passes over (B, N, M) per cost happen in the cells, and the backward sums
// E's rows and columns on the way (for dx, dy by GEMMs): benchmarks/OPTIMIZATION_LOG.md, "Large D: the Gram
// cost in the cells".
// Costs computed in the kernel from x and y (features); the others read a table C.
template <int COST>
__host__ __device__ constexpr bool fused_cost() { return COST == COST_SQEUCLIDEAN || COST == COST_L1; }
// Costs whose kernels read x and y: the features (fused), or COST_GRAM's norms.
template <int COST>
__host__ __device__ constexpr bool reads_xy() { return COST != COST_PRECOMPUTED; }
// What the kernel keeps of x[i] or y[j] (pre-scaled by xs): a feature, or a squared norm (COST_GRAM).
template <typename T, int COST>
__device__ __forceinline__ T scaled_input(T v, T xs) { return COST == COST_GRAM ? v * v * xs : v * xs; }

template <typename T> struct Num;

template <> struct Num<float> {
  // Large finite stand-in for +inf: no inf - inf, and 2^(-BIG) flushes to 0.
  static __device__ __forceinline__ float big() { return 1e30f; }
  static __device__ __forceinline__ float ex2(float v) {
    float r;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(v));
    return r;
  }
  static __device__ __forceinline__ float lg2(float v) {
    float r;
    asm("lg2.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(v));
    return r;
  }
  static __device__ __forceinline__ float rcp(float v) {
    float r;
    asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(v));
    return r;
  }
  static __device__ __forceinline__ float mn(float a, float b) { return fminf(a, b); }
  static __device__ __forceinline__ float mx(float a, float b) { return fmaxf(a, b); }
  static __device__ __forceinline__ float abs(float a) { return fabsf(a); }
};

template <> struct Num<double> {
  static __device__ __forceinline__ double big() { return 1e200; }
  static __device__ __forceinline__ double ex2(double v) { return exp2(v); }
  static __device__ __forceinline__ double lg2(double v) { return log2(v); }
  static __device__ __forceinline__ double rcp(double v) { return 1.0 / v; }
  static __device__ __forceinline__ double mn(double a, double b) { return fmin(a, b); }
  static __device__ __forceinline__ double mx(double a, double b) { return fmax(a, b); }
  static __device__ __forceinline__ double abs(double a) { return fabs(a); }
};

// COST_GRAM's cell cost in log2 units from the table value g = x_i·y_j and the scaled squared norms.
template <typename T>
__device__ __forceinline__ T gram_cost(T g, T xx, T yy, T scale) {
  return Num<T>::mx(fma(T(-2) * scale, g, xx + yy), T(0));
}

// Soft-min of three values in log2 units with the median trick: with m <= med <= M,
// smin = m - log2(1 + 2^(m - med) + 2^(m - M)); no exponent is ever positive, 2 ex2 + 1 lg2.
template <typename T>
__device__ __forceinline__ T soft_min3(T a, T b, T c) {
  const T lo = Num<T>::mn(a, b), hi = Num<T>::mx(a, b);
  const T m = Num<T>::mn(lo, c);
  const T M = Num<T>::mx(hi, c);
  const T med = Num<T>::mx(lo, Num<T>::mn(hi, c));
  return m - Num<T>::lg2(T(1) + Num<T>::ex2(m - med) + Num<T>::ex2(m - M));
}

// The value-only and checkpointing chained forwards' cells in two stages (forward_pair.cuh, SPLIT): the diag-up stage
// for all K cells of a step first (independent of each other), left open as lo = min(diag, up) and s = 1 + 2^(lo - hi)
// (smin(diag, up) = lo - log2(s), one ex2); then the left stage along the row, smin(diag, up, left) + add = (min(lo,
// left) + add) - log2(s 2^(min - lo) + 2^(min - left)), one of whose two powers is 1: with d = left - lo and e =
// 2^-|d|, the sum is s e + 1 (d < 0) or s + e. Its serial chain from `left` is 5 dependent instructions (add, ex2, fma,
// lg2, add; the selects wait beside the ex2) and a cell takes 3 MUFU operations, as soft_min3 (whose chain is 9; two
// closed soft-mins: a chain of 6 and 4 MUFU operations); it issues 2 more instructions than soft_min3, which the
// many-pair kernels, bound by MUFU and issue, cannot afford. soft-min is associative (log-sum-exp), so this is
// soft_min3's value up to rounding. An unreachable side (BIG) gives e = 0.
// The two stages' arithmetic, shared with the storing form (Link<float>::soft_open / soft_close): open_x gives lo and
// X = 2^(lo - hi) (s = 1 + X); open_sum gives the cell's sum relative to its minimum, with e and which side it is on.
template <typename T>
__device__ __forceinline__ T open_x(T diag, T up, T& lo) {
  lo = Num<T>::mn(diag, up);
  return Num<T>::ex2(lo - Num<T>::mx(diag, up));
}
template <typename T>
__device__ __forceinline__ T open_sum(T lo, T s, T left, T& e, bool& below) {
  const T d = left - lo;
  e = Num<T>::ex2(-Num<T>::abs(d));
  below = d < T(0);
  return fma(below ? s : T(1), e, below ? T(1) : s);
}
template <typename T>
__device__ __forceinline__ void soft_open2(T diag, T up, T& lo, T& s) {
  s = T(1) + open_x(diag, up, lo);
}
template <typename T>
__device__ __forceinline__ T soft_close2(T lo, T s, T left, T add) {
  T e;
  bool below;
  const T sum = open_sum(lo, s, left, e, below);
  return (Num<T>::mn(lo, left) + add) - Num<T>::lg2(sum);
}
// Soft-min of two values, min(a, b) - log2(1 + 2^(min - max)).
template <typename T>
__device__ __forceinline__ T soft_min2(T a, T b) {
  const T lo = Num<T>::mn(a, b), hi = Num<T>::mx(a, b);
  return lo - Num<T>::lg2(T(1) + Num<T>::ex2(lo - hi));
}

// Hard min with tslearn's tie-breaking: diagonal, then up, then left. `choice` gets 0, 1 or 2.
template <typename T>
__device__ __forceinline__ T hard_min3(T diag, T up, T left, int& choice) {
  if (diag <= up && diag <= left) { choice = 0; return diag; }
  if (up <= left) { choice = 1; return up; }
  choice = 2;
  return left;
}

// ---- What the forward stores per cell for the backward ("link" to its three predecessors) -------------
//
// float: the normalised soft-min weights themselves, w_p = 2^(S - R[p]) for p = up, left (diagonal =
//   1 - up - left), as two 16-bit fixed-point numbers in one 32-bit word (w_up and w_up + w_left). Each
//   weight is exact to 1.5e-5 whatever the size of R, gamma or N (an fp32 S would carry an error of
//   ulp(|R| / (gamma ln 2)) into every weight: 5e-4 at |R'| = 1e4), the weights of a cell sum to 1
//   exactly, and the backward needs neither exp2 nor R. Hard DTW stores the argmin as one-hot weights.
// double: S itself (the backward evaluates 2^(S - R[p]) in float64); hard DTW stores the argmin 0/1/2.
template <typename T> struct Link;

template <> struct Link<float> {
  using Word = unsigned;
  static constexpr float Q = 65535.f;
  static constexpr float MAGIC = 8388608.f;  // 2^23: x + 2^23 holds round(x) in its low mantissa bits
  static constexpr float UNIT = 1.f / Q;     // weights below are in units of 1/Q; e is scaled once per cell
  static __device__ __forceinline__ unsigned border() { return 0u; }  // never read with E != 0
  // Word = a | c << 16 with a = round(w_up Q), c = round((w_up + w_left) Q): 0 <= a <= c <= Q by
  // monotonicity, so w_left = c - a and w_diag = Q - c are never negative and a cell's weights sum to 1.
  static __device__ __forceinline__ unsigned pack(float w_up, float w_left) {
    const float fa = fmaf(w_up, Q, MAGIC), fc = fmaf(w_up + w_left, Q, MAGIC);
    return __byte_perm(__float_as_uint(fa), __float_as_uint(fc), 0x5410);
  }
  static __device__ __forceinline__ unsigned hard(int choice) {
    return choice == 1 ? 0xffffffffu : (choice == 2 ? 0xffff0000u : 0u);
  }
  // Soft-min of (diag, up, left) with the packed weights. The minimum's exponential is exactly 1, so ex2
  // goes to the other two offsets (m - x <= 0) directly: X1 holds up's (diag's if up is the minimum), X2
  // left's (diag's if left is, and up is not, the minimum). No median and no mapping back to up/left:
  // 2 ex2 + 1 lg2 + 1 rcp, ~25 instructions per storing cell where the median form plus a mapping took
  // ~29. The value-only forward keeps the median form (2 instructions fewer without weights; measured
  // 1045 vs 990 GCUPS), so the two modes may differ in the last bit of a value.
  template <bool WEIGHTS>
  static __device__ __forceinline__ float soft_core(float diag, float up, float left, unsigned& word) {
    const float m = fminf(diag, fminf(up, left));
    const bool up_min = up <= m;
    const bool left_min = left <= m && !up_min;
    const float dd = m - diag, du = m - up, dl = m - left;
    const float X1 = Num<float>::ex2(up_min ? dd : du);
    const float X2 = Num<float>::ex2(left_min ? dd : dl);
    const float Z = 1.f + X1 + X2;
    if (WEIGHTS) {
      const float rz = Num<float>::rcp(Z);
      const float eu = up_min ? 1.f : X1;
      const float el = left_min ? 1.f : X2;
      word = pack(eu * rz, el * rz);
    }
    return m - Num<float>::lg2(Z);
  }
  static __device__ __forceinline__ float soft(float diag, float up, float left, unsigned& word) {
    return soft_core<true>(diag, up, left, word);
  }
  // The storing soft-min in two stages (forward_pair.cuh, SPLIT_STORE), the first, smin(diag, up), off the serial
  // chain and left open (open_x / open_sum, as soft_open2 / soft_close2): lo = min(diag, up), s = 1 + X with
  // X = 2^(lo - hi), and a, up's exponential relative to lo (1 or X). Then with d = left - lo, e = 2^-|d|, the cell's
  // sum relative to its minimum is Z = s e + 1 (d < 0) or s + e, its weights left (d < 0 ? 1 : e) / Z and up
  // a (d < 0 ? e : 1) / Z. 2 ex2, 1 lg2 and 1 rcp a cell (soft()'s four) on a chain of 5 (add, ex2, fma, lg2, add).
  static __device__ __forceinline__ void soft_open(float diag, float up, float& lo, float& s, float& a) {
    const float X = open_x(diag, up, lo);
    s = 1.f + X;
    a = up <= diag ? 1.f : X;
  }
  static __device__ __forceinline__ float soft_close(float lo, float s, float a, float left, float cst,
                                                     unsigned& word) {
    float e;
    bool below;
    const float Z = open_sum(lo, s, left, e, below);
    const float rz = Num<float>::rcp(Z);
    word = pack(a * (below ? e : 1.f) * rz, (below ? 1.f : e) * rz);
    return (fminf(lo, left) + cst) - Num<float>::lg2(Z);
  }
  static __device__ __forceinline__ float value(float diag, float up, float left) {
    return soft_min3(diag, up, left);
  }
  // 2^23 + a and 2^23 + c as floats: one byte permute each, no conversion instruction.
  static __device__ __forceinline__ float fa(unsigned s) {
    return __uint_as_float(__byte_perm(s, 0x4B000000u, 0x7610));
  }
  static __device__ __forceinline__ float fc(unsigned s) {
    return __uint_as_float(__byte_perm(s, 0x4B000000u, 0x7632));
  }
  // Weights (in units of 1/Q) of the predecessor p in its successors: p is "up" of the cell below, "left"
  // of the cell to the right, "diag" of the cell down-right. R (of p) is not needed.
  static __device__ __forceinline__ float w_up(unsigned s, float, bool) { return fa(s) - MAGIC; }
  static __device__ __forceinline__ float w_left(unsigned s, float, bool) { return fc(s) - fa(s); }
  static __device__ __forceinline__ float w_diag(unsigned s, float, bool) { return (MAGIC + Q) - fc(s); }
  static constexpr bool NEEDS_R = false;
  // Bit-exact round trip through a float slot (shared-memory and global hand-over buffers).
  static __device__ __forceinline__ float to_slot(unsigned w) { return __uint_as_float(w); }
  static __device__ __forceinline__ unsigned from_slot(float v) { return __float_as_uint(v); }
};

template <> struct Link<double> {
  using Word = double;
  static constexpr double UNIT = 1.0;
  static __device__ __forceinline__ double border() { return -1e200; }
  static __device__ __forceinline__ double hard(int choice) { return double(choice); }
  static __device__ __forceinline__ double soft(double diag, double up, double left, double& word) {
    word = soft_min3(diag, up, left);
    return word;
  }
  static __device__ __forceinline__ double value(double diag, double up, double left) {
    return soft_min3(diag, up, left);
  }
  static __device__ __forceinline__ double w_up(double s, double R, bool hard) {
    return hard ? (s == 1.0 ? 1.0 : 0.0) : exp2(s - R);
  }
  static __device__ __forceinline__ double w_left(double s, double R, bool hard) {
    return hard ? (s == 2.0 ? 1.0 : 0.0) : exp2(s - R);
  }
  static __device__ __forceinline__ double w_diag(double s, double R, bool hard) {
    return hard ? (s == 0.0 ? 1.0 : 0.0) : exp2(s - R);
  }
  static constexpr bool NEEDS_R = true;
  static __device__ __forceinline__ double to_slot(double w) { return w; }
  static __device__ __forceinline__ double from_slot(double v) { return v; }
};

// Per-feature cost term and its derivative with respect to x (d = x - y).
template <typename T, int COST>
__device__ __forceinline__ T cost_term(T d) {
  return COST == COST_SQEUCLIDEAN ? d * d : Num<T>::abs(d);
}
template <typename T, int COST>
__device__ __forceinline__ T cost_slope(T d) {
  // sign(0) = 0, as torch.sign, so the l1 gradient matches the reference exactly at ties.
  return COST == COST_SQEUCLIDEAN ? d : T((d > T(0)) - (d < T(0)));
}

// Where lane L's K values of one step go in the step-major table: VEC-wide vectors, consecutive
// lanes at consecutive addresses, so one warp's store of a step covers contiguous memory.
template <int K>
struct StepLayout {
  static constexpr int VEC = (K % 4 == 0) ? 4 : ((K % 2 == 0) ? 2 : 1);
  static __device__ __forceinline__ int offset(int L, int k, int NL) {
    return (k / VEC) * NL * VEC + L * VEC + (k % VEC);
  }
};

// Vector accesses of global memory (the link table, cost tables, tile buffers). Stores in PTX: a plain store
// through a float4 pointer was split into four scalar stores by NVVM in the chained kernels (PTX st.global.f32
// x 4, SASS STG.E x 4; the SEQ kernels kept STG.E.128), four requests per warp and step instead of one
// (__stwb kept the vector but made it a strong store). Loads by __ldcg, through L2 (a table the same launch
// writes elsewhere, as dC over C).
template <typename T, int VEC> struct Vec;
template <typename T> struct Vec<T, 1> {
  static __device__ __forceinline__ void store(T* p, const T* v) { p[0] = v[0]; }
  static __device__ __forceinline__ void load(T* v, const T* p) { v[0] = p[0]; }
};
template <> struct Vec<float, 2> {
  static __device__ __forceinline__ void store(float* p, const float* v) {
    asm volatile("st.global.v2.f32 [%0], {%1, %2};" ::"l"(p), "f"(v[0]), "f"(v[1]));
  }
  static __device__ __forceinline__ void load(float* v, const float* p) {
    const float2 q = __ldcg(reinterpret_cast<const float2*>(p));
    v[0] = q.x, v[1] = q.y;
  }
};
template <> struct Vec<float, 4> {
  static __device__ __forceinline__ void store(float* p, const float* v) {
    asm volatile("st.global.v4.f32 [%0], {%1, %2, %3, %4};" ::"l"(p), "f"(v[0]), "f"(v[1]), "f"(v[2]), "f"(v[3]));
  }
  static __device__ __forceinline__ void load(float* v, const float* p) {
    const float4 q = __ldcg(reinterpret_cast<const float4*>(p));
    v[0] = q.x, v[1] = q.y, v[2] = q.z, v[3] = q.w;
  }
};
template <> struct Vec<unsigned, 2> {
  static __device__ __forceinline__ void store(unsigned* p, const unsigned* v) {
    asm volatile("st.global.v2.u32 [%0], {%1, %2};" ::"l"(p), "r"(v[0]), "r"(v[1]));
  }
};
template <> struct Vec<unsigned, 4> {
  static __device__ __forceinline__ void store(unsigned* p, const unsigned* v) {
    asm volatile("st.global.v4.u32 [%0], {%1, %2, %3, %4};" ::"l"(p), "r"(v[0]), "r"(v[1]), "r"(v[2]), "r"(v[3]));
  }
};
template <> struct Vec<double, 2> {
  static __device__ __forceinline__ void store(double* p, const double* v) {
    asm volatile("st.global.v2.f64 [%0], {%1, %2};" ::"l"(p), "d"(v[0]), "d"(v[1]));
  }
  static __device__ __forceinline__ void load(double* v, const double* p) {
    const double2 q = __ldcg(reinterpret_cast<const double2*>(p));
    v[0] = q.x, v[1] = q.y;
  }
};
template <> struct Vec<double, 4> {  // two 16-byte accesses: there is no 32-byte vector type
  static __device__ __forceinline__ void store(double* p, const double* v) {
    Vec<double, 2>::store(p, v);
    Vec<double, 2>::store(p + 2, v + 2);
  }
  static __device__ __forceinline__ void load(double* v, const double* p) {
    Vec<double, 2>::load(v, p);
    Vec<double, 2>::load(v + 2, p + 2);
  }
};

// All K values of one lane and one step, to the step-major table (the backward reads them with
// cp_async_step, below). The store takes the lane's first position in the row
// (row + StepLayout<K>::offset(L, 0, NL)), computed once per pass: the rest of the offsets are
// constants, so a step's store is one address (base + slot CW) away.
template <typename T, int K, int NL>
__device__ __forceinline__ void store_lane_step(T* lane_row, const T* v) {
  constexpr int VEC = StepLayout<K>::VEC;
#pragma unroll
  for (int k = 0; k < K; k += VEC) Vec<T, VEC>::store(lane_row + StepLayout<K>::offset(0, k, NL), v + k);
}

// ---- Asynchronous copies into a per-lane ring in shared memory (cp.async, sm_80+) ---------------------
//
// Per-cell inputs (the stored links, a precomputed C) are needed once, at a known future step, by one
// lane. Each lane copies its own values P - 1 steps ahead into its private slot of a P-stage ring, so
// DRAM latency (~1 µs) never sits on the step's critical path and no registers hold the prefetch.
__device__ __forceinline__ unsigned smem_addr(const void* p) {
  return static_cast<unsigned>(__cvta_generic_to_shared(p));
}
template <int BYTES>
__device__ __forceinline__ void cp_async(void* dst, const void* src, bool valid) {
  static_assert(BYTES == 4 || BYTES == 8 || BYTES == 16, "cp.async copies 4, 8 or 16 bytes");
  // src-size 0 zero-fills the destination without reading the source.
  asm volatile("cp.async.ca.shared.global [%0], [%1], %2, %3;\n" ::"r"(smem_addr(dst)), "l"(src), "n"(BYTES),
               "r"(valid ? BYTES : 0));
}
// The row a table copy addresses: row itself inside [0, n), else the nearest row of the pair. A copy whose value
// is not needed (row outside the pair, column past M) has src-size 0 and reads nothing, so its address needs no
// select of its own: each of a lane's K copies of a step is one address plus an immediate offset. Selecting a
// stand-in address per value instead cost 34 of the gram forward's 245 instructions a step (SASS, K = 4).
__device__ __forceinline__ int clamp_row(int row, int n) { return min(max(row, 0), n - 1); }
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int PENDING>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(PENDING)); }

// A lane's K values of one row of a row-major table (C of a cost table; dC written over it), columns
// [j0, j0 + K), j0 a multiple of K. Groups of V = StepLayout<K>::VEC values move as one access where
// table_groups allows: one 16-byte copy or store per lane instead of four at K = 4 float. The lanes of a step
// sit on 32 different rows, so each scalar access of a warp touched 32 sectors (81 % excess L2 sectors in the
// Gram passes, Nsight Compute). Measured: a K = 8 Gram DP 609 -> 377 us, K = 4 on one warp -12 %; no change
// where the step is bound by issue, as 32 x 2048^2 (benchmarks/OPTIMIZATION_LOG.md, "Table rows in 16-byte
// groups").
// Whether a table of rows of M values takes whole groups: M a multiple of V (a group is all in or all out of the
// pair's columns, and every row starts aligned), and the base 16-byte aligned (min(16, 4 V) for float). Uniform
// over the grid.
template <typename T, int K>
__device__ __forceinline__ bool table_groups(const T* table, int M) {
  constexpr int V = StepLayout<K>::VEC;
  constexpr unsigned long long A = (V * sizeof(T) < 16 ? V * sizeof(T) : 16) - 1;
  return V > 1 && M % V == 0 && (reinterpret_cast<unsigned long long>(table) & A) == 0;
}
// Copy row values src[k] (src = &table[row][j0]) into dst[k], k < K; a value past column M - 1, or of a row that
// is not ok, reads nothing (src-size 0; src is still an address inside the table, clamp_row).
template <typename T, int K>
__device__ __forceinline__ void cp_async_table_row(T* dst, const T* src, bool ok, int j0, int M, bool groups) {
  constexpr int V = StepLayout<K>::VEC;
  constexpr int GB = V * int(sizeof(T)) < 16 ? V * int(sizeof(T)) : 16;  // bytes per copy
  if (V > 1 && groups) {
#pragma unroll
    for (int k = 0; k < K; k += V) {
      const bool in = ok && j0 + k < M;
#pragma unroll
      for (int b = 0; b < V * int(sizeof(T)); b += GB)
        cp_async<GB>(reinterpret_cast<char*>(dst + k) + b, reinterpret_cast<const char*>(src + k) + b, in);
    }
  } else {
#pragma unroll
    for (int k = 0; k < K; ++k) cp_async<int(sizeof(T))>(dst + k, src + k, ok && j0 + k < M);
  }
}
// Load v[k] = src[k] (src = &table[row][j0]) for the columns j0 + k < M of a row that is ok, else 0.
template <typename T, int K>
__device__ __forceinline__ void load_table_row(T* v, const T* src, bool ok, int j0, int M, bool groups) {
  constexpr int V = StepLayout<K>::VEC;
  if (V > 1 && groups) {
#pragma unroll
    for (int k = 0; k < K; k += V) {
      if (ok && j0 + k < M) {
        Vec<T, V>::load(v + k, src + k);
      } else {
#pragma unroll
        for (int q = 0; q < V; ++q) v[k + q] = T(0);
      }
    }
  } else {
#pragma unroll
    for (int k = 0; k < K; ++k) v[k] = (ok && j0 + k < M) ? src[k] : T(0);
  }
}
// Store v[k] to dst[k] (dst = &table[row][j0]) for the columns j0 + k < M.
template <typename T, int K>
__device__ __forceinline__ void store_table_row(T* dst, const T* v, int j0, int M, bool groups) {
  constexpr int V = StepLayout<K>::VEC;
  if (V > 1 && groups) {
#pragma unroll
    for (int k = 0; k < K; k += V)
      if (j0 + k < M) Vec<T, V>::store(dst + k, v + k);
  } else {
#pragma unroll
    for (int k = 0; k < K; ++k)
      if (j0 + k < M) dst[k] = v[k];
  }
}

// Copy one lane's K step-major values (StepLayout) into its ring slot (K contiguous values).
template <typename E, int K>
__device__ __forceinline__ void cp_async_step(E* dst, const E* row, int L, int NL, bool valid) {
  constexpr int VEC = StepLayout<K>::VEC;
  constexpr int BYTES = VEC * int(sizeof(E));
  constexpr int PIECE = BYTES > 16 ? 16 : BYTES;
#pragma unroll
  for (int k = 0; k < K; k += VEC) {
    const E* src = row + StepLayout<K>::offset(L, k, NL);
#pragma unroll
    for (int b = 0; b < BYTES; b += PIECE)
      cp_async<PIECE>(reinterpret_cast<char*>(dst + k) + b, reinterpret_cast<const char*>(src) + b, valid);
  }
}

// Ring depth: as deep as fits a 40 KB budget per block, between 2 and 8 stages.
__host__ __device__ constexpr int ring_depth(int bytes_per_stage) {
  return bytes_per_stage <= 0 ? 2 : (40960 / bytes_per_stage > 8 ? 8
                                     : (40960 / bytes_per_stage < 2 ? 2 : 40960 / bytes_per_stage));
}

// The group of lanes that works on one pair: one warp (W == 1) or one whole block (W > 1).
// BAR = 0: the group is the whole block (__syncthreads); BAR > 0: the group is 32 W threads of a block that
// holds other groups too, synchronised by the named barrier BAR (the checkpointed backward, backward.cu).
template <int W, int BAR = 0>
__device__ __forceinline__ void group_sync() {
  if (W == 1) {
    __syncwarp();
  } else if (BAR == 0) {
    __syncthreads();
  } else {
    asm volatile("bar.sync %0, %1;" ::"n"(BAR), "n"(32 * W) : "memory");
  }
}
// The thread's index within its group, and the group's size.
template <int W, int BAR>
__device__ __forceinline__ unsigned group_tid() { return BAR == 0 ? threadIdx.x : (threadIdx.x & (32 * W - 1)); }
template <int W, int BAR>
__device__ __forceinline__ unsigned group_threads() { return BAR == 0 ? blockDim.x : 32u * W; }
// Producer / consumer hand-over between two groups of one block: `count` threads in all (both groups).
__device__ __forceinline__ void bar_arrive(int id, int count) {
  asm volatile("bar.arrive %0, %1;" ::"r"(id), "r"(count) : "memory");
}
__device__ __forceinline__ void bar_wait(int id, int count) {
  asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(count) : "memory");
}

// Sum over the group; every lane of the group gets the result (W > 1: through `scratch`, W doubles).
template <int W, int BAR = 0>
__device__ __forceinline__ double group_sum(double v, double* scratch) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(FULL_MASK, v, o);
  if (W == 1) return v;
  const int warp = group_tid<W, BAR>() >> 5;
  group_sync<W, BAR>();
  if ((threadIdx.x & 31) == 0) scratch[warp] = v;
  group_sync<W, BAR>();
  double s = 0.0;
  for (int w = 0; w < W; ++w) s += scratch[w];
  return s;
}

// ---- Alignment variants (issue 25; softdtw/backends/reference.py derives the recursion) ----------------
//
// VAR, the last template argument of the forward and backward kernels, is a bit mask; VAR = 0 is the plain DP
// and compiles to the code it always did (every variant branch is `if constexpr` or folds away):
//   * VAR_OPEN_BEGIN: a path may start at any (0, j). Row 0's diagonal predecessor is 0 for every column and its
//     vertical one +inf. Without a penalty the kernels reach that at no cost per cell: the row above row 0 (r, the
//     left neighbours, the hand-over slots) holds v0 = 1 (log2 units) instead of +inf, used as diagonal AND vertical
//     predecessor: 2^-1 + 2^-1 = 2^0, so smin(1, 1, left) = smin(0, left) exactly, each start counted once. Hard
//     DTW takes v0 = 0: min(0, 0, left) = min(0, left), the tie going to the diagonal as in the reference.
//     With a penalty the vertical predecessor gets a per-step addend instead (+inf on row 0, the penalty elsewhere),
//     and v0 = 0.
//   * VAR_OPEN_END: the value is the soft-min (hard: the min, first column on ties) over the last row's columns.
//     The forward writes R of the last row (log2 units, float64: F + r is exact there) to `endr`, reduces it per
//     pair (EndAcc) and keeps (v, argmin) in `endv`; the backward seeds E on the last row with 2^(v - R[n-1, j])
//     (hard: one-hot on the argmin) instead of the 1 at (n-1, m-1).
//   * VAR_PENALTY: p (per pair, read on the device) is added to the vertical and horizontal predecessors of every
//     cell. The backward's d value / d p = sum over cells of E_s (w_up(s) + w_left(s)), summed at the predecessor
//     p of each such edge: the terms E_s w(p -> s) that E_p itself is built of, one add per cell.
enum Variant { VAR_OPEN_BEGIN = 1, VAR_OPEN_END = 2, VAR_PENALTY = 4 };

// The second order's variant arguments (hvp_warp.cu, hvp.cu; unused by their plain kernels): pair b's step penalty
// pen[b * pen_stride] and its direction pdot[b * pdot_stride] (natural units), and the outputs vpen, vpen_dot `(B,)`.
template <typename T>
struct HvpVar {
  const T* pen;
  int pen_stride;
  const T* pdot;
  int pdot_stride;
  T* vpen;
  T* vpen_dot;
};

// Open end: the soft-min (log2 units) of the last row as a running (min, sum of 2^(min - v)); hard DTW keeps (min,
// first column holding it) instead. The min is float64 (F + r, exact); the sum is T: a float sum's rounding moves the
// value by ~1e-7 in log2 units, far below a float32 value's own, and ex2 on the MUFU pipe keeps the fold short (it sits
// on every pair's critical path once per pass).
template <bool C, typename A, typename B> struct Pick { using type = A; };
template <typename A, typename B> struct Pick<false, A, B> { using type = B; };

template <typename T, bool HARD>
struct EndAcc {
  using S = typename Pick<HARD, double, T>::type;  // hard: the column, exact in float64 for any M
  double m = 1e300;
  S s = HARD ? S(1e300) : S(0);
  static __device__ __forceinline__ S up(double d) { return Num<S>::ex2(S(d)); }  // 2^d for d <= 0 (0 at -inf)
  __device__ __forceinline__ void add(double v, int j) {
    if (HARD) {
      if (v < m) { m = v; s = S(j); }  // columns come in increasing order: the first minimum stays
    } else {
      const double nm = fmin(m, v);
      s = s * up(nm - m) + up(nm - v);
      m = nm;
    }
  }
  __device__ __forceinline__ void merge(double om, S os) {
    if (HARD) {
      if (om < m || (om == m && os < s)) { m = om; s = os; }
    } else {
      const double nm = fmin(m, om);
      s = s * up(nm - m) + os * up(nm - om);
      m = nm;
    }
  }
  __device__ __forceinline__ void warp_merge() {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) merge(__shfl_xor_sync(FULL_MASK, m, o), __shfl_xor_sync(FULL_MASK, s, o));
  }
  // The value in log2 units (hard: natural units).
  __device__ __forceinline__ double value() const { return HARD ? m : m - log2(double(s)); }
};

// Flags between blocks: the writer's plain stores of bnd, then a release store of the row count; the
// reader acquires the count (every lane, so each lane's later loads are ordered after it) and reads bnd
// through L2 (__ldcg), never a stale L1 line.
__device__ __forceinline__ int ld_acquire(const int* p) {
  int v;
  asm volatile("ld.acquire.gpu.global.s32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ void st_release(int* p, int v) {
  asm volatile("st.release.gpu.global.s32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}
// Every lane of the calling warp spins until *flag >= need.
__device__ __forceinline__ void wait_rows(const int* flag, int need) {
  while (__any_sync(FULL_MASK, ld_acquire(flag) < need)) __nanosleep(64);
}
// A chained pass publishes its chunk column (rows counted from where its pass starts) once per 32-step block,
// at the block's row refill: at step t the lane writing the column, NL - 1 steps behind the first lane, has
// finished t - (NL - 1) rows. Not in the step: a release there, predicated off or not, stalled the writing warp
// on its error barrier (ERRBAR) every step and the other warps at the step barrier (OPTIMIZATION_LOG.md "Chain
// release once per block": forward -20 %; "Chained backward: release once per block": backward -30 %). After
// the pass the caller publishes n. `writer`: the calling thread writes the column (the test stays in the helper:
// tested outside it, ptxas scheduled the chained backward differently).
__device__ __forceinline__ void publish_rows(bool writer, int* flag, int t, int NL, int n) {
  if (writer && t > NL - 1) st_release(flag, min(n, t - (NL - 1)));
}
// The storing chained passes read the neighbour chunk's column of their next 32-row block this many steps
// into the current block (forward_pair, backward_pair: "LATE"), so they wait for 32 - CHAIN_LATE_AT fewer
// of its rows.
constexpr int CHAIN_LATE_AT = 24;

}  // namespace sdtw
