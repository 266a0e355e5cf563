// DTW search on the GPU (softdtw.dtw_search, backends/cuda/search.py): the subsequence DP of each query over a
// long series, parallel along the series, and the greedy pick of the k best non-overlapping matches.
//
// The DP (backends/_cpu_search.py): rows i = 0..n-1 are the query's steps, columns j = 0..L-1 the series',
//   R[0, j] = c + min(0, R[0, j-1])                          (start at j, or come from the left),
//   R[i, j] = c + min(R[i-1, j-1], R[i-1, j], R[i, j-1])     (ties: diagonal, up, left),
// soft-DTW with the soft-min instead of min; each cell carries the start column of its best hard path (soft
// kernels run the hard values beside the soft ones for it). The outputs are the last row's values and starts.
//
// Parallel along j (search_rows_kernel). Within row i, with m_j = min(R[i-1, j-1], R[i-1, j]) known from the
// row above, R[i, j] = c_j + min(m_j, R[i, j-1]) is a prefix scan over j of the maps f_j(r) = c_j + min(m_j, r).
// A run of columns composes into one map r -> min(H, r + S) (H: the best path entering the run from the row
// above, S: the run's cost sum), soft r -> smin(A, r + S); the hard map prefers H on ties (an entry inside the run
// lies right of the carry, which is what the sequential tie rule picks), and carries H's start column s.
//   * A block owns a tile of NT·CPT columns (thread t: CPT consecutive ones, in registers: y, the previous row's
//     values and starts) and walks the rows of the query in order.
//   * Row i: pass 1 folds each thread's columns into its map (from the previous row only); a block scan gives each
//     thread the map of the columns left of it inside the tile and the tile's aggregate. Warp 0 publishes the
//     aggregate, then finds the tile's carry-in R[i, j0-1] by a decoupled look-back (tiles on the left publish
//     their aggregate of row i as soon as their row i-1 is final, then their inclusive value): 32 tiles per step,
//     composed by a shuffle reduction, until one has an inclusive value. Pass 2 recomputes the thread's columns
//     from its carry-in; that carry-in, R[i, jb-1], is also the diagonal predecessor of its first column in row i+1.
//   * Blocks take their tile from an atomic ticket (tile-major, queries interleaved), so a block only ever waits
//     for tiles whose blocks started before it: no deadlock, whatever the number of resident blocks.
//   * Look-back records are 64-bit words, 32 bits of payload and a nonzero tag each (zeroed memory = not yet
//     written), one record per (tile, row), written once: a reader checks every word's tag, so it needs no fence.
//   * Rows run in bands [row0, row1) of launches (the records take NREC·8 bytes per tile and row): a band starts
//     from the previous band's last row (in_v, in_h, in_s) and ends with its last row (out_*).
// select_*: the greedy pick (search.py's rule): smallest remaining end value (first on ties); a pick [s, e]
// removes every end within `excl` of e and every end j >= s whose start <= e. Chunks of SEL_CHUNK ends keep their
// best live end; each round re-scans only the chunks a pick can touch.
#include "common.cuh"

