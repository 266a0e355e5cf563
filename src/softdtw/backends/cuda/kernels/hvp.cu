// Soft-DTW Hessian-vector product (issue 24, SECOND_ORDER.md): for each pair, along a direction (Cdot, gamma_dot),
//   E = dv/dC, vgamma = dv/dgamma, Edot = d/dt E(C + t Cdot, gamma + t gamma_dot), vgamma_dot likewise,
// with v = R[n-1, m-1] (Mensch & Blondel 2018, in the conventions of DESIGN.md).
//
// Design (first version, written to be obviously right): one block per pair, threads over the rows of an
// anti-diagonal (looping when the diagonal is longer than the block), one __syncthreads per anti-diagonal.
//   Pass 1 (forward, diagonal 0 up to n + m - 2): R' = R / (gamma ln 2) (log2 units) and Rdot of every cell,
//     Rdot_s = Cdot_s + sum_p w_{p->s} Rdot_p + gamma_dot H_s, H_s = sum_p w log w.
//   Pass 2 (backward, from the end cell down to diagonal 0): E, Edot and, edge by edge, the per-pair sums
//     vgamma = sum_s E_s H_s and vgamma_dot = sum_s Edot_s H_s + E_s Hdot_s, both sums over the edges p -> s of
//     E_s w log w and (w (Edot_s + E_s a)) log w, so every term is formed where the edge's weight is.
//     wdot_{p->s} = w a,  a = (Sdot_s - Rdot_p - gamma_dot log w) / gamma.
// Working memory: a (B, N, M) table per quantity, stored diagonal-major (cells of one anti-diagonal contiguous,
// so a diagonal's reads and writes coalesce): R' and Q (Rdot; pass 2 turns it into Sdot in place, and R' into
// S', once the cell is done) in float64 for every data dtype, and E and Edot in the data dtype. A float32 R' of
// a long path loses ulp(|R'|) in every weight; a float32 Rdot grows like the path's length (gamma_dot H_s adds
// up to -ln 3 a cell) and loses ulp(|Rdot|) in wdot's difference Sdot_s - Rdot_p, divided by gamma (float32
// vgamma_dot was 5e-3 off at gamma = 10, N = 1000). So Rdot is a float64 sum, formed from differences of the
// predecessors' Rdot to that of the largest weight (weights in the data dtype then err only on those small
// differences, as on the cpu backend), and wdot's a = (Sdot_s - Rdot_p - gamma_dot ln w) / gamma and the
// vgamma, vgamma_dot terms are float64. Weights are 2^(S' - R') <= 1 with S' - R' computed in float64 and
// exponentiated in the data dtype: nothing is exponentiated upwards, every factor is <= 1, w log w lies in
// [-1/e, 0].
//
// Forbidden cells (+inf cost, outside the window or the pair's lengths) and unreachable cells hold the
// sentinel R' = 1e200 and Rdot = 0, and are skipped as successors; their E and Edot are 0. A pair whose end
// cell is unreachable (value +inf) gets all four outputs 0. gamma == 0 is hard DTW: R in the data dtype with
// the first-order kernels' tie-breaking (diagonal, up, left: hard_min3), the argmin stored in Q, E the
// argmin path, vgamma = Edot = vgamma_dot = 0 (the derivative almost everywhere).
//
// Alignment variants (hvp_kernel's VAR, the bit mask of common.cuh's Variant; VAR = 0 is the plain kernel;
// SECOND_ORDER.md, "Variants"): the step penalty p (log2 units in R') and its direction p-dot (in R-dot) are added to
// the up and left predecessors in pass 1 and to p's R', R-dot on the up and left edges in pass 2 (hvp_edge), whose
// E terms of those edges sum to vpen and vpen_dot. Open begin: row 0's diagonal predecessor is the virtual start
// (R' = 0, R-dot = 0) at every column. Open end: between the passes a block reduction over the last row gives the
// end node T's soft-min (hvp_end); its shares of E and E-dot wait in the outputs E, E-dot of the last row, which
// pass 2 reads there instead of the 1 at (n - 1, m - 1).
#include "common.cuh"

