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
// so a diagonal's reads and writes coalesce): R' in float64 for every data dtype (a float32 R' of a long path
// loses ulp(|R'|) in every weight; float64 is the simplest frame), and in the data dtype Q (Rdot; pass 2
// turns it into Sdot in place, and R' into S', once the cell is done), E and Edot. Weights are
// 2^(S' - R') <= 1 with S' - R' computed in float64 and exponentiated in the data dtype: nothing is
// exponentiated upwards, every factor is <= 1, w log w lies in [-1/e, 0].
//
// Forbidden cells (+inf cost, outside the window or the pair's lengths) and unreachable cells hold the
// sentinel R' = 1e200 and Rdot = 0, and are skipped as successors; their E and Edot are 0. A pair whose end
// cell is unreachable (value +inf) gets all four outputs 0. gamma == 0 is hard DTW: R in the data dtype with
// the first-order kernels' tie-breaking (diagonal, up, left: hard_min3), the argmin stored in Q, E the
// argmin path, vgamma = Edot = vgamma_dot = 0 (the derivative almost everywhere).
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
  T* Q;                   // (B, 3, N * M) scratch, diagonal-major: Rdot then Sdot (hard: the argmin), E, Edot
  T* E;                   // (B, N, M)
  T* Edot;                // (B, N, M)
  T* vgamma;              // (B,)
  T* vgamma_dot;          // (B,)
  int N, M;
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