namespace sdtw {
namespace search {

template <typename T> __device__ __forceinline__ T inf_v();
template <> __device__ __forceinline__ float inf_v<float>() { return __int_as_float(0x7f800000); }
template <> __device__ __forceinline__ double inf_v<double>() { return __longlong_as_double(0x7ff0000000000000ll); }

// Soft-min of two values in natural units, -g log(e^(-a/g) + e^(-b/g)) (g2 = g ln 2, ig2 = 1 / g2); +inf counts 0.
template <typename T>
__device__ __forceinline__ T smin2(T a, T b, T g2, T ig2) {
  const T lo = Num<T>::mn(a, b), hi = Num<T>::mx(a, b);
  if (hi == inf_v<T>()) return lo;
  return lo - g2 * Num<T>::lg2(T(1) + Num<T>::ex2((lo - hi) * ig2));
}

// The map of a run of columns: r -> min(H, r + S) with start s where H wins (ties to H), soft r -> smin(A, r + S).
// Identity: H = A = inf, S = 0. A constant (an inclusive value v): H = A = v, S = inf.
template <typename T, bool SOFT>
struct Map {
  T H, S, A;
  int s;
};

template <typename T, bool SOFT>
__device__ __forceinline__ Map<T, SOFT> identity_map() {
  return Map<T, SOFT>{inf_v<T>(), T(0), inf_v<T>(), 0};
}

// x after y (y covers the columns left of x's).
template <typename T, bool SOFT>
__device__ __forceinline__ Map<T, SOFT> compose(const Map<T, SOFT>& x, const Map<T, SOFT>& y, T g2, T ig2) {
  Map<T, SOFT> r;
  const T hy = y.H + x.S;
  const bool take = x.H <= hy;
  r.H = take ? x.H : hy;
  r.s = take ? x.s : y.s;
  r.S = y.S + x.S;
  if constexpr (SOFT) r.A = smin2(x.A, y.A + x.S, g2, ig2);
  else r.A = r.H;
  return r;
}

template <typename T, bool SOFT>
__device__ __forceinline__ Map<T, SOFT> shfl_up(const Map<T, SOFT>& m, int off) {
  Map<T, SOFT> r;
  r.H = __shfl_up_sync(FULL_MASK, m.H, off);
  r.S = __shfl_up_sync(FULL_MASK, m.S, off);
  r.s = __shfl_up_sync(FULL_MASK, m.s, off);
  r.A = SOFT ? __shfl_up_sync(FULL_MASK, m.A, off) : r.H;
  return r;
}

template <typename T, bool SOFT>
__device__ __forceinline__ Map<T, SOFT> shfl_down(const Map<T, SOFT>& m, int off) {
  Map<T, SOFT> r;
  r.H = __shfl_down_sync(FULL_MASK, m.H, off);
  r.S = __shfl_down_sync(FULL_MASK, m.S, off);
  r.s = __shfl_down_sync(FULL_MASK, m.s, off);
  r.A = SOFT ? __shfl_down_sync(FULL_MASK, m.A, off) : r.H;
  return r;
}

template <typename T, bool SOFT>
__device__ __forceinline__ Map<T, SOFT> shfl_idx(const Map<T, SOFT>& m, int src) {
  Map<T, SOFT> r;
  r.H = __shfl_sync(FULL_MASK, m.H, src);
  r.S = __shfl_sync(FULL_MASK, m.S, src);
  r.s = __shfl_sync(FULL_MASK, m.s, src);
  r.A = SOFT ? __shfl_sync(FULL_MASK, m.A, src) : r.H;
  return r;
}

// Inclusive scan over the lanes of a warp, in column order (lane 0 leftmost): lane l gets m_l after ... after m_0.
template <typename T, bool SOFT>
__device__ __forceinline__ Map<T, SOFT> warp_scan(Map<T, SOFT> m, int lane, T g2, T ig2) {
#pragma unroll
  for (int off = 1; off < 32; off *= 2) {
    const Map<T, SOFT> o = shfl_up(m, off);
    if (lane >= off) m = compose(m, o, g2, ig2);
  }
  return m;
}

// ---- look-back records: tagged 64-bit words ----------------------------------------------------------------------

__device__ __forceinline__ unsigned long long ld_relaxed(const unsigned long long* p) {
  unsigned long long v;
  asm volatile("ld.relaxed.gpu.global.b64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ void st_relaxed(unsigned long long* p, unsigned long long v) {
  asm volatile("st.relaxed.gpu.global.b64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}
__device__ __forceinline__ unsigned long long tagged(unsigned payload) {
  return ((unsigned long long)payload << 32) | 1ull;
}

template <typename T> struct Words;
template <> struct Words<float> {
  static constexpr int N = 1;
  static __device__ __forceinline__ void put(unsigned long long* w, float v) { w[0] = tagged(__float_as_uint(v)); }
  static __device__ __forceinline__ float get(const unsigned long long* w) { return __uint_as_float(unsigned(w[0] >> 32)); }
};
template <> struct Words<double> {
  static constexpr int N = 2;
  static __device__ __forceinline__ void put(unsigned long long* w, double v) {
    const unsigned long long b = (unsigned long long)__double_as_longlong(v);
    w[0] = tagged(unsigned(b));
    w[1] = tagged(unsigned(b >> 32));
  }
  static __device__ __forceinline__ double get(const unsigned long long* w) {
    return __longlong_as_double((long long)((w[0] >> 32) | ((w[1] >> 32) << 32)));
  }
};

// A record: the inclusive value (H, s[, A]) in words [0, NINC), the aggregate (H, s, S[, A]) in [NINC, NREC).
template <typename T, bool SOFT>
struct Record {
  static constexpr int W = Words<T>::N;
  static constexpr int NINC = W * (SOFT ? 2 : 1) + 1;
  static constexpr int NAGG = W * (SOFT ? 3 : 2) + 1;
  static constexpr int NREC = NINC + NAGG;

  static __device__ __forceinline__ void publish_inc(unsigned long long* rec, T H, int s, T A) {
    unsigned long long w[NINC];
    Words<T>::put(w, H);
    w[W] = tagged(unsigned(s));
    if constexpr (SOFT) Words<T>::put(w + W + 1, A);
#pragma unroll
    for (int k = 0; k < NINC; ++k) st_relaxed(rec + k, w[k]);
  }
  static __device__ __forceinline__ void publish_agg(unsigned long long* rec, const Map<T, SOFT>& m) {
    unsigned long long w[NAGG];
    Words<T>::put(w, m.H);
    w[W] = tagged(unsigned(m.s));
    Words<T>::put(w + W + 1, m.S);
    if constexpr (SOFT) Words<T>::put(w + 2 * W + 1, m.A);
#pragma unroll
    for (int k = 0; k < NAGG; ++k) st_relaxed(rec + NINC + k, w[k]);
  }
  // One read of a record: 2 = an inclusive value (m a constant map), 1 = an aggregate (m its map), 0 = not yet.
  static __device__ __forceinline__ int try_read(const unsigned long long* rec, Map<T, SOFT>& m) {
    unsigned long long w[NREC];
#pragma unroll
    for (int k = 0; k < NREC; ++k) w[k] = ld_relaxed(rec + k);
    bool ok_inc = true, ok_agg = true;
#pragma unroll
    for (int k = 0; k < NINC; ++k) ok_inc &= (w[k] & 1ull) != 0;
#pragma unroll
    for (int k = NINC; k < NREC; ++k) ok_agg &= (w[k] & 1ull) != 0;
    if (ok_inc) {
      m.H = Words<T>::get(w);
      m.s = int(unsigned(w[W] >> 32));
      m.S = inf_v<T>();
      m.A = SOFT ? Words<T>::get(w + W + 1) : m.H;
      return 2;
    }
    if (ok_agg) {
      const unsigned long long* a = w + NINC;
      m.H = Words<T>::get(a);
      m.s = int(unsigned(a[W] >> 32));
      m.S = Words<T>::get(a + W + 1);
      m.A = SOFT ? Words<T>::get(a + 2 * W + 1) : m.H;
      return 1;
    }
    return 0;
  }
};

// The carry-in of tile t (a constant map, the same in every lane): a warp reads the records of tiles t-1, t-2, ...
// (32 per window; left of column 0 the constant R[i, -1] = inf) at `rec - (t - u) · tstride` until every tile up to
// the nearest inclusive value has at least its aggregate, and composes them. Tiles beyond the nearest inclusive
// value are not waited for; a lane holding an aggregate reads again (its tile may have turned inclusive meanwhile).
template <typename T, bool SOFT>
__device__ __forceinline__ Map<T, SOFT> look_back(const unsigned long long* rec, long long tstride, int t, int lane,
                                                  T g2, T ig2, int& reads, int& windows) {
  using M = Map<T, SOFT>;
  using Rec = Record<T, SOFT>;
  const T INF = inf_v<T>();
  M run = identity_map<T, SOFT>();
  for (int base = t - 1;; base -= 32) {
    const int u = base - lane;
    M e = M{INF, INF, INF, 0};
    int state = u < 0 ? 2 : 0;
    unsigned inc_mask;
    while (true) {
      if (state != 2) state = Rec::try_read(rec - (long long)(t - u) * tstride, e);
      ++reads;
      inc_mask = __ballot_sync(FULL_MASK, state == 2);
      const unsigned ready = __ballot_sync(FULL_MASK, state != 0);
      const unsigned need = inc_mask ? (inc_mask ^ (inc_mask - 1)) : FULL_MASK;  // lanes up to the first inc
      if ((ready & need) == need) break;
    }
    ++windows;
    const int first = inc_mask ? __ffs(inc_mask) - 1 : 32;
    if (lane > first) e = identity_map<T, SOFT>();
    for (int off = 1; off <= first && off < 32; off *= 2) {  // lane 0 needs lanes 0..first only (first is uniform)
      const M o = shfl_down(e, off);
      if (lane + off < 32) e = compose(e, o, g2, ig2);
    }
    run = compose(run, shfl_idx(e, 0), g2, ig2);
    if (inc_mask) return run;
  }
}

// The cell cost of query step qi and series step y: D = DK features in registers (cost_reg), or D in memory.
template <typename T, int COST, int DK>
__device__ __forceinline__ T cost_reg(const T (&qi)[DK], const T (&y)[DK]) {
  T c = T(0);
#pragma unroll
  for (int d = 0; d < DK; ++d) {
    const T t = qi[d] - y[d];
    c += COST == COST_L1 ? Num<T>::abs(t) : t * t;
  }
  return c;
}
template <typename T, int COST>
__device__ __forceinline__ T cost_mem(const T* qi, const T* y, int D) {
  T c = T(0);
  for (int d = 0; d < D; ++d) {
    const T t = __ldg(qi + d) - __ldg(y + d);
    c += COST == COST_L1 ? Num<T>::abs(t) : t * t;
  }
  return c;
}

// One cell's inputs: its cost c, the hard min(diagonal, up) mh with that path's start sm (ties: diagonal) and, SOFT, the
// soft-min msv of the same two (FIRST: the first row, start here: 0 and start j). Outside the series (!FULL, j >= L):
// c = 0, mh = msv = inf, so the padded columns right of the series change nothing on their left.
template <typename T, int COST, bool SOFT, int DK, int DR, bool FIRST, bool FULL>
__device__ __forceinline__ void cell_in(const T (&qi)[DR], const T* qrow, const T (&y)[DR], const T* series, int j,
                                        int L, int D, T odh, T odv, int ods, T uh, T uv, int us, T g2, T ig2, T& c,
                                        T& mh, T& msv, int& sm) {
  const bool in = FULL || j < L;
  if constexpr (DK > 0) {
    c = cost_reg<T, COST, DR>(qi, y);  // y is 0 past the series: a finite cost, masked below
  } else {
    c = in ? cost_mem<T, COST>(qrow, series + (long long)j * D, D) : T(0);
  }
  if constexpr (FIRST) {
    mh = T(0), msv = T(0), sm = j;
  } else {
    sm = odh <= uh ? ods : us;
    mh = Num<T>::mn(odh, uh);
    msv = SOFT ? smin2(odv, uv, g2, ig2) : mh;
  }
  if constexpr (!FULL) {
    const T INF = inf_v<T>();
    c = in ? c : T(0);
    mh = in ? mh : INF;
    msv = in ? msv : INF;
  }
}

// Pass 1 over a thread's CPT columns: fold them into its map m (from the previous row ph, pv, ps and the diagonal of
// the first column dh, dv, ds only); soft: keep each column's smin(diagonal, up) in ms for pass 2.
template <typename T, int COST, bool SOFT, int DK, int DR, int CPT, bool FIRST, bool FULL>
__device__ __forceinline__ void pass1_cols(Map<T, SOFT>& m, T (&ms)[SOFT ? CPT : 1], const T (&qi)[DR], const T* qrow,
                                           const T (&y)[CPT][DR], const T* series, int jb, int L, int D, T dh, T dv,
                                           int ds, const T (&ph)[CPT], const T (&pv)[CPT], const int (&ps)[CPT], T g2,
                                           T ig2) {
  T odh = dh, odv = dv;
  int ods = ds;
#pragma unroll
  for (int k = 0; k < CPT; ++k) {
    T c, mh, msv;
    int sm;
    cell_in<T, COST, SOFT, DK, DR, FIRST, FULL>(qi, qrow, y[k], series, jb + k, L, D, odh, odv, ods, ph[k], pv[k],
                                                ps[k], g2, ig2, c, mh, msv, sm);
    if constexpr (SOFT) ms[k] = msv;
    odh = ph[k], ods = ps[k];
    if constexpr (SOFT) odv = pv[k];
    const bool take = mh <= m.H;  // ties: the entry (the later path), as the sequential rule
    m.s = take ? sm : m.s;
    m.H = c + Num<T>::mn(mh, m.H);
    m.S += c;
    if constexpr (SOFT) m.A = c + smin2(msv, m.A, g2, ig2);
  }
}

// Pass 2 over a thread's CPT columns: the row's values and starts from the thread's carry-in (rh, rv, rs), written over
// the previous row (ph, pv, ps); dh0, ds0: the previous row's diagonal of the first column.
template <typename T, int COST, bool SOFT, int DK, int DR, int CPT, bool FIRST, bool FULL>
__device__ __forceinline__ void pass2_cols(T rh, T rv, int rs, const T (&ms)[SOFT ? CPT : 1], const T (&qi)[DR],
                                           const T* qrow, const T (&y)[CPT][DR], const T* series, int jb, int L, int D,
                                           T dh0, int ds0, T (&ph)[CPT], T (&pv)[CPT], int (&ps)[CPT], T g2, T ig2) {
  T odh = dh0, odv = T(0), msv;
  int ods = ds0;
#pragma unroll
  for (int k = 0; k < CPT; ++k) {
    T c, mh;
    int sm;
    cell_in<T, COST, false, DK, DR, FIRST, FULL>(qi, qrow, y[k], series, jb + k, L, D, odh, odv, ods, ph[k], pv[k],
                                                 ps[k], g2, ig2, c, mh, msv, sm);
    odh = ph[k], ods = ps[k];
    const bool take = mh <= rh;
    rs = take ? sm : rs;
    rh = c + Num<T>::mn(mh, rh);
    ph[k] = rh;
    ps[k] = rs;
    if constexpr (SOFT) {
      rv = c + smin2(ms[k], rv, g2, ig2);
      pv[k] = rv;
    }
  }
}

#define PASS1_ARGS m, ms, qi, qrow, y, series, jb, L, D, dh, dv, ds, ph, pv, ps, g2, ig2
#define PASS2_ARGS rh, rv, rs, ms, qi, qrow, y, series, jb, L, D, dh0, ds0, ph, pv, ps, g2, ig2

// One band of rows [row0, row1) of every query's DP, a block per (tile, query) ticket.
// query `(Q, n, D)`, series `(L, D)`; in_* `(Q, L)`: row row0 - 1 (read when row0 > 0; in_h for SOFT only);
// out_* `(Q, L)`: row row1 - 1 (out_h for SOFT, may be null); slots: Q · ntiles · (row1 - row0) records, zeroed;
// ticket: one int, zeroed. DK: D as a template constant (y in registers), 0 for any D (y read through L1). MINB:
// blocks per SM asked of the register allocator (__launch_bounds__).
template <typename T, int COST, bool SOFT, int DK, int NT, int CPT, int MINB>
__global__ void __launch_bounds__(NT, MINB) search_rows_kernel(
    const T* __restrict__ query, const T* __restrict__ series, const T* __restrict__ in_v,
    const T* __restrict__ in_h, const int* __restrict__ in_s, T* __restrict__ out_v, T* __restrict__ out_h,
    int* __restrict__ out_s, unsigned long long* __restrict__ slots, int* __restrict__ ticket, int Q, int n, int D,
    int L, int row0, int row1, int ntiles, T gamma, long long* __restrict__ prof, int nprof) {
  using M = Map<T, SOFT>;
  using Rec = Record<T, SOFT>;
  constexpr int NW = NT / 32;
  static_assert(NT % 32 == 0 && NW <= 32, "NT: a multiple of 32, at most 1024");
  constexpr int DR = DK > 0 ? DK : 1;
  const T INF = inf_v<T>();
  const T g2 = SOFT ? gamma * T(LN2) : T(1);
  const T ig2 = SOFT ? T(1) / g2 : T(1);

  __shared__ int s_ticket;
  __shared__ M s_warp[2][NW];  // per row parity: warp totals, then the warps' exclusive prefixes
  __shared__ M s_carry[2];     // the tile's carry-in R[i, j0 - 1] as a constant map

  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (threadIdx.x == 0) s_ticket = atomicAdd(ticket, 1);
  __syncthreads();
  const int tk = s_ticket;
  const int t = tk / Q, q = tk - (tk / Q) * Q;
  const int rows = row1 - row0;
  const int jb = t * (NT * CPT) + threadIdx.x * CPT;  // this thread's first column
  const long long qoff = (long long)q * L;

  T y[CPT][DR];
  if constexpr (DK > 0) {
#pragma unroll
    for (int k = 0; k < CPT; ++k)
#pragma unroll
      for (int d = 0; d < DK; ++d) y[k][d] = jb + k < L ? series[(long long)(jb + k) * DK + d] : T(0);
  }
  // The previous row (hard values ph, starts ps, soft values pv) and the diagonal of the first column (dh, ds, dv).
  T ph[CPT], pv[CPT];
  int ps[CPT];
  T dh = INF, dv = INF;
  int ds = 0;
#pragma unroll
  for (int k = 0; k < CPT; ++k) {
    ph[k] = INF;
    pv[k] = INF;
    ps[k] = 0;
  }
  if (row0 > 0) {
#pragma unroll
    for (int k = 0; k < CPT; ++k) {
      if (jb + k < L) {
        const T v = in_v[qoff + jb + k];
        pv[k] = v;
        ph[k] = SOFT ? in_h[qoff + jb + k] : v;
        ps[k] = in_s[qoff + jb + k];
      }
    }
    if (jb > 0 && jb - 1 < L) {
      dv = in_v[qoff + jb - 1];
      dh = SOFT ? in_h[qoff + jb - 1] : dv;
      ds = in_s[qoff + jb - 1];
    }
  }

  const T* qrow = query + ((long long)q * n + row0) * D;
  T qnext[DR];  // the next row's query step, loaded a row ahead (its load is off the row's critical path)
  if constexpr (DK > 0) {
#pragma unroll
    for (int d = 0; d < DK; ++d) qnext[d] = __ldg(qrow + d);
  }
  // Profile (benchmarks only, prof != null): thread 0 of the first nprof tickets writes 8 numbers per row, see
  // backends/cuda/search.py, PROF_FIELDS.
  const bool prof_on = prof != nullptr && tk < nprof && threadIdx.x == 0;
  long long* prof_row = prof_on ? prof + (long long)tk * rows * 8 : nullptr;
  long long c0 = 0;
  for (int i = row0; i < row1; ++i, qrow += D) {
    const int par = i & 1;
    if (prof_on) {
      unsigned long long g;
      asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(g));
      prof_row = prof + ((long long)tk * rows + (i - row0)) * 8;
      prof_row[0] = (long long)g;
      c0 = clock64();
    }
    T qi[DR];
    if constexpr (DK > 0) {
#pragma unroll
      for (int d = 0; d < DK; ++d) qi[d] = qnext[d];
      if (i + 1 < row1) {
#pragma unroll
        for (int d = 0; d < DK; ++d) qnext[d] = __ldg(qrow + D + d);
      }
    }
    // ---- pass 1: this thread's map, from the previous row only. The first row (start anywhere) and a thread whose
    // columns all lie inside the series (FULL, every thread but the last tile's) run without per-column tests.
    M m = identity_map<T, SOFT>();
    T ms[SOFT ? CPT : 1];  // soft: smin(diagonal, up) per column, kept for pass 2
    const bool full = jb + CPT <= L;
    if (i == 0) {
      if (full) pass1_cols<T, COST, SOFT, DK, DR, CPT, true, true>(PASS1_ARGS);
      else pass1_cols<T, COST, SOFT, DK, DR, CPT, true, false>(PASS1_ARGS);
    } else {
      if (full) pass1_cols<T, COST, SOFT, DK, DR, CPT, false, true>(PASS1_ARGS);
      else pass1_cols<T, COST, SOFT, DK, DR, CPT, false, false>(PASS1_ARGS);
    }
    if (prof_on) prof_row[1] = clock64() - c0;
    const M incl = warp_scan(m, lane, g2, ig2);
    M excl = shfl_up(incl, 1);
    if (lane == 0) excl = identity_map<T, SOFT>();
    M cin;  // this thread's carry-in R[i, jb - 1] as a constant map
    // ---- the block scans the warp totals, warp 0 publishes and looks back
    if (lane == 31) s_warp[par][warp] = incl;
    __syncthreads();
    if (prof_on) prof_row[2] = clock64() - c0;
    if (warp == 0) {
      M w = lane < NW ? s_warp[par][lane] : identity_map<T, SOFT>();
      const M wincl = warp_scan(w, lane, g2, ig2);
      M wexcl = shfl_up(wincl, 1);
      if (lane == 0) wexcl = identity_map<T, SOFT>();
      const M total = shfl_idx(wincl, NW - 1);
      if (lane < NW) s_warp[par][lane] = wexcl;
      unsigned long long* rec = slots + ((long long)(q * ntiles + t) * rows + (i - row0)) * Rec::NREC;
      M run = M{INF, INF, INF, 0};
      if (t > 0) {
        if (lane == 0) Rec::publish_agg(rec, total);
        int reads = 0, windows = 0;
        run = look_back<T, SOFT>(rec, (long long)rows * Rec::NREC, t, lane, g2, ig2, reads, windows);
        if (prof_on) prof_row[6] = reads, prof_row[7] = windows;
      }
      // run is a constant map: the carry-in R[i, j0 - 1] is (run.H, run.s), soft run.A
      if (prof_on) prof_row[3] = clock64() - c0;
      if (lane == 0) {
        s_carry[par] = run;
        if (t + 1 < ntiles) {
          const M inc = compose(total, run, g2, ig2);
          Rec::publish_inc(rec, inc.H, inc.s, inc.A);
        }
      }
    }
    __syncthreads();
    if (prof_on) prof_row[4] = clock64() - c0;
    const M pre = compose(excl, s_warp[par][warp], g2, ig2);  // the tile's columns left of this thread
    cin = compose(pre, s_carry[par], g2, ig2);
    // ---- pass 2: this thread's columns from its carry-in
    {
      T rh = cin.H, rv = cin.A;
      int rs = cin.s;
      const T dh0 = dh;
      const int ds0 = ds;
      dh = rh, dv = rv, ds = rs;  // the next row's diagonal of the first column
      if (i == 0) {
        if (full) pass2_cols<T, COST, SOFT, DK, DR, CPT, true, true>(PASS2_ARGS);
        else pass2_cols<T, COST, SOFT, DK, DR, CPT, true, false>(PASS2_ARGS);
      } else {
        if (full) pass2_cols<T, COST, SOFT, DK, DR, CPT, false, true>(PASS2_ARGS);
        else pass2_cols<T, COST, SOFT, DK, DR, CPT, false, false>(PASS2_ARGS);
      }
    }
    if (prof_on) prof_row[5] = clock64() - c0;
  }
#pragma unroll
  for (int k = 0; k < CPT; ++k) {
    if (jb + k < L) {
      if constexpr (SOFT) out_v[qoff + jb + k] = pv[k];
      else out_v[qoff + jb + k] = ph[k];
      out_s[qoff + jb + k] = ps[k];
      if (SOFT && out_h != nullptr) out_h[qoff + jb + k] = ph[k];
    }
  }
}

// ---- the greedy pick of k matches --------------------------------------------------------------------------------

constexpr int SEL_CHUNK = 1024;  // ends per chunk (backends/cuda/search.py, SEL_CHUNK)
constexpr int SEL_THREADS = 256;
constexpr int GREEDY_THREADS = 1024;
constexpr int SEL_BATCH = 8;

// (value, index) with the smaller value first, the smaller index on ties; index -1: none.
template <typename T>
__device__ __forceinline__ void better(T& v, int& i, T ov, int oi) {
  if (oi >= 0 && (i < 0 || ov < v || (ov == v && oi < i))) v = ov, i = oi;
}

template <typename T>
__device__ __forceinline__ void warp_best(T& v, int& i) {
#pragma unroll
  for (int off = 16; off > 0; off /= 2) {
    const T ov = __shfl_down_sync(FULL_MASK, v, off);
    const int oi = __shfl_down_sync(FULL_MASK, i, off);
    better(v, i, ov, oi);
  }
}

// Per chunk of SEL_CHUNK ends, a warp each (SEL_THREADS / 32 chunks per block, chunks query-major): the chunk's best
// end (cv, ci; values < inf only, the first on ties) and its smallest start (cmin).
template <typename T>
__global__ void __launch_bounds__(SEL_THREADS) select_chunks_kernel(const T* __restrict__ v, const int* __restrict__ st,
                                                                    int L, int nch, int Q, T* __restrict__ cv,
                                                                    int* __restrict__ ci, int* __restrict__ cmin) {
  const int lane = threadIdx.x & 31;
  const long long gc = (long long)blockIdx.x * (SEL_THREADS / 32) + (threadIdx.x >> 5);
  if (gc >= (long long)Q * nch) return;
  const int q = int(gc / nch), c = int(gc - (long long)q * nch);
  const long long off = (long long)q * L;
  const int lo = c * SEL_CHUNK, hi = min(L, lo + SEL_CHUNK);
  T bv = inf_v<T>();
  int bi = -1, mn = 0x7fffffff;
  for (int m0 = 0; m0 < SEL_CHUNK / 32; m0 += SEL_BATCH) {
    T xs[SEL_BATCH];
    int ss[SEL_BATCH];
#pragma unroll
    for (int b = 0; b < SEL_BATCH; ++b) {
      const int j = lo + lane + 32 * (m0 + b);
      xs[b] = j < hi ? v[off + j] : inf_v<T>();
      ss[b] = j < hi ? st[off + j] : 0x7fffffff;
    }
#pragma unroll
    for (int b = 0; b < SEL_BATCH; ++b) {
      if (xs[b] < bv) bv = xs[b], bi = lo + lane + 32 * (m0 + b);
      mn = min(mn, ss[b]);
    }
  }
  warp_best(bv, bi);
#pragma unroll
  for (int o = 16; o > 0; o /= 2) mn = min(mn, __shfl_down_sync(FULL_MASK, mn, o));
  if (lane == 0) cv[gc] = bv, ci[gc] = bi, cmin[gc] = mn;
}

// The k rounds of the greedy pick, one block per query (grid Q). out_* `(Q, k)`: start, end (int64), value; -1, -1,
// +inf past the last match. cv, ci are updated in place.
template <typename T>
__global__ void __launch_bounds__(GREEDY_THREADS) select_greedy_kernel(
    const T* __restrict__ v, const int* __restrict__ st, int L, int nch, T* __restrict__ cv, int* __restrict__ ci,
    const int* __restrict__ cmin, int k, long long excl, long long* __restrict__ out_s, long long* __restrict__ out_e,
    T* __restrict__ out_v) {
  constexpr int NW = GREEDY_THREADS / 32;
  constexpr int AFF_MAX = 1024;
  __shared__ T sv[NW];
  __shared__ int si[NW];
  __shared__ int s_aff[AFF_MAX];
  __shared__ int s_naff;
  const int q = blockIdx.x;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const long long off = (long long)q * L;
  T* cvq = cv + (long long)q * nch;
  int* ciq = ci + (long long)q * nch;
  const int* cmq = cmin + (long long)q * nch;
  long long* os = out_s + (long long)q * k;
  long long* oe = out_e + (long long)q * k;
  T* ov = out_v + (long long)q * k;
  for (int r = 0; r < k; ++r) {
    T bv = inf_v<T>();
    int bi = -1;
#pragma unroll 8
    for (int c = threadIdx.x; c < nch; c += GREEDY_THREADS) better(bv, bi, cvq[c], ciq[c]);
    warp_best(bv, bi);
    if (lane == 0) sv[warp] = bv, si[warp] = bi;
    __syncthreads();
    if (warp == 0) {
      bv = sv[lane], bi = si[lane];
      warp_best(bv, bi);
      if (lane == 0) sv[0] = bv, si[0] = bi;
    }
    __syncthreads();
    const int e = si[0];
    const T best = sv[0];
    if (e < 0) {  // no live end left: the rest stays -1, -1, +inf
      for (int p = r + threadIdx.x; p < k; p += GREEDY_THREADS) os[p] = -1, oe[p] = -1, ov[p] = inf_v<T>();
      return;
    }
    const int s = st[off + e];
    if (threadIdx.x == 0) os[r] = s, oe[r] = e, ov[r] = best, s_naff = 0;
    __syncthreads();  // the pick in os / oe before the re-scans read it (and sv / si read before the next round)
    // re-scan every chunk the pick can touch: near e, or holding an end j >= s whose start may be <= e. The chunks
    // are listed first (independent loads, one pass), then a warp re-scans each listed chunk.
#pragma unroll 4
    for (int c = threadIdx.x; c < nch; c += GREEDY_THREADS) {
      const long long lo = (long long)c * SEL_CHUNK, hi = min((long long)L, lo + SEL_CHUNK) - 1;
      const int cm = cmq[c];
      if ((hi >= e - excl && lo <= e + excl) || (hi >= s && cm <= e)) {
        const int slot = atomicAdd(&s_naff, 1);
        if (slot < AFF_MAX) s_aff[slot] = c;
      }
    }
    __syncthreads();
    const int naff = s_naff;
    for (int a = warp; a < (naff <= AFF_MAX ? naff : nch); a += NW) {  // more than AFF_MAX: every chunk
      const int cc = naff <= AFF_MAX ? s_aff[a] : a;
      const int lo = cc * SEL_CHUNK, hi = min(L, lo + SEL_CHUNK);
      T lv = inf_v<T>();
      int li = -1;
      for (int m0 = 0; m0 < SEL_CHUNK / 32; m0 += SEL_BATCH) {  // SEL_BATCH loads in flight per lane
        T xs[SEL_BATCH];
        int ss[SEL_BATCH];
#pragma unroll
        for (int b = 0; b < SEL_BATCH; ++b) {
          const int j = lo + lane + 32 * (m0 + b);
          xs[b] = j < hi ? v[off + j] : inf_v<T>();
          ss[b] = j < hi ? st[off + j] : 0;
        }
#pragma unroll
        for (int b = 0; b < SEL_BATCH; ++b) {
          if (xs[b] < lv) {
            const int j = lo + lane + 32 * (m0 + b);
            bool alive = true;
            for (int p = 0; p <= r && alive; ++p) {
              const long long pe = oe[p], ps = os[p];
              alive = !(llabs((long long)j - pe) <= excl || (ss[b] <= pe && j >= ps));
            }
            if (alive) lv = xs[b], li = j;
          }
        }
      }
      warp_best(lv, li);
      if (lane == 0) cvq[cc] = lv, ciq[cc] = li;
    }
    __syncthreads();  // the chunks' new bests before the next round's argmin
  }
}

#undef PASS1_ARGS
#undef PASS2_ARGS

}  // namespace search
}  // namespace sdtw