namespace sdtw {

template <typename T>
struct HvpArgs {
  const T* C;             // (B, N, M)
  const T* Cdot;          // (B, N, M)
  const T* gamma_dot;     // (B,)
  const long long* xlen;  // (B,)
  const long long* ylen;  // (B,)
  const int* window;      // (B, N, 2) or unused
  double* R;              // (B, N * M) scratch, diagonal-major: R' then S'
  double* Q;              // (B, N * M) scratch, diagonal-major: Rdot then Sdot (hard: the argmin)
  T* EF;                  // (B, 2, N * M) scratch, diagonal-major: E, Edot (hvp_kernel only; past Q's end)
  T* E;                   // (B, N, M)
  T* Edot;                // (B, N, M)
  T* vgamma;              // (B,)
  T* vgamma_dot;          // (B,)
  int N, M;
  HvpVar<T> var;          // the alignment variants' arguments (VAR_PENALTY instantiations only; common.cuh)
};

constexpr double HVP_BIG = 1e200;   // R' of a forbidden or unreachable cell
constexpr double HVP_HALF = 1e199;  // anything at least this large is the sentinel
constexpr double HVP_LWMIN = -2000.0;  // log2 weights below this are 0 (2^-2000 underflows in float and double)
constexpr int HVP_MAX_THREADS = 256;   // threads per block at most (hvp.py, HVP_THREADS)

// Cells (i, j) of the N x M grid with i + j < d: where diagonal d starts in the diagonal-major tables.
// Row i < min(N, d) holds min(M, d - i) of them: M for the first a = clamp(d - M + 1, 0, r) rows.
__device__ __forceinline__ long long hvp_diag_offset(int d, int N, int M) {
  if (d <= 0) return 0;
  const long long r = min(N, d);
  const long long a = max(0LL, min(r, (long long)d - M + 1));
  return a * M + (r - a) * d - (r - a) * (r + a - 1) / 2;
}

// Where diagonal d's cells lie: cell (i, d - i) at base + i (base = offset(d) - first row of d in the grid).
__device__ __forceinline__ long long hvp_diag_base(int d, int N, int M) {
  return hvp_diag_offset(d, N, M) - max(0, d - M + 1);
}

// Largest finite value: a cost above it (+inf, or NaN, which fails every comparison) marks a forbidden cell.
template <typename T>
__device__ __forceinline__ T hvp_finite_max() { return sizeof(T) == 4 ? T(3.402823466e38f) : T(1.7976931348623157e308); }

template <typename T>
__device__ __forceinline__ T hvp_clamp_lw(T v) {
  return Num<T>::mx(Num<T>::mn(v, T(0)), T(HVP_LWMIN));
}

// Rdot_s = Cdot_s + sum_p w_p Rdot_p + gamma_dot H_s in float64, as Rdot_r + sum_p w_p (Rdot_p - Rdot_r) + ...
// with r the predecessor of largest weight (R'_r = mn): the weights (data dtype) multiply only differences of
// neighbours' Rdot, which stay small while Rdot grows like the path's length. A forbidden predecessor has
// weight 0 and Rdot 0: its difference is finite.
template <typename T>
__device__ __forceinline__ double hvp_rdot(double mn, double Rd, double Ru, double Qd, double Qu, double Ql, T wd,
                                           T wu, T wl, T cdot, T gH) {
  const double Qr = mn == Rd ? Qd : (mn == Ru ? Qu : Ql);
  return Qr + double(wd * T(Qd - Qr) + wu * T(Qu - Qr) + wl * T(Ql - Qr) + gH) + double(cdot);
}

// One edge p -> s of the backward pass (s a successor of p, reached as "diagonal" (rel 0), "up" (1) or "left"
// (2)): adds s's share to p's E and E-dot and the edge's terms of vgamma and vgamma_dot. Rp, Qp: p's R' and
// R-dot; Ss, Qs: s's S' and S-dot (hard DTW: Qs holds s's argmin); es, eds: s's E and E-dot.
//   w = 2^(S'_s - R'_p),  a = wdot / w = (Sdot_s - Rdot_p - gamma_dot ln w) / gamma.
// PEN (the step penalty, VAR_PENALTY): Rp, Qp already carry it on the up and left edges (rel 1, 2), whose terms
// E_s w and E-dot_s w + E_s wdot are added to vp, vpd too.
template <typename T, bool HARD, bool PEN = false>
__device__ __forceinline__ void hvp_edge(int rel, double Rp, double Qp, double Ss, double Qs, T es, T eds, T gd, double ig,
                                         T& e, double& ed, double& vg, double& vgd, double* vp = nullptr,
                                         double* vpd = nullptr) {
  if (HARD) {
    if (int(Qs) == rel) {
      e += es;
      if (PEN && rel != 0) *vp += double(es);
    }
    return;
  }
  const T lw2 = hvp_clamp_lw(T(Ss - Rp));  // log2 of p's weight in s's soft-min, <= 0
  const T w = Num<T>::ex2(lw2);
  const double lw = LN2 * double(lw2);
  const double aa = (Qs - Qp - double(gd) * lw) * ig;
  const double t = double(w) * (double(eds) + double(es) * aa);
  e += es * w;
  ed += t;
  vg += double(es) * double(w) * lw;
  vgd += t * lw;
  if (PEN && rel != 0) {
    *vp += double(es) * double(w);
    *vpd += t;
  }
}

// Block sums of vgamma and vgamma_dot (one block per pair: no atomics), written by thread 0; 0 for hard DTW.
// red: 2 * MAXT / 32 doubles of shared memory.
template <typename T, bool HARD, int MAXT>
__device__ __forceinline__ void hvp_block_sums(double vg, double vgd, double* red, T* out_vg, T* out_vgd) {
  const int tid = threadIdx.x, nt = blockDim.x;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    vg += __shfl_xor_sync(FULL_MASK, vg, o);
    vgd += __shfl_xor_sync(FULL_MASK, vgd, o);
  }
  const int warp = tid >> 5, nw = (nt + 31) >> 5;
  if ((tid & 31) == 0) {
    red[warp] = vg;
    red[MAXT / 32 + warp] = vgd;
  }
  __syncthreads();
  if (tid == 0) {
    double s = 0.0, sd = 0.0;
    for (int w = 0; w < nw; ++w) {
      s += red[w];
      sd += red[MAXT / 32 + w];
    }
    *out_vg = HARD ? T(0) : T(s);
    *out_vgd = HARD ? T(0) : T(sd);
  }
}

// The variants' predecessors of cell (i, .) in pass 1 (hvp_kernel, hvp_fast_kernel): open begin's virtual start as
// row 0's diagonal predecessor (R' = R-dot = 0), the step penalty on the up and left edges (soft-min: R' and R-dot;
// hard DTW takes it in the data dtype at its hard_min3).
template <bool OB, bool PEN, bool HARD>
__device__ __forceinline__ void hvp_var_preds(int i, double& Rd, double& Qd, double& Ru, double& Qu, double& Rl,
                                              double& Ql, double pen2, double pdot) {
  if (OB && i == 0) Rd = Qd = 0.0;
  if (PEN && !HARD) {
    Ru += pen2;
    Qu += pdot;
    Rl += pen2;
    Ql += pdot;
  }
}

// One edge p -> s of pass 2 with the variants: hvp_edge with p's R', R-dot on a penalised edge (rel 1, 2), whose
// terms go to vp, vpd too.
template <typename T, bool HARD, bool PEN>
__device__ __forceinline__ void hvp_var_edge(int rel, double Rp, double Qp, double Ss, double Qs, T es, T eds, T gd,
                                             double ig, T& e, double& ed, double& vg, double& vgd, double pen2,
                                             double pdot, double& vp, double& vpd) {
  if constexpr (PEN) {
    const double pr = rel != 0 ? pen2 : 0.0, pq = rel != 0 ? pdot : 0.0;
    hvp_edge<T, HARD, true>(rel, Rp + pr, Qp + pq, Ss, Qs, es, eds, gd, ig, e, ed, vg, vgd, &vp, &vpd);
  } else {
    hvp_edge<T, HARD>(rel, Rp, Qp, Ss, Qs, es, eds, gd, ig, e, ed, vg, vgd);
  }
}

// Open begin: the edge from the virtual start (R' = 0, R-dot = 0) to a cell s of row 0 is no cell's edge to a
// successor, so pass 2 adds its terms of vgamma and vgamma_dot where s is done (S's, Qs: s's S' and S-dot; es, eds:
// its E and E-dot). Without an open begin that edge reaches (0, 0) alone, with weight 1: no terms.
template <typename T, bool HARD>
__device__ __forceinline__ void hvp_start_edge(double Ss, double Qs, T es, T eds, T gd, double ig, double& vg,
                                               double& vgd) {
  if (HARD) return;
  T e = T(0);
  double ed = 0.0;
  hvp_edge<T, false>(0, 0.0, 0.0, Ss, Qs, es, eds, gd, ig, e, ed, vg, vgd);
}