template <typename T, bool WINDOW, bool HARD>
__device__ void hvp_pair(const HvpArgs<T>& a, const int b, const T g, double* red) {
  const int N = a.N, M = a.M;
  const int n = int(a.xlen[b]), m = int(a.ylen[b]);
  const int tid = threadIdx.x, nt = blockDim.x;
  const size_t NM = size_t(N) * M;
  const T* Cb = a.C + size_t(b) * NM;
  const T* Db = a.Cdot + size_t(b) * NM;
  const int* wb = a.window + size_t(b) * N * 2;
  double* Rb = a.R + size_t(b) * NM;
  T* Qb = a.Q + size_t(b) * 3 * NM;
  T* Eb = Qb + NM;
  T* Fb = Qb + 2 * NM;  // Edot
  T* Eo = a.E + size_t(b) * NM;
  T* Fo = a.Edot + size_t(b) * NM;
  const double scale = HARD ? 1.0 : 1.0 / (double(g) * LN2);
  const T gd = HARD ? T(0) : a.gamma_dot[b];
  const T ig = HARD ? T(0) : T(1) / g;
  const T BIGT = Num<T>::big();

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
      T Qd = T(0), Qu = T(0), Ql = T(0);
      if (i == 0 && j == 0) {
        Rd = 0.0;
      } else if (i > 0 && j > 0) {
        Rd = Rb[b2 + i - 1];
        Qd = Qb[b2 + i - 1];
      }
      if (i > 0) { Ru = Rb[b1 + i - 1]; Qu = Qb[b1 + i - 1]; }
      if (j > 0) { Rl = Rb[b1 + i]; Ql = Qb[b1 + i]; }
      double Rs = HVP_BIG;
      T Qs = T(0);
      if (ok) {
        if (HARD) {
          // In the data dtype with the first-order kernels' sentinel and tie-breaking, so the path is theirs.
          const T dT = Rd >= HVP_HALF ? BIGT : T(Rd), uT = Ru >= HVP_HALF ? BIGT : T(Ru), lT = Rl >= HVP_HALF ? BIGT : T(Rl);
          int choice;
          const T mn = hard_min3(dT, uT, lT, choice);
          if (mn < T(0.5) * BIGT) {
            Rs = double(mn + c);
            Qs = T(choice);
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
            Qs = Db[q] + wd * Qd + wu * Qu + wl * Ql + gd * H;
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
  for (int d = n + m - 2; d >= 0; --d) {
    const int ilo = max(0, d - m + 1), ihi = min(n - 1, d);
    const long long b0 = hvp_diag_base(d, N, M), b1 = hvp_diag_base(d + 1, N, M), b2 = hvp_diag_base(d + 2, N, M);
    for (int i = ilo + tid; i <= ihi; i += nt) {
      const int j = d - i;
      const size_t q = size_t(i) * M + j;
      const long long p0 = b0 + i;
      const double Rp = Rb[p0];
      const T Qp = Qb[p0];
      T e = T(0), ed = T(0);
      double Sout = HVP_BIG;
      T Qout = T(0);
      if (Rp < HVP_HALF) {  // allowed and reachable
        if (i == n - 1 && j == m - 1) {
          e = T(1);
        } else {
          // Successors s of p: (i+1, j) takes p as "up" (choice 1), (i, j+1) as "left" (2), (i+1, j+1) as
          // "diagonal" (0). Positions in the tables: diagonal d + 1 at rows i + 1 and i, d + 2 at row i + 1.
#pragma unroll
          for (int rel = 0; rel < 3; ++rel) {
            const bool exists = rel == 0 ? (i + 1 < n && j + 1 < m) : (rel == 1 ? i + 1 < n : j + 1 < m);
            if (!exists) continue;
            const long long ps = rel == 0 ? b2 + i + 1 : (rel == 1 ? b1 + i + 1 : b1 + i);
            const double Ss = Rb[ps];
            if (Ss >= HVP_HALF) continue;  // forbidden or unreachable successor
            const T es = Eb[ps];
            if (HARD) {
              if (int(Qb[ps]) == rel) e += es;
            } else {
              const T eds = Fb[ps], Sds = Qb[ps];
              const T lw2 = hvp_clamp_lw(T(Ss - Rp));  // log2 of p's weight in s's soft-min, <= 0
              const T w = Num<T>::ex2(lw2);
              const T lw = T(LN2) * lw2;
              const T aa = (Sds - Qp - gd * lw) * ig;  // wdot / w
              const T t = w * (eds + es * aa);
              e += es * w;
              ed += t;
              vg += double(es * w * lw);
              vgd += double(t * lw);
            }
          }
        }
        if (HARD) {
          Sout = Rp;  // any value below the sentinel: s is allowed; Q keeps the argmin
          Qout = Qp;
        } else {
          Sout = Rp - double(Cb[q]) * scale;  // S' = R' - C'
          Qout = Qp - Db[q];                  // Sdot = Rdot - Cdot
        }
      }
      Rb[p0] = Sout;
      Qb[p0] = Qout;
      Eb[p0] = e;
      Fb[p0] = ed;
      Eo[q] = e;
      Fo[q] = ed;
    }
    __syncthreads();
  }

  // Block sums of vgamma and vgamma_dot (one block per pair: no atomics).
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    vg += __shfl_xor_sync(FULL_MASK, vg, o);
    vgd += __shfl_xor_sync(FULL_MASK, vgd, o);
  }
  const int warp = tid >> 5, nw = (nt + 31) >> 5;
  if ((tid & 31) == 0) {
    red[warp] = vg;
    red[HVP_MAX_THREADS / 32 + warp] = vgd;
  }
  __syncthreads();
  if (tid == 0) {
    double s = 0.0, sd = 0.0;
    for (int w = 0; w < nw; ++w) {
      s += red[w];
      sd += red[HVP_MAX_THREADS / 32 + w];
    }
    a.vgamma[b] = HARD ? T(0) : T(s);
    a.vgamma_dot[b] = HARD ? T(0) : T(sd);
  }
}

// Grid: B blocks (one per pair) of a multiple of 32 threads, at most HVP_MAX_THREADS.
template <typename T, bool WINDOW>
__global__ void __launch_bounds__(HVP_MAX_THREADS)
hvp_kernel(const T* __restrict__ C, const T* __restrict__ Cdot, const T* __restrict__ gamma,
           const T* __restrict__ gamma_dot, const long long* __restrict__ xlen, const long long* __restrict__ ylen,
           const int* __restrict__ window, double* R, T* Q, T* __restrict__ E, T* __restrict__ Edot,
           T* __restrict__ vgamma, T* __restrict__ vgamma_dot, int B, int N, int M) {
  __shared__ double red[2 * HVP_MAX_THREADS / 32];
  const int b = blockIdx.x;
  if (b >= B) return;
  const HvpArgs<T> a{C, Cdot, gamma_dot, xlen, ylen, window, R, Q, E, Edot, vgamma, vgamma_dot, N, M};
  const T g = *gamma;  // read on the device: no host sync
  if (g == T(0)) {
    hvp_pair<T, WINDOW, true>(a, b, g, red);
  } else {
    hvp_pair<T, WINDOW, false>(a, b, g, red);
  }
}

}  // namespace sdtw