// Sums (MIN: minima) of a and b over the block, the same in every thread (one order of operations). red: as
// hvp_block_sums'; free again when it returns.
template <int MAXT, bool MIN>
__device__ __forceinline__ void hvp_block_all2(double& a, double& b, double* red) {
  const int tid = threadIdx.x, nw = (blockDim.x + 31) >> 5;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const double oa = __shfl_xor_sync(FULL_MASK, a, o), ob = __shfl_xor_sync(FULL_MASK, b, o);
    a = MIN ? fmin(a, oa) : a + oa;
    b = MIN ? fmin(b, ob) : b + ob;
  }
  __syncthreads();  // earlier readers of red are done
  if ((tid & 31) == 0) {
    red[tid >> 5] = a;
    red[MAXT / 32 + (tid >> 5)] = b;
  }
  __syncthreads();
  a = red[0];
  b = red[MAXT / 32];
  for (int w = 1; w < nw; ++w) {
    a = MIN ? fmin(a, red[w]) : a + red[w];
    b = MIN ? fmin(b, red[MAXT / 32 + w]) : b + red[MAXT / 32 + w];
  }
  __syncthreads();
}

// Open end (SECOND_ORDER.md, "Variants"): the node T after the last row, R'_T = smin_{j < m} R'[n - 1, j], from the
// tables of pass 1 (R' and R-dot at position at(j) of Rb, Qb). Writes T's shares of the last row's E and E-dot,
// w_j = 2^(R'_T - R'_j) and wdot_j = w_j (R-dot_T - R-dot_j - gamma_dot ln w_j) / gamma with R-dot_T = sum_j w_j R-dot_j
// + gamma_dot H_T, to Eo, Fo (row n - 1; 0 on dead cells, and everywhere when no cell is finite), and adds the
// thread's terms of H_T = sum_j w_j ln w_j and H-dot_T = sum_j wdot_j ln w_j to vg, vgd. Hard DTW: one-hot on the
// first argmin (the first-order kernels' choice). Float64 (once per pair).
template <typename T, bool HARD, int MAXT, typename At>
__device__ __forceinline__ void hvp_end(const double* Rb, const double* Qb, At at, const int m, T* Eo, T* Fo,
                                        const T gd, const double ig, double& vg, double& vgd, double* red) {
  const int tid = threadIdx.x, nt = blockDim.x;
  double mn = HVP_BIG, unused = 0.0;
  for (int j = tid; j < m; j += nt) mn = fmin(mn, Rb[at(j)]);
  hvp_block_all2<MAXT, true>(mn, unused, red);
  if (HARD) {
    double first = 1e300;  // the first column holding the minimum
    if (mn < HVP_HALF)
      for (int j = tid; j < m; j += nt)
        if (Rb[at(j)] == mn) { first = double(j); break; }
    hvp_block_all2<MAXT, true>(first, unused, red);
    for (int j = tid; j < m; j += nt) {
      Eo[j] = double(j) == first ? T(1) : T(0);
      Fo[j] = T(0);
    }
    __syncthreads();
    return;
  }
  double z = 0.0, s = 0.0, h = 0.0;  // sums of e_j = 2^(R'_min - R'_j), e_j R-dot_j, e_j (R'_min - R'_j)
  if (mn < HVP_HALF)
    for (int j = tid; j < m; j += nt) {
      const double r = Rb[at(j)];
      const double e = r < HVP_HALF ? exp2(mn - r) : 0.0;
      z += e;
      s += e * Qb[at(j)];
      h += e * (mn - r);
    }
  hvp_block_all2<MAXT, false>(z, s, red);
  hvp_block_all2<MAXT, false>(h, unused, red);
  const bool any = mn < HVP_HALF;
  const double lz = any ? log2(z) : 0.0, iz = any ? 1.0 / z : 0.0;
  const double QT = s * iz + double(gd) * LN2 * (h * iz - lz);  // R-dot_T
  for (int j = tid; j < m; j += nt) {
    const double r = Rb[at(j)];
    T ew = T(0), fw = T(0);
    if (any && r < HVP_HALF) {
      const double w = exp2(mn - r) * iz, lnw = LN2 * ((mn - r) - lz);
      const double wd = w * (QT - Qb[at(j)] - double(gd) * lnw) * ig;
      ew = T(w);
      fw = T(wd);
      vg += w * lnw;
      vgd += wd * lnw;
    }
    Eo[j] = ew;
    Fo[j] = fw;
  }
  __syncthreads();
}

template <typename T, bool WINDOW, bool HARD, int VAR = 0>
__device__ void hvp_pair(const HvpArgs<T>& a, const int b, const T g, double* red) {
  constexpr bool OB = (VAR & VAR_OPEN_BEGIN) != 0, OE = (VAR & VAR_OPEN_END) != 0, PEN = (VAR & VAR_PENALTY) != 0;
  const int N = a.N, M = a.M;
  const int n = int(a.xlen[b]), m = int(a.ylen[b]);
  const int tid = threadIdx.x, nt = blockDim.x;
  const size_t NM = size_t(N) * M;
  const T* Cb = a.C + size_t(b) * NM;
  const T* Db = a.Cdot + size_t(b) * NM;
  const int* wb = a.window + size_t(b) * N * 2;
  double* Rb = a.R + size_t(b) * NM;
  double* Qb = a.Q + size_t(b) * NM;
  T* Eb = a.EF + size_t(b) * 2 * NM;
  T* Fb = Eb + NM;  // Edot
  T* Eo = a.E + size_t(b) * NM;
  T* Fo = a.Edot + size_t(b) * NM;
  const double scale = HARD ? 1.0 : 1.0 / (double(g) * LN2);
  const T gd = HARD ? T(0) : a.gamma_dot[b];
  const double ig = HARD ? 0.0 : 1.0 / double(g);
  const T BIGT = Num<T>::big();
  // Step penalty: in the data dtype for hard DTW (natural units, the first-order kernels' arithmetic), else in R'
  // (log2 units); its direction in R-dot's natural units.
  const T penT = PEN ? a.var.pen[size_t(b) * a.var.pen_stride] : T(0);
  const double pen2 = (PEN && !HARD) ? double(penT) * scale : 0.0;
  const double pdot = (PEN && !HARD) ? double(a.var.pdot[size_t(b) * a.var.pdot_stride]) : 0.0;

  // Outputs outside the pair: rows past n, and columns past m of the first n rows.
  for (size_t q = size_t(n) * M + tid; q < NM; q += nt) { Eo[q] = T(0); Fo[q] = T(0); }
  for (int i = 0; i < n; ++i)
    for (int j = m + tid; j < M; j += nt) { Eo[size_t(i) * M + j] = T(0); Fo[size_t(i) * M + j] = T(0); }

  // ---- pass 1: R' and Rdot (hard: R and the argmin) -------------------------------------------------------
  for (int d = 0; d <= n + m - 2; ++d) {
    const int ilo = max(0, d - m + 1), ihi = min(n - 1, d);
    const long long b0 = hvp_diag_base(d, N, M), b1 = hvp_diag_base(d - 1, N, M), b2 = hvp_diag_base(d - 2, N, M);
    for (int i = ilo + tid; i <= ihi; i += nt) {
      const int j = d - i;
      const size_t q = size_t(i) * M + j;
      const T c = Cb[q];
      bool ok = c <= hvp_finite_max<T>();  // +inf: a forbidden cell (NaN too: never read as a number)
      if (WINDOW) ok = ok && j >= wb[2 * i] && j < wb[2 * i + 1];
      // Predecessors: diagonal (i-1, j-1), up (i-1, j), left (i, j-1); the virtual start R[-1, -1] = 0.
      double Rd = HVP_BIG, Ru = HVP_BIG, Rl = HVP_BIG;
      double Qd = 0.0, Qu = 0.0, Ql = 0.0;
      if (i == 0 && j == 0) {
        Rd = 0.0;
      } else if (i > 0 && j > 0) {
        Rd = Rb[b2 + i - 1];
        Qd = Qb[b2 + i - 1];
      }
      if (i > 0) { Ru = Rb[b1 + i - 1]; Qu = Qb[b1 + i - 1]; }
      if (j > 0) { Rl = Rb[b1 + i]; Ql = Qb[b1 + i]; }
      if constexpr (OB || PEN) hvp_var_preds<OB, PEN, HARD>(i, Rd, Qd, Ru, Qu, Rl, Ql, pen2, pdot);
      double Rs = HVP_BIG;
      double Qs = 0.0;
      if (ok) {
        if (HARD) {
          // In the data dtype with the first-order kernels' sentinel and tie-breaking, so the path is theirs.
          const T dT = Rd >= HVP_HALF ? BIGT : T(Rd), uT = Ru >= HVP_HALF ? BIGT : T(Ru), lT = Rl >= HVP_HALF ? BIGT : T(Rl);
          int choice;
          const T mn = PEN ? hard_min3(dT, uT + penT, lT + penT, choice) : hard_min3(dT, uT, lT, choice);
          if (mn < T(0.5) * BIGT) {
            Rs = double(mn + c);
            Qs = double(choice);
          }
        } else {
          const double mn = fmin(Rd, fmin(Ru, Rl));
          if (mn < HVP_HALF) {
            const T od = hvp_clamp_lw(T(mn - Rd)), ou = hvp_clamp_lw(T(mn - Ru)), ol = hvp_clamp_lw(T(mn - Rl));
            const T ed = Num<T>::ex2(od), eu = Num<T>::ex2(ou), el = Num<T>::ex2(ol);
            const T Z = ed + eu + el;  // >= 1: the minimum's term is 2^0
            const T lz = Num<T>::lg2(Z);
            const T iz = T(1) / Z;
            const T wd = ed * iz, wu = eu * iz, wl = el * iz;
            // H = sum_p w log w (natural log); a zero weight's log2 is clamped, so w log w = 0 there.
            const T H = T(LN2) * (wd * (od - lz) + wu * (ou - lz) + wl * (ol - lz));
            Qs = hvp_rdot<T>(mn, Rd, Ru, Qd, Qu, Ql, wd, wu, wl, Db[q], gd * H);
            Rs = (mn - double(lz)) + double(c) * scale;
          }
        }
      }
      Rb[b0 + i] = Rs;
      Qb[b0 + i] = Qs;
    }
    __syncthreads();
  }

  // ---- pass 2: E, Edot, vgamma, vgamma_dot from the end cell back ------------------------------------------
  double vg = 0.0, vgd = 0.0;
  double vp = 0.0, vpd = 0.0;  // step penalty: vpen, vpen_dot
  if constexpr (OE) {  // T's shares of the last row, into the outputs E, E-dot of row n - 1 (read back in pass 2)
    const int last = n - 1;
    auto at = [&](int j) { return hvp_diag_base(last + j, N, M) + last; };
    hvp_end<T, HARD, HVP_MAX_THREADS>(Rb, Qb, at, m, Eo + size_t(last) * M, Fo + size_t(last) * M, gd, ig, vg, vgd,
                                       red);
  }
  for (int d = n + m - 2; d >= 0; --d) {
    const int ilo = max(0, d - m + 1), ihi = min(n - 1, d);
    const long long b0 = hvp_diag_base(d, N, M), b1 = hvp_diag_base(d + 1, N, M), b2 = hvp_diag_base(d + 2, N, M);
    for (int i = ilo + tid; i <= ihi; i += nt) {
      const int j = d - i;
      const size_t q = size_t(i) * M + j;
      const long long p0 = b0 + i;
      const double Rp = Rb[p0];
      const double Qp = Qb[p0];
      T e = T(0);
      double ed = 0.0;
      double Sout = HVP_BIG;
      double Qout = 0.0;
      if (Rp < HVP_HALF) {  // allowed and reachable
        if (!OE && i == n - 1 && j == m - 1) {
          e = T(1);
        } else {
          if (OE && i == n - 1) {  // the end node T's shares (hvp_end)
            e = Eo[q];
            ed = double(Fo[q]);
          }
          // Successors s of p: (i+1, j) takes p as "up" (choice 1), (i, j+1) as "left" (2), (i+1, j+1) as
          // "diagonal" (0). Positions in the tables: diagonal d + 1 at rows i + 1 and i, d + 2 at row i + 1.
#pragma unroll
          for (int rel = 0; rel < 3; ++rel) {
            const bool exists = rel == 0 ? (i + 1 < n && j + 1 < m) : (rel == 1 ? i + 1 < n : j + 1 < m);
            if (!exists) continue;
            const long long ps = rel == 0 ? b2 + i + 1 : (rel == 1 ? b1 + i + 1 : b1 + i);
            const double Ss = Rb[ps];
            if (Ss >= HVP_HALF) continue;  // forbidden or unreachable successor
            hvp_var_edge<T, HARD, PEN>(rel, Rp, Qp, Ss, Qb[ps], Eb[ps], Fb[ps], gd, ig, e, ed, vg, vgd, pen2, pdot,
                                       vp, vpd);
          }
        }
        if (HARD) {
          Sout = Rp;  // any value below the sentinel: s is allowed; Q keeps the argmin
          Qout = Qp;
        } else {
          Sout = Rp - double(Cb[q]) * scale;  // S' = R' - C'
          Qout = Qp - double(Db[q]);          // Sdot = Rdot - Cdot
        }
        if (OB && i == 0) hvp_start_edge<T, HARD>(Sout, Qout, e, T(ed), gd, ig, vg, vgd);
      }
      Rb[p0] = Sout;
      Qb[p0] = Qout;
      Eb[p0] = e;
      Fb[p0] = T(ed);
      Eo[q] = e;
      Fo[q] = T(ed);
    }
    __syncthreads();
  }

  hvp_block_sums<T, HARD, HVP_MAX_THREADS>(vg, vgd, red, a.vgamma + b, a.vgamma_dot + b);
  if constexpr (PEN) {  // (hard DTW: vpen is the path's number of moves, vpen_dot 0)
    __syncthreads();  // thread 0 has read red
    hvp_block_sums<T, false, HVP_MAX_THREADS>(vp, HARD ? 0.0 : vpd, red, a.var.vpen + b, a.var.vpen_dot + b);
  }
}

// Grid: B blocks (one per pair) of a multiple of 32 threads, at most HVP_MAX_THREADS. Q: B·N·M float64 (R-dot)
// followed by 2·B·N·M values of T (E, E-dot). VAR: the alignment variants (common.cuh, Variant); pen, pen_stride,
// pdot, pdot_stride, vpen, vpen_dot are read or written by the VAR_PENALTY instantiations only.
template <typename T, bool WINDOW, int VAR = 0>
__global__ void __launch_bounds__(HVP_MAX_THREADS)
hvp_kernel(const T* __restrict__ C, const T* __restrict__ Cdot, const T* __restrict__ gamma,
           const T* __restrict__ gamma_dot, const long long* __restrict__ xlen, const long long* __restrict__ ylen,
           const int* __restrict__ window, double* R, double* Q, T* __restrict__ E, T* __restrict__ Edot,
           T* __restrict__ vgamma, T* __restrict__ vgamma_dot, int B, int N, int M, const T* __restrict__ pen,
           int pen_stride, const T* __restrict__ pdot, int pdot_stride, T* __restrict__ vpen, T* __restrict__ vpen_dot) {
  __shared__ double red[2 * HVP_MAX_THREADS / 32];
  const int b = blockIdx.x;
  if (b >= B) return;
  T* EF = reinterpret_cast<T*>(Q + size_t(B) * N * M);  // the E and E-dot tables follow R-dot's
  HvpArgs<T> a{C, Cdot, gamma_dot, xlen, ylen, window, R, Q, EF, E, Edot, vgamma, vgamma_dot, N, M};
  if constexpr (VAR != 0) a.var = HvpVar<T>{pen, pen_stride, pdot, pdot_stride, vpen, vpen_dot};
  const T g = *gamma;  // read on the device: no host sync
  if (g == T(0)) {
    hvp_pair<T, WINDOW, true, VAR>(a, b, g, red);
  } else {
    hvp_pair<T, WINDOW, false, VAR>(a, b, g, red);
  }
}


// ================================================================================================================
// Second version (hvp_fast_kernel, used up to N = HVPF_MAX_THREADS * HVPF_MAX_RPT rows; hvp_kernel above beyond):
// the same two passes, recursions and conventions, with nothing on the step's critical path in global memory
// and C, C-dot, E, E-dot accessed 16 bytes at a time (benchmarks/OPTIMIZATION_LOG.md, "hvp_cost, second
// version").
//   * Thread t owns the RPT consecutive rows t·RPT .. t·RPT + RPT - 1 (rows past n idle). Within a thread the
//     neighbouring row's and its own row's previous cells are registers; the diagonal neighbour (d - 2 in
//     pass 1, d + 2 in pass 2) is the previous step's up (down) neighbour, carried in a register. Only the
//     thread's last row (pass 1) / first row (pass 2) crosses threads, through a 2-slot shared ring indexed by
//     thread: step d writes slot d & 1 and reads the other, so one barrier per anti-diagonal suffices.
//   * A thread walks along each of its rows, one column per step (j up in pass 1, down in pass 2). C and C-dot
//     are read in groups of G = 16 / sizeof(T) elements aligned in the whole tensor (one float4 / double2 load
//     per G steps, issued the step before the group is needed), and E, E-dot are collected in such groups and
//     stored 16 bytes at once (scalar loads / stores where a group leaves the row or the tensor, or the
//     pointers are not 16-byte aligned: vec == 0).
//   * Scratch: R' and R-dot (both float64, as in hvp_kernel), diagonal-major as in hvp_kernel; pass 2 keeps
//     S', S-dot, E, E-dot on chip instead of writing them back (S', S-dot in float64 registers and ring). Pass 2 loads the next step's R', R-dot before the barrier.
constexpr int HVPF_MAX_THREADS = 256;  // hvp.py, HVPF_THREADS
constexpr int HVPF_MAX_RPT = 4;        // rows per thread at most (hvp.py, HVPF_RPTS)

template <typename T> struct HvpVec;
template <> struct HvpVec<float> {
  static constexpr int G = 4;
  using V = float4;
  static __device__ __forceinline__ void unpack(const V& v, float (&g)[G]) { g[0] = v.x; g[1] = v.y; g[2] = v.z; g[3] = v.w; }
  static __device__ __forceinline__ V pack(const float (&g)[G]) { return make_float4(g[0], g[1], g[2], g[3]); }
};
template <> struct HvpVec<double> {
  static constexpr int G = 2;
  using V = double2;
  static __device__ __forceinline__ void unpack(const V& v, double (&g)[G]) { g[0] = v.x; g[1] = v.y; }
  static __device__ __forceinline__ V pack(const double (&g)[G]) { return make_double2(g[0], g[1]); }
};

// g = p[e0 .. e0 + G) (e0 a multiple of G; elements past the tensor's end read as 0).
template <typename T>
__device__ __forceinline__ void hvpf_load(const T* __restrict__ p, long long e0, long long total, bool vec,
                                          T (&g)[HvpVec<T>::G]) {
  constexpr int G = HvpVec<T>::G;
  if (vec && e0 + G <= total) {
    HvpVec<T>::unpack(__ldg(reinterpret_cast<const typename HvpVec<T>::V*>(p + e0)), g);
  } else {
#pragma unroll
    for (int x = 0; x < G; ++x) g[x] = e0 + x < total ? p[e0 + x] : T(0);
  }
}

// p[e0 + x] = g[x] for the elements in [lo, hi) (the owner's row).
template <typename T>
__device__ __forceinline__ void hvpf_store(T* __restrict__ p, long long e0, long long lo, long long hi, bool vec,
                                           const T (&g)[HvpVec<T>::G]) {
  constexpr int G = HvpVec<T>::G;
  if (vec && e0 >= lo && e0 + G <= hi) {
    *reinterpret_cast<typename HvpVec<T>::V*>(p + e0) = HvpVec<T>::pack(g);
  } else {
#pragma unroll
    for (int x = 0; x < G; ++x)
      if (e0 + x >= lo && e0 + x < hi) p[e0 + x] = g[x];
  }
}

template <typename T, int G>
__device__ __forceinline__ T hvpf_get(const T (&g)[G], int pos) {
  T v = g[0];
#pragma unroll
  for (int x = 1; x < G; ++x) v = pos == x ? g[x] : v;
  return v;
}

template <typename T, int G>
__device__ __forceinline__ void hvpf_set(T (&g)[G], int pos, T v) {
#pragma unroll
  for (int x = 0; x < G; ++x) g[x] = pos == x ? v : g[x];
}

template <typename T, bool WINDOW, bool HARD, int RPT, int VAR = 0>
__device__ void hvpf_pair(const HvpArgs<T>& a, const int b, const T g, const bool vec, const long long total,
                          double* sd, double* sq, T* st, double* red) {
  constexpr bool OB = (VAR & VAR_OPEN_BEGIN) != 0, OE = (VAR & VAR_OPEN_END) != 0, PEN = (VAR & VAR_PENALTY) != 0;
  constexpr int G = HvpVec<T>::G;
  constexpr int S = HVPF_MAX_THREADS;  // ring slot stride
  const int N = a.N, M = a.M;
  const int n = int(a.xlen[b]), m = int(a.ylen[b]);
  const int tid = threadIdx.x, nt = blockDim.x;
  const size_t NM = size_t(N) * M;
  const long long pairoff = (long long)b * (long long)NM;  // element index of the pair's C[0, 0] in the tensor
  const int* wb = a.window + size_t(b) * N * 2;
  double* Rb = a.R + size_t(b) * NM;
  double* Qb = a.Q + size_t(b) * NM;  // R-dot (hard: the argmin)
  T* Eo = a.E + pairoff;
  T* Fo = a.Edot + pairoff;
  const double scale = HARD ? 1.0 : 1.0 / (double(g) * LN2);
  const T gd = HARD ? T(0) : a.gamma_dot[b];
  const double ig = HARD ? 0.0 : 1.0 / double(g);
  const T BIGT = Num<T>::big();
  const int i0 = tid * RPT;
  // Step penalty (as hvp_pair): the data dtype for hard DTW, else R' (log2 units); its direction in R-dot's units.
  const T penT = PEN ? a.var.pen[size_t(b) * a.var.pen_stride] : T(0);
  const double pen2 = (PEN && !HARD) ? double(penT) * scale : 0.0;
  const double pdot = (PEN && !HARD) ? double(a.var.pdot[size_t(b) * a.var.pdot_stride]) : 0.0;

  // Outputs outside the pair: rows past n, and columns past m of the first n rows.
  for (size_t q = size_t(n) * M + tid; q < NM; q += nt) { Eo[q] = T(0); Fo[q] = T(0); }
  for (int i = 0; i < n; ++i)
    for (int j = m + tid; j < M; j += nt) { Eo[size_t(i) * M + j] = T(0); Fo[size_t(i) * M + j] = T(0); }

  int wlo[RPT], whi[RPT];
#pragma unroll
  for (int k = 0; k < RPT; ++k) {
    wlo[k] = 0;
    whi[k] = M;
    if (WINDOW && i0 + k < n) {
      wlo[k] = wb[2 * (i0 + k)];
      whi[k] = wb[2 * (i0 + k) + 1];
    }
  }
  T cg[RPT][G], dg[RPT][G];  // the current groups of C and C-dot of each row
#pragma unroll
  for (int k = 0; k < RPT; ++k)
#pragma unroll
    for (int x = 0; x < G; ++x) { cg[k][x] = T(0); dg[k][x] = T(0); }

  // ---- pass 1: R' and R-dot (hard: R and the argmin) -------------------------------------------------------
  {
    double Rl[RPT], Rg[RPT];  // the row's cell on d - 1 (left neighbour of the next), and the diagonal one
    double Ql[RPT], Qg[RPT];
#pragma unroll
    for (int k = 0; k < RPT; ++k) { Rl[k] = Rg[k] = HVP_BIG; Ql[k] = Qg[k] = 0.0; }
    // Groups for step d + 1: a row's first cell, or the first cell of a group.
    auto prefetch = [&](int d) {
#pragma unroll
      for (int k = 0; k < RPT; ++k) {
        const int i = i0 + k, jn = d + 1 - i;
        if (i < n && jn >= 0 && jn < m) {
          const long long e = pairoff + (long long)i * M + jn;
          if (jn == 0 || (e & (G - 1)) == 0) {
            const long long e0 = e & ~(long long)(G - 1);
            hvpf_load(a.C, e0, total, vec, cg[k]);
            if (!HARD) hvpf_load(a.Cdot, e0, total, vec, dg[k]);
          }
        }
      }
    };
    prefetch(-1);
    for (int d = 0; d <= n + m - 2; ++d) {
      const int cur = d & 1, prv = cur ^ 1;
      const long long b0 = hvp_diag_base(d, N, M);
      double Rup = HVP_BIG;  // the thread above's last row on d - 1
      double Qup = 0.0;
      if (tid > 0) { Rup = sd[prv * S + tid - 1]; Qup = sq[prv * S + tid - 1]; }
#pragma unroll
      for (int k = RPT - 1; k >= 0; --k) {  // downwards: row k reads row k - 1's cell on d - 1 before it moves
        const int i = i0 + k, j = d - i;
        if (i < n && j >= 0 && j < m) {
          const int pos = int((pairoff + (long long)i * M + j) & (G - 1));
          const T c = hvpf_get(cg[k], pos);
          bool ok = c <= hvp_finite_max<T>();  // +inf: a forbidden cell (NaN too)
          if (WINDOW) ok = ok && j >= wlo[k] && j < whi[k];
          // Predecessors: diagonal (i-1, j-1), up (i-1, j), left (i, j-1); the virtual start R[-1, -1] = 0.
          double Rd = HVP_BIG, Ru = HVP_BIG, Rlf = HVP_BIG;
          double Qd = 0.0, Qu = 0.0, Qlf = 0.0;
          if (i == 0 && j == 0) {
            Rd = 0.0;
          } else if (i > 0 && j > 0) {
            Rd = Rg[k];
            Qd = Qg[k];
          }
          if (i > 0) {
            Ru = k > 0 ? Rl[k > 0 ? k - 1 : 0] : Rup;
            Qu = k > 0 ? Ql[k > 0 ? k - 1 : 0] : Qup;
          }
          if (j > 0) { Rlf = Rl[k]; Qlf = Ql[k]; }
          Rg[k] = Ru;  // the next cell's diagonal neighbour
          Qg[k] = Qu;
          if constexpr (OB || PEN) hvp_var_preds<OB, PEN, HARD>(i, Rd, Qd, Ru, Qu, Rlf, Qlf, pen2, pdot);
          double Rs = HVP_BIG;
          double Qs = 0.0;
          if (ok) {
            if (HARD) {
              const T dT = Rd >= HVP_HALF ? BIGT : T(Rd), uT = Ru >= HVP_HALF ? BIGT : T(Ru),
                      lT = Rlf >= HVP_HALF ? BIGT : T(Rlf);
              int choice;
              const T mn = PEN ? hard_min3(dT, uT + penT, lT + penT, choice) : hard_min3(dT, uT, lT, choice);
              if (mn < T(0.5) * BIGT) {
                Rs = double(mn + c);
                Qs = double(choice);
              }
            } else {
              const double mn = fmin(Rd, fmin(Ru, Rlf));
              if (mn < HVP_HALF) {
                const T od = hvp_clamp_lw(T(mn - Rd)), ou = hvp_clamp_lw(T(mn - Ru)), ol = hvp_clamp_lw(T(mn - Rlf));
                const T ed = Num<T>::ex2(od), eu = Num<T>::ex2(ou), el = Num<T>::ex2(ol);
                const T Z = ed + eu + el;
                const T lz = Num<T>::lg2(Z);
                const T iz = T(1) / Z;
                const T wd = ed * iz, wu = eu * iz, wl = el * iz;
                const T H = T(LN2) * (wd * (od - lz) + wu * (ou - lz) + wl * (ol - lz));
                Qs = hvp_rdot<T>(mn, Rd, Ru, Qd, Qu, Qlf, wd, wu, wl, hvpf_get(dg[k], pos), gd * H);
                Rs = (mn - double(lz)) + double(c) * scale;
              }
            }
          }
          Rb[b0 + i] = Rs;
          Qb[b0 + i] = Qs;
          Rl[k] = Rs;
          Ql[k] = Qs;
        }
      }
      sd[cur * S + tid] = Rl[RPT - 1];
      sq[cur * S + tid] = Ql[RPT - 1];
      prefetch(d);
      __syncthreads();
    }
  }

  // ---- pass 2: E, Edot, vgamma, vgamma_dot from the end cell back ------------------------------------------
  double vg = 0.0, vgd = 0.0;
  double vp = 0.0, vpd = 0.0;  // step penalty: vpen, vpen_dot
  if constexpr (OE) {  // T's shares of the last row, into the outputs E, E-dot of row n - 1 (read back in pass 2)
    const int last = n - 1;
    auto at = [&](int j) { return hvp_diag_base(last + j, N, M) + last; };
    hvp_end<T, HARD, HVPF_MAX_THREADS>(Rb, Qb, at, m, Eo + size_t(last) * M, Fo + size_t(last) * M, gd, ig, vg, vgd,
                                        red);
  }
  {
    // The row's cell on d + 1 (its right successor, the row above's down successor): S', S-dot (hard: the
    // argmin), E, E-dot; and the diagonal successor (the previous step's down successor).
    double As[RPT], Gs[RPT], Rn[RPT], Aq[RPT], Gq[RPT], Qn[RPT];
    T Ae[RPT], Af[RPT], Ge[RPT], Gf[RPT];
    T eg[RPT][G], fg[RPT][G];  // E and E-dot of the current group
#pragma unroll
    for (int k = 0; k < RPT; ++k) {
      As[k] = Gs[k] = Rn[k] = HVP_BIG;
      Aq[k] = Gq[k] = Qn[k] = 0.0;
      Ae[k] = Af[k] = Ge[k] = Gf[k] = T(0);
#pragma unroll
      for (int x = 0; x < G; ++x) { eg[k][x] = T(0); fg[k][x] = T(0); }
    }
    T* se = st;
    T* sf = st + 2 * S;
    // R', R-dot of step d - 1's cells, and the groups of C, C-dot where a row or a group starts (going left).
    auto prefetch = [&](int d) {
      const long long bn = hvp_diag_base(d - 1, N, M);
#pragma unroll
      for (int k = 0; k < RPT; ++k) {
        const int i = i0 + k, jn = d - 1 - i;
        if (i < n && jn >= 0 && jn < m) {
          Rn[k] = Rb[bn + i];
          Qn[k] = Qb[bn + i];
          const long long e = pairoff + (long long)i * M + jn;
          if (!HARD && (jn == m - 1 || (e & (G - 1)) == G - 1)) {
            const long long e0 = e & ~(long long)(G - 1);
            hvpf_load(a.C, e0, total, vec, cg[k]);
            hvpf_load(a.Cdot, e0, total, vec, dg[k]);
          }
        }
      }
    };
    prefetch(n + m - 1);
    for (int d = n + m - 2; d >= 0; --d) {
      const int cur = d & 1, nxt = cur ^ 1;
      double Sdn = HVP_BIG, Qdn = 0.0;  // the thread below's first row on d + 1
      T Edn = T(0), Fdn = T(0);
      if (tid + 1 < nt) {
        Sdn = sd[nxt * S + tid + 1];
        Qdn = sq[nxt * S + tid + 1];
        Edn = se[nxt * S + tid + 1];
        Fdn = sf[nxt * S + tid + 1];
      }
#pragma unroll
      for (int k = 0; k < RPT; ++k) {  // upwards: row k reads row k + 1's cell on d + 1 before it moves
        const int i = i0 + k, j = d - i;
        if (i < n && j >= 0 && j < m) {
          const long long rowstart = pairoff + (long long)i * M;
          const long long e = rowstart + j;
          const int pos = int(e & (G - 1));
          const double Rp = Rn[k];
          const double Qp = Qn[k];
          // Successors: diagonal (i+1, j+1) on d + 2 (choice 0), down (i+1, j) on d + 1 (choice 1: p is its
          // "up"), right (i, j+1) on d + 1 (choice 2: p is its "left").
          const bool last = k + 1 == RPT;
          const double Sdw = last ? Sdn : As[last ? k : k + 1];
          const double Qdw = last ? Qdn : Aq[last ? k : k + 1];
          const T Edw = last ? Edn : Ae[last ? k : k + 1];
          const T Fdw = last ? Fdn : Af[last ? k : k + 1];
          const double Sdg = Gs[k], Qdg = Gq[k];
          const T Edg = Ge[k], Fdg = Gf[k];
          Gs[k] = Sdw;  // the next cell's diagonal successor
          Gq[k] = Qdw;
          Ge[k] = Edw;
          Gf[k] = Fdw;
          T e_ = T(0);
          double ed = 0.0;
          double Sout = HVP_BIG;
          double Qout = 0.0;
          if (Rp < HVP_HALF) {  // allowed and reachable
            if (!OE && i == n - 1 && j == m - 1) {
              e_ = T(1);
            } else {
              if (OE && i == n - 1) {  // the end node T's shares (hvp_end; the group holding them is stored later)
                e_ = Eo[(long long)i * M + j];
                ed = double(Fo[(long long)i * M + j]);
              }
#pragma unroll
              for (int rel = 0; rel < 3; ++rel) {
                const bool exists = rel == 0 ? (i + 1 < n && j + 1 < m) : (rel == 1 ? i + 1 < n : j + 1 < m);
                if (!exists) continue;
                const double Ss = rel == 0 ? Sdg : (rel == 1 ? Sdw : As[k]);
                if (Ss >= HVP_HALF) continue;  // forbidden or unreachable successor
                const T es = rel == 0 ? Edg : (rel == 1 ? Edw : Ae[k]);
                const double Qs = rel == 0 ? Qdg : (rel == 1 ? Qdw : Aq[k]);
                const T eds = rel == 0 ? Fdg : (rel == 1 ? Fdw : Af[k]);
                hvp_var_edge<T, HARD, PEN>(rel, Rp, Qp, Ss, Qs, es, eds, gd, ig, e_, ed, vg, vgd, pen2, pdot, vp, vpd);
              }
            }
            if (HARD) {
              Sout = Rp;  // any value below the sentinel: the cell is allowed; Q keeps the argmin
              Qout = Qp;
            } else {
              Sout = Rp - double(hvpf_get(cg[k], pos)) * scale;  // S' = R' - C'
              Qout = Qp - double(hvpf_get(dg[k], pos));          // S-dot = R-dot - C-dot
            }
            if (OB && i == 0) hvp_start_edge<T, HARD>(Sout, Qout, e_, T(ed), gd, ig, vg, vgd);
          }
          As[k] = Sout;
          Aq[k] = Qout;
          Ae[k] = e_;
          Af[k] = T(ed);
          hvpf_set(eg[k], pos, e_);
          hvpf_set(fg[k], pos, T(ed));
          if (pos == 0 || j == 0) {  // the group is complete (going left): store it
            hvpf_store(a.E, e - pos, rowstart, rowstart + M, vec, eg[k]);
            hvpf_store(a.Edot, e - pos, rowstart, rowstart + M, vec, fg[k]);
#pragma unroll
            for (int x = 0; x < G; ++x) { eg[k][x] = T(0); fg[k][x] = T(0); }
          }
        }
      }
      sd[cur * S + tid] = As[0];
      sq[cur * S + tid] = Aq[0];
      se[cur * S + tid] = Ae[0];
      sf[cur * S + tid] = Af[0];
      prefetch(d);
      __syncthreads();
    }
  }

  hvp_block_sums<T, HARD, HVPF_MAX_THREADS>(vg, vgd, red, a.vgamma + b, a.vgamma_dot + b);
  if constexpr (PEN) {  // (hard DTW: vpen is the path's number of moves, vpen_dot 0)
    __syncthreads();  // thread 0 has read red
    hvp_block_sums<T, false, HVPF_MAX_THREADS>(vp, HARD ? 0.0 : vpd, red, a.var.vpen + b, a.var.vpen_dot + b);
  }
}

// Grid: B blocks (one per pair) of a multiple of 32 threads, at most HVPF_MAX_THREADS, with
// threads · RPT >= N. Q: (B, N·M) float64 R-dot scratch (not followed by hvp_kernel's E and E-dot tables). vec: C, Cdot, E and Edot are
// 16-byte aligned (then the 16-byte groups are used). VAR: the alignment variants, as hvp_kernel's.
template <typename T, bool WINDOW, int RPT, int VAR = 0>
__global__ void __launch_bounds__(HVPF_MAX_THREADS, (RPT == 1 && sizeof(T) == 4) ? 4 : 1)
hvp_fast_kernel(const T* __restrict__ C, const T* __restrict__ Cdot, const T* __restrict__ gamma,
                const T* __restrict__ gamma_dot, const long long* __restrict__ xlen,
                const long long* __restrict__ ylen, const int* __restrict__ window, double* R, double* Q,
                T* __restrict__ E, T* __restrict__ Edot, T* __restrict__ vgamma, T* __restrict__ vgamma_dot,
                int B, int N, int M, int vec, const T* __restrict__ pen, int pen_stride, const T* __restrict__ pdot,
                int pdot_stride, T* __restrict__ vpen, T* __restrict__ vpen_dot) {
  __shared__ double sd[2 * HVPF_MAX_THREADS];  // the ring: R' (S'), R-dot (S-dot), E, E-dot
  __shared__ double sq[2 * HVPF_MAX_THREADS];
  __shared__ T st[4 * HVPF_MAX_THREADS];
  __shared__ double red[2 * HVPF_MAX_THREADS / 32];
  const int b = blockIdx.x;
  if (b >= B) return;
  HvpArgs<T> a{C, Cdot, gamma_dot, xlen, ylen, window, R, Q, nullptr, E, Edot, vgamma, vgamma_dot, N, M};
  if constexpr (VAR != 0) a.var = HvpVar<T>{pen, pen_stride, pdot, pdot_stride, vpen, vpen_dot};
  const long long total = (long long)B * N * M;
  const T g = *gamma;  // read on the device: no host sync
  if (g == T(0)) {
    hvpf_pair<T, WINDOW, true, RPT, VAR>(a, b, g, vec != 0, total, sd, sq, st, red);
  } else {
    hvpf_pair<T, WINDOW, false, RPT, VAR>(a, b, g, vec != 0, total, sd, sq, st, red);
  }
}

}  // namespace sdtw
