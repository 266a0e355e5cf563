// Soft-DTW Hessian-vector product (issue 24, SECOND_ORDER.md) in the first-order kernels' layout: one group of W warps
// per pair (a block), K columns per lane, rows skewed (lane L works on row t - L at step t), no barrier in either
// pass for W = 1 (W > 1: one block barrier per step, for the hand-over between warps through shared memory)
// (benchmarks/OPTIMIZATION_LOG.md, "hvp_cost in the first-order layout"; the schedule is modelled step for step
// by benchmarks/probes/hvp_warp_model.py for W = 1). For pairs with M <= 32 W K; wider ones run hvp.cu's kernels.
// Few pairs take W > 1 (shorter rows per lane: the step's serial chain is K cells), many pairs W = 1.
//
// Same contract and numerics as hvp.cu (E = dv/dC, vgamma, E-dot, vgamma-dot along (C-dot, gamma-dot); float64
// R' and R-dot for every data dtype; forbidden / unreachable cells are dead; gamma == 0 is hard DTW with the
// first-order tie-breaking; a pair without a finite path gets zeros), except one forward: with a fused cost in
// float32, soft, without band or variant, it keeps float32 local differences of R' and R-dot instead (DIFF in
// hvpw_pair; OPTIMIZATION_LOG.md, "The HVP forward on local differences in float32"), the same record.
//
// Forward (step t = 0 .. n + nl - 2, nl = lanes holding a column of the pair): R' (log2 units) and R-dot of the
// lane's K columns in float64 registers; the left neighbour's last column arrives by __shfl_up_sync, the
// diagonal one is the one that arrived a step earlier. C and C-dot of step t + P - 1 come through a cp.async
// ring. Each cell s stores a *record* of four values in the data dtype, step-major (slot t mod N, lane-major
// inside the slot: one warp's store of a step is contiguous, as the first-order STORE):
//   w_up, w_left        the normalised weights of s's up and left predecessors (w_diag = 1 - w_up - w_left),
//   wdot_up, wdot_left  their derivatives, wdot_p = w_p (S-dot_s - R-dot_p - gamma_dot ln w_p) / gamma
//                       (wdot_diag = -(wdot_up + wdot_left): the weights sum to 1),
// formed where S-dot_s and R-dot_p are float64 registers; a dead cell stores w_up = -1.
// Backward (steps in reverse): every cell s sums E_s and E-dot_s from three *messages*, then sends each
// predecessor p its share (E_s w_p, E-dot_s w_p + E_s wdot_p) and adds E_s H_s and E-dot_s H_s + E_s H-dot_s
// (H = sum w ln w, H-dot = sum wdot ln w, from 3 lg2 of the weights) to the lane's sums. The message to the
// row above stays in the lane (next step, same column); the left one goes to the next column now, or from
// column 0 to lane L - 1 by __shfl_down_sync (used at its next step); the diagonal one to column k - 1 at the
// next step, or from column 0 to lane L - 1 (used two steps later). E and E-dot leave as row stores.
//
// Alignment variants (VAR, the bit mask of common.cuh's Variant; VAR = 0 compiles to the plain kernel's code;
// SECOND_ORDER.md, "Variants"): the step penalty p (per pair; log2 units in R') and its direction p-dot (natural
// units, in R-dot) are added to the up and left predecessors of every cell in the forward, so the record holds
// the penalised edges' weights and their derivatives and the backward is the plain one plus two lane sums,
// vpen = sum_s E_s (w_up + w_left) and vpen_dot = sum_s E-dot_s (w_up + w_left) + E_s (wdot_up + wdot_left).
// Open begin: row 0's diagonal predecessor is the virtual start (R' = 0, R-dot = 0) at every column. Open end:
// after the forward every lane holds R' and R-dot of the last row in its registers; group reductions give the
// end node T's soft-min (hvpw_end), whose weights w_j and their derivatives wdot_j wait as the messages "from the
// row below" of the last row (upE, upF) instead of the 1 at (n - 1, m - 1); T's H_T and H-dot_T join the lanes'
// vgamma and vgamma_dot sums.
#include "common.cuh"

namespace sdtw {

constexpr double HVPW_BIG = 1e200;       // R' of a dead cell
constexpr double HVPW_HALF = 1e199;      // anything at least this large is the sentinel
constexpr int HVPW_RING_BYTES = 24576;   // shared memory budget of each ring (per block)
constexpr int HVPW_REC = 4;              // values per cell in the record

// Ring stages: the largest power of two (the stage is t & (P - 1): 6 stages, a modulo per step, made the W = 4, K = 2
// layout 17 % slower, OPTIMIZATION_LOG.md) that fits the budget, 2 to 8.
__host__ __device__ constexpr int hvpw_depth(int stage_bytes) {
  return HVPW_RING_BYTES / stage_bytes >= 8 ? 8 : (HVPW_RING_BYTES / stage_bytes >= 4 ? 4 : 2);
}

// The backward ring's stage in bytes: the record of the block's 32 W K columns, and with a fused cost of DX features
// the lanes' rows of x and x-dot (read three or more steps ahead with the record: loaded one step ahead into
// registers they were 11 % of the backward's stall samples, a DRAM miss each time the row crossed a line).
template <typename T>
__host__ __device__ constexpr int hvpw_rstage(int K, int W, int DX) {
  return (HVPW_REC * K + 2 * DX) * 32 * W * int(sizeof(T));
}

template <typename T>
__device__ __forceinline__ T hvpw_finite_max() { return sizeof(T) == 4 ? T(3.402823466e38f) : T(1.7976931348623157e308); }

// Smallest weight whose log is taken (a zero weight multiplies it by 0).
template <typename T>
__device__ __forceinline__ T hvpw_tiny() { return sizeof(T) == 4 ? T(1e-37f) : T(1e-300); }

// Hand-over between the warps of a pair (W > 1), double-buffered by step parity: R', R-dot of each warp's last lane
// (forward), and the left and diagonal messages of each warp's lane 0 (backward).
template <typename T, int W>
struct HvpwHand {
  double R[2][W], Q[2][W];
  T msg[2][W][4];
  double red[2][W];
};

// The forward's hand-over of step t (W > 1): the last lane's R' and R-dot (r, q, of the data dtype or double) into
// its warp's slot, then the barrier after which the warp on the right reads them.
template <typename T, int W, typename V>
__device__ __forceinline__ void hvpw_hand_right(HvpwHand<T, W>& hand, const int t, const int wg, const int lane,
                                                const V r, const V q) {
  if (W > 1) {
    if (lane == 31) {
      hand.R[t & 1][wg] = r;
      hand.Q[t & 1][wg] = q;
    }
    __syncthreads();
  }
}

// Sums (MIN: minima) of a and b over the pair's W warps, the same in every lane (one order of operations);
// hand.red is free again when it returns.
template <typename T, int W, bool MIN>
__device__ __forceinline__ void hvpw_all2(double& a, double& b, HvpwHand<T, W>& hand) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const double oa = __shfl_xor_sync(FULL_MASK, a, o), ob = __shfl_xor_sync(FULL_MASK, b, o);
    a = MIN ? fmin(a, oa) : a + oa;
    b = MIN ? fmin(b, ob) : b + ob;
  }
  if (W > 1) {
    const int lane = threadIdx.x & 31, wg = threadIdx.x >> 5;
    __syncthreads();  // earlier readers of hand.red are done
    if (lane == 0) {
      hand.red[0][wg] = a;
      hand.red[1][wg] = b;
    }
    __syncthreads();
    a = hand.red[0][0];
    b = hand.red[1][0];
    for (int w = 1; w < W; ++w) {
      a = MIN ? fmin(a, hand.red[0][w]) : a + hand.red[0][w];
      b = MIN ? fmin(b, hand.red[1][w]) : b + hand.red[1][w];
    }
  }
}

// Open end (SECOND_ORDER.md, "Variants"): the node T after the last row, R'_T = smin_{j < m} R'[n - 1, j]. R, Q:
// this lane's K columns of the last row from column j0 (R' in log2 units, R-dot). Writes T's shares of the last
// row's E and E-dot, w_j = 2^(R'_T - R'_j) and wdot_j = w_j (R-dot_T - R-dot_j - gamma_dot ln w_j) / gamma with
// R-dot_T = sum_j w_j R-dot_j + gamma_dot H_T, into se, sf (0 on dead cells, and everywhere when no cell is
// finite), and adds this lane's terms of H_T = sum_j w_j ln w_j and H-dot_T = sum_j wdot_j ln w_j to vg, vgd.
// Hard DTW: one-hot on the first argmin (the first-order kernels' choice). Float64 throughout (once per pair).
template <typename T, int K, int W, bool HARD>
__device__ __forceinline__ void hvpw_end(const double (&R)[K], const double (&Q)[K], const int j0, const int m,
                                         const T gd, const T ig, T (&se)[K], T (&sf)[K], double& vg, double& vgd,
                                         HvpwHand<T, W>& hand) {
  double mn = HVPW_BIG, unused = 0.0;
#pragma unroll
  for (int k = 0; k < K; ++k)
    if (j0 + k < m) mn = fmin(mn, R[k]);
  hvpw_all2<T, W, true>(mn, unused, hand);
#pragma unroll
  for (int k = 0; k < K; ++k) { se[k] = T(0); sf[k] = T(0); }
  if (mn >= HVPW_HALF) return;  // no finite end: no E
  if (HARD) {
    double first = 1e300;  // the first column holding the minimum
#pragma unroll
    for (int k = K - 1; k >= 0; --k)
      if (j0 + k < m && R[k] == mn) first = double(j0 + k);
    hvpw_all2<T, W, true>(first, unused, hand);
#pragma unroll
    for (int k = 0; k < K; ++k) se[k] = double(j0 + k) == first ? T(1) : T(0);
    return;
  }
  double z = 0.0, s = 0.0, h = 0.0;  // sums of e_j = 2^(R'_min - R'_j), e_j R-dot_j, e_j (R'_min - R'_j)
  double e[K];
#pragma unroll
  for (int k = 0; k < K; ++k) {
    e[k] = (j0 + k < m && R[k] < HVPW_HALF) ? exp2(mn - R[k]) : 0.0;
    z += e[k];
    s += e[k] * Q[k];
    h += e[k] * (mn - R[k]);
  }
  hvpw_all2<T, W, false>(z, s, hand);
  hvpw_all2<T, W, false>(h, unused, hand);
  const double lz = log2(z), iz = 1.0 / z;
  const double HT = LN2 * (h * iz - lz);
  const double QT = s * iz + double(gd) * HT;  // R-dot_T
#pragma unroll
  for (int k = 0; k < K; ++k) {
    if (e[k] > 0.0) {
      const double w = e[k] * iz, lnw = LN2 * ((mn - R[k]) - lz);
      const double wd = w * (QT - Q[k] - double(gd) * lnw) * double(ig);
      se[k] = T(w);
      sf[k] = T(wd);
      vg += w * lnw;
      vgd += wd * lnw;
    }
  }
}

// A fused cost of DX features formed in the cells (hvp_warp_xy_kernel, DX > 0; XC: squared Euclidean as written
// here, or l1, where the factor 2 is 1, x_i - y_j in the dx / dy sums becomes its sign and their E (xdot - ydot)
// term is 0): C and C-dot from x, y and the direction (x-dot, y-dot) instead of two (B, N, M) tables, and instead of
// E and E-dot the contractions the double backward of soft_dtw(x, y) takes of them (backends/cuda/hvp.py, hvp_xy):
//   s1_b    = sum_ij E_ij C-dot_ij,                                C-dot_ij = 2 <x_i - y_j, xdot_i - ydot_j>,
//   dx_i    =  sum_j (E-dot_ij (x_i - y_j) + E_ij (xdot_i - ydot_j)),
//   dy_j    = -sum_i (E-dot_ij (x_i - y_j) + E_ij (xdot_i - ydot_j))   (both without the cost's factor 2).
// A row's dx travels with the backward's left message (lane L to lane L - 1, warp to warp through hand), and lane 0
// of the pair writes it; each lane sums dy of its K columns in registers. No (B, N, M) value is read or written
// besides the record.
template <typename T>
struct HvpXY {
  const T* x = nullptr;   // (B, N, DX)
  const T* y = nullptr;   // (B, M, DX)
  const T* xd = nullptr;  // (B, N, DX)
  const T* yd = nullptr;  // (B, M, DX)
  T* dx = nullptr;        // (B, N, DX)
  T* dy = nullptr;        // (B, M, DX)
  T* s1 = nullptr;        // (B,)
  T* hand = nullptr;      // W > 1: shared [2][W][DX], the dx hand-over between warps
  // DILATE (OM): the direction is Omega_ij = ((i - j) / n)^2 (dilate.default_omega), not (x-dot, y-dot); s1 is the
  // temporal term <E, Omega>, dx / dy the sums of (alpha E + (1 - alpha) E-dot) (x_i - y_j) (the loss
  // alpha sdtw + (1 - alpha) <E, Omega>: E-dot = H Omega is the temporal term's gradient in C), v the value sdtw.
  T alpha = T(0);
  T* v = nullptr;         // (B,)
  // Value, gradient and HVP in one call (GR; hvp_vgh_xy_kernel): v the value as OM's, and the first-order gradient
  // gx_i = sum_j E_ij (x_i - y_j), gy_j = -sum_i E_ij (x_i - y_j) (l1: the sign; without the squared cost's factor 2)
  // as a second channel of the dx / dy sums, beside the HVP's.
  T* gx = nullptr;        // (B, N, DX)
  T* gy = nullptr;        // (B, M, DX)
};

// The fused-cost kernels' common HvpXY fields: inputs x, y and the direction (nullptr for DILATE), outputs dx, dy, s1.
template <typename T>
__device__ __forceinline__ HvpXY<T> hvp_xy_io(const T* x, const T* y, const T* xd, const T* yd, T* dx, T* dy, T* s1) {
  HvpXY<T> xy;
  xy.x = x;
  xy.y = y;
  xy.xd = xd;
  xy.yd = yd;
  xy.dx = dx;
  xy.dy = dy;
  xy.s1 = s1;
  return xy;
}

template <typename T, bool WINDOW, int K, int W, bool HARD, int VAR = 0, int DX = 0, int XC = COST_SQEUCLIDEAN,
          bool OM = false, bool VG = true, bool GR = false>
__device__ __forceinline__ void hvpw_pair(const T* __restrict__ C, const T* __restrict__ Cdot, const T g, const T gd,
                                          const long long* __restrict__ xlen, const long long* __restrict__ ylen,
                                          const int* __restrict__ window, T* __restrict__ rec, T* __restrict__ E,
                                          T* __restrict__ Edot, T* __restrict__ vgamma, T* __restrict__ vgamma_dot,
                                          const int b, const int N, const int M, const bool vec, T* ring,
                                          HvpwHand<T, W>& hand, const HvpVar<T> var = HvpVar<T>{},
                                          const HvpXY<T> xy = HvpXY<T>{}) {
  constexpr bool XY = DX > 0;
  constexpr bool XSQ = XC == COST_SQEUCLIDEAN;  // XY's cost: squared Euclidean, else l1
  constexpr bool XD = XY && !OM;                // the direction from x-dot, y-dot
  constexpr int DXA = XY ? DX : 1;  // array extents
  static_assert(!GR || (XD && VAR == 0), "GR: a fused cost with a direction (x-dot, y-dot), no variant");
  // The forward on local differences in float32 (no float64 R', R-dot): a fused cost's soft pass, no band, no
  // variant (every cell of the pair's rectangle is live, so no difference ever meets a dead one).
  constexpr bool DIFF = XY && !HARD && !WINDOW && VAR == 0 && sizeof(T) == 4;
  constexpr int NC = GR ? 2 : 1;    // channels of the row sums: the HVP's dx / dy, and with GR the gradient's
  constexpr bool OB = (VAR & VAR_OPEN_BEGIN) != 0, OE = (VAR & VAR_OPEN_END) != 0, PEN = (VAR & VAR_PENALTY) != 0;
  constexpr int NL = 32 * W;
  constexpr int CW = NL * K;
  constexpr int G = 16 / int(sizeof(T));          // elements per 16-byte piece
  constexpr bool VECK = K % G == 0;               // K columns as whole 16-byte pieces
  constexpr int CSTAGE = 2 * NL * K * int(sizeof(T));              // forward ring stage: C, C-dot
  constexpr int P = hvpw_depth(CSTAGE);
  constexpr int RSTAGE = hvpw_rstage<T>(K, W, DX);                 // backward ring stage: the record (, x rows)
  constexpr int PB = hvpw_depth(RSTAGE);
  constexpr int RS = RSTAGE / int(sizeof(T));
  static_assert((P & (P - 1)) == 0 && (PB & (PB - 1)) == 0, "ring depths are powers of two");
  const int L = threadIdx.x;  // lane of the pair: warp wg's lane `lane`
  const int lane = L & 31, wg = L >> 5;
  const int n = int(xlen[b]), m = int(ylen[b]);
  const int j0 = L * K;
  const size_t NM = size_t(N) * M;
  const T* Cb = C + size_t(b) * NM;
  const T* Db = Cdot + size_t(b) * NM;
  T* Eb = E + size_t(b) * NM;
  T* Fb = Edot + size_t(b) * NM;
  const int* wb = window + size_t(b) * N * 2;
  T* rb = rec + size_t(b) * N * HVPW_REC * CW;  // slot s, plane q: rb + (s * HVPW_REC + q) * CW + layout(L, k)
  const double scale = HARD ? 1.0 : 1.0 / (double(g) * LN2);
  const T ig = HARD ? T(0) : T(1) / g;
  const int nl = min(NL, (m + K - 1) / K);
  const int steps = n + nl - 1;
  // Step penalty: in the data dtype for hard DTW (natural units, the first-order kernels' arithmetic), else in R'
  // (log2 units, float64); its direction in R-dot's natural units.
  const T penT = PEN ? var.pen[size_t(b) * var.pen_stride] : T(0);
  const double pen2 = (PEN && !HARD) ? double(penT) * scale : 0.0;
  const double pdot = (PEN && !HARD) ? double(var.pdot[size_t(b) * var.pdot_stride]) : 0.0;

  if constexpr (XY) {
    // dx of the rows past n (the backward writes rows i < n, each lane its own columns of dy).
    for (int q = n * DX + L; q < N * DX; q += NL) {
      xy.dx[size_t(b) * N * DX + q] = T(0);
      if constexpr (GR) xy.gx[size_t(b) * N * DX + q] = T(0);
    }
  } else {
    // Outside the pair: rows past n, and columns past m of the first n rows (the backward writes j < m only).
    for (size_t q = size_t(n) * M + L; q < NM; q += NL) { Eb[q] = T(0); Fb[q] = T(0); }
    if (m < M)
      for (int i = 0; i < n; ++i)
        for (int j = m + L; j < M; j += NL) { Eb[size_t(i) * M + j] = T(0); Fb[size_t(i) * M + j] = T(0); }
  }
  // XY: y and y-dot of this lane's columns (0 past m), and the row inputs x_i, x-dot_i of row i = t - L, loaded a
  // step ahead by xrow.
  T yv[XY ? K : 1][DXA], ydv[XY ? K : 1][DXA];
  if constexpr (XY) {
#pragma unroll
    for (int k = 0; k < K; ++k)
#pragma unroll
      for (int d = 0; d < DX; ++d) {
        const bool in = j0 + k < m;
        yv[k][d] = in ? xy.y[(size_t(b) * M + j0 + k) * DX + d] : T(0);
        ydv[k][d] = (XD && in) ? xy.yd[(size_t(b) * M + j0 + k) * DX + d] : T(0);
      }
  }
  auto xrow = [&](const int i, T (&xv)[DXA], T (&xdv)[DXA]) {
    const bool in = i >= 0 && i < n;
#pragma unroll
    for (int d = 0; d < DXA; ++d) {
      xv[d] = (XY && in) ? xy.x[(size_t(b) * N + i) * DX + d] : T(0);
      xdv[d] = (XD && in) ? xy.xd[(size_t(b) * N + i) * DX + d] : T(0);
    }
  };
  // DILATE's Omega_ij in the data dtype, formed in float64 as dilate.default_omega.
  const double inv_n = 1.0 / double(n > 0 ? n : 1);
  auto omega = [&](const int i, const int j) {
    const double r = double(i - j) * inv_n;
    return T(r * r);
  };

  // Open end: T's shares of the last row's E and E-dot, and its terms of vgamma, vgamma_dot (hvpw_end).
  T se[OE ? K : 1], sf[OE ? K : 1];
  double endvg = 0.0, endvgd = 0.0;

  // ---- forward -------------------------------------------------------------------------------------------
  if constexpr (DIFF) {
    // On local differences (OPTIMIZATION_LOG.md, "An all-float32 HVP on local differences"): each cell keeps
    // h = R'_ij - R'_i,j-1 and d = R'_ij - R'_i-1,j, and hq, dq the same of R-dot, all float32. Its soft-min sees its
    // predecessors relative to the diagonal one as (0, h of the cell above, d of the cell to the left), and its
    // weights' derivatives need only those differences of R-dot: the record is the absolute kernel's. Row 0 and
    // column 0 have one predecessor each (h_0j = c', d_i0 = c'). The value (OM, GR) is the costs down column 0
    // (R'_n-1,0) plus h along row n - 1, summed in float64.
    T nx[DXA], nxd[DXA];
    xrow(-L, nx, nxd);
    T hv[K], hq[K];  // h, hq of this lane's columns on the row it finished last (the next row's "above")
#pragma unroll
    for (int k = 0; k < K; ++k) { hv[k] = T(0); hq[k] = T(0); }
    T lastD = T(0), lastDQ = T(0);  // d, dq of this lane's last column on that row (lane L + 1's left)
    double vsum = 0.0;              // OM, GR: this lane's terms of the value, log2 units
    const T sc = T(scale);
    T* const rlane = rb + StepLayout<K>::offset(L, 0, NL);
    if (W > 1) {
      if (lane == 31) {
        hand.R[1][wg] = 0.0;
        hand.Q[1][wg] = 0.0;
      }
      __syncthreads();
    }
    int slot = 0;
    for (int t = 0; t < steps; ++t) {
      const int i = t - L;
      const bool live = i >= 0 && i < n;
      T lD = __shfl_up_sync(FULL_MASK, lastD, 1);
      T lDQ = __shfl_up_sync(FULL_MASK, lastDQ, 1);
      if (W > 1 && lane == 0 && wg > 0) {  // from the warp on the left (its last lane, one step ago)
        lD = T(hand.R[(t + 1) & 1][wg - 1]);
        lDQ = T(hand.Q[(t + 1) & 1][wg - 1]);
      }
      T xv[DXA], xdv[DXA];
#pragma unroll
      for (int d = 0; d < DXA; ++d) { xv[d] = nx[d]; xdv[d] = nxd[d]; }
      xrow(i + 1, nx, nxd);
      if (live) {
        T wu_[K], wl_[K], du_[K], dl_[K];
#pragma unroll
        for (int k = 0; k < K; ++k) {
          const int j = j0 + k;
          T c = T(0), cd = T(0);
#pragma unroll
          for (int d = 0; d < DX; ++d) {
            const T df = xv[d] - yv[k][d];
            c += cost_term<T, XC>(df);
            cd += cost_slope<T, XC>(df) * (xdv[d] - ydv[k][d]);
          }
          const T cdot = OM ? omega(i, j) : (XSQ ? T(2) * cd : cd);
          const T cs = c * sc;
          // Every cell takes the interior formulas (finite whatever its inputs), then row 0, column 0 and the
          // columns past m replace what differs by selects: as branches (three per cell) they were ~61 of the
          // loop's ~590 SASS instructions and their merges most of its moves.
          const T hu = hv[k], hqu = hq[k];
          const T mn = Num<T>::mn(T(0), Num<T>::mn(hu, lD));  // lD last: the only operand on the row's chain
          const T ou = mn - hu, ol = mn - lD;
          const T ed = Num<T>::ex2(mn), eu = Num<T>::ex2(ou), el = Num<T>::ex2(ol);
          const T Z = ed + eu + el;  // >= 1: the minimum's term is 2^0
          const T lz = Num<T>::lg2(Z);
          const T iz = Num<T>::rcp(Z);
          T wu = eu * iz, wl = el * iz, du, dw;
          T sd = wu * hqu + wl * lDQ;  // S-dot - R-dot of the diagonal
          if constexpr (VG) {
            const T wd = ed * iz;
            const T lnd = T(LN2) * (mn - lz), lnu = T(LN2) * (ou - lz), lnl = T(LN2) * (ol - lz);
            sd += gd * (wd * lnd + wu * lnu + wl * lnl);
            du = wu * ((sd - hqu) - gd * lnu) * ig;
            dw = wl * ((sd - lDQ) - gd * lnl) * ig;
          } else {
            du = wu * (sd - hqu) * ig;
            dw = wl * (sd - lDQ) * ig;
          }
          const T rel = (mn - lz) + cs;  // R'_ij - R' of the diagonal
          const T qrel = sd + cdot;      // R-dot_ij - R-dot of the diagonal
          T h = rel - lD, dd = rel - hu, hqn = qrel - lDQ, dqn = qrel - hqu;
          if (k == 0 && j == 0) {  // lane 0's first column: the up predecessor only (its h, hq are never read)
            dd = cs;
            dqn = cdot;
            wu = T(1);
            wl = du = dw = T(0);
          }
          if (i == 0) {  // the left predecessor only (at j = 0 the start); its d, dq are never read
            h = cs;
            hqn = cdot;
            wu = du = dw = T(0);
            wl = j == 0 ? T(0) : T(1);
          }
          if (j >= m) wu = T(-1);  // dead; nothing reads the rest
          if ((OM || GR) && k == 0 && L == 0) vsum += double(cs);  // column 0: R'_i0 = sum of c'
          wu_[k] = wu;
          wl_[k] = wl;
          du_[k] = du;
          dl_[k] = dw;
          hv[k] = h;
          hq[k] = hqn;
          lD = dd;
          lDQ = dqn;
        }
        lastD = lD;
        lastDQ = lDQ;
        T* dst = rlane + size_t(slot) * HVPW_REC * CW;
        store_lane_step<T, K, NL>(dst, wu_);
        store_lane_step<T, K, NL>(dst + CW, wl_);
        store_lane_step<T, K, NL>(dst + 2 * CW, du_);
        store_lane_step<T, K, NL>(dst + 3 * CW, dl_);
      }
      if (++slot == N) slot = 0;
      hvpw_hand_right<T, W>(hand, t, wg, lane, lastD, lastDQ);
    }
    if constexpr (OM || GR) {  // the value, in natural units
#pragma unroll
      for (int k = 0; k < K; ++k)  // h of the last row (every lane with a column finished row n - 1 last)
        if (j0 + k >= 1 && j0 + k < m) vsum += double(hv[k]);
      double unused = 0.0;
      hvpw_all2<T, W, false>(vsum, unused, hand);
      if (L == 0 && n > 0) xy.v[b] = T(vsum / scale);
    }
  } else {
    // Ring: stage s, array a (0: C, 1: C-dot), lane L at ring + ((s * 2 + a) * NL + L) * K.
    auto issue = [&](const int t) {
      const int row = t - L;
      const bool ok = row >= 0 && row < n;
      T* dst = ring + size_t((t & (P - 1)) * 2) * NL * K + size_t(L) * K;
      const size_t off = size_t(ok ? row : 0) * M + j0;
      if (VECK && vec) {
#pragma unroll
        for (int k = 0; k < K; k += G) {
          const bool v = ok && j0 + k < M;
          cp_async<16>(dst + k, v ? Cb + off + k : C, v);
          cp_async<16>(dst + NL * K + k, v ? Db + off + k : Cdot, v);
        }
      } else {
#pragma unroll
        for (int k = 0; k < K; ++k) {
          const bool v = ok && j0 + k < M;
          cp_async<int(sizeof(T))>(dst + k, v ? Cb + off + k : C, v);
          cp_async<int(sizeof(T))>(dst + NL * K + k, v ? Db + off + k : Cdot, v);
        }
      }
      cp_async_commit();
    };
    if constexpr (!XY)
      for (int t = 0; t < P - 1; ++t) issue(t);
    T nx[DXA], nxd[DXA];  // XY: row t - L's inputs (for step t), loaded at step t - 1
    xrow(-L, nx, nxd);

    double R[K], Q[K];
#pragma unroll
    for (int k = 0; k < K; ++k) { R[k] = HVPW_BIG; Q[k] = 0.0; }
    double lastR = HVPW_BIG, lastQ = 0.0;  // this lane's last column on the row it finished (lane L + 1's left)
    double prevR = L == 0 ? 0.0 : HVPW_BIG, prevQ = 0.0;  // left neighbour one step ago = diagonal now
    // The row's window, loaded a step ahead.
    int lo = 0, hi = M, nlo = 0, nhi = M;
    if (WINDOW && L == 0 && n > 0) { nlo = wb[0]; nhi = wb[1]; }
    T* const rlane = rb + StepLayout<K>::offset(L, 0, NL);
    if (W > 1) {  // what step 0 reads: the border
      if (lane == 31) {
        hand.R[1][wg] = HVPW_BIG;
        hand.Q[1][wg] = 0.0;
      }
      __syncthreads();
    }
    int slot = 0;
    const T BIGT = Num<T>::big();
    for (int t = 0; t < steps; ++t) {
      const int i = t - L;
      const bool live = i >= 0 && i < n;
      double inR = __shfl_up_sync(FULL_MASK, lastR, 1);
      double inQ = __shfl_up_sync(FULL_MASK, lastQ, 1);
      if (lane == 0) {  // from the warp on the left (its last lane, one step ago), or the border
        inR = (W > 1 && wg > 0) ? hand.R[(t + 1) & 1][wg - 1] : HVPW_BIG;
        inQ = (W > 1 && wg > 0) ? hand.Q[(t + 1) & 1][wg - 1] : 0.0;
      }
      double dR = prevR, dQ = prevQ;
      prevR = inR;
      prevQ = inQ;
      if (WINDOW) {
        lo = nlo;
        hi = nhi;
        const int in = i + 1;
        if (in >= 0 && in < n) {
          const int2 w2 = *reinterpret_cast<const int2*>(wb + 2 * in);
          nlo = w2.x;
          nhi = w2.y;
        }
      }
      T xv[DXA], xdv[DXA];
      if constexpr (XY) {
#pragma unroll
        for (int d = 0; d < DXA; ++d) { xv[d] = nx[d]; xdv[d] = nxd[d]; }
        xrow(i + 1, nx, nxd);
      } else {
        issue(t + P - 1);
        cp_async_wait<P - 1>();
      }
      if (live) {
        T cr[K], dr[K];
        if constexpr (XY) {
#pragma unroll
          for (int k = 0; k < K; ++k) {
            T c = T(0), cd = T(0);
#pragma unroll
            for (int d = 0; d < DX; ++d) {
              const T df = xv[d] - yv[k][d];
              c += cost_term<T, XC>(df);
              cd += cost_slope<T, XC>(df) * (xdv[d] - ydv[k][d]);
            }
            cr[k] = c;
            dr[k] = OM ? omega(i, j0 + k) : (XSQ ? T(2) * cd : cd);
          }
        } else {
          const T* src = ring + size_t((t & (P - 1)) * 2) * NL * K + size_t(L) * K;
#pragma unroll
          for (int k = 0; k < K; ++k) { cr[k] = src[k]; dr[k] = src[NL * K + k]; }
        }
        double lR = inR, lQ = inQ;
        T wu_[K], wl_[K], du_[K], dl_[K];
#pragma unroll
        for (int k = 0; k < K; ++k) {
          const int j = j0 + k;
          const double uR = R[k], uQ = Q[k];
          // The variants' predecessors: open begin's start on row 0's diagonal; the penalty p on the up and left
          // edges taken as -p on the diagonal one (the soft-min shifts: smin(d, u + p, l + p) = p + smin(d - p, u, l),
          // and R-dot likewise), p added back with the cell's cost: nothing joins the row's serial chain (lR, lQ).
          double dRv = dR, dQv = dQ;
          if (OB && i == 0) dRv = dQv = 0.0;
          if (PEN && !HARD) {
            dRv -= pen2;
            dQv -= pdot;
          }
          const T c = cr[k];
          bool ok = j < m && c <= hvpw_finite_max<T>();  // +inf (or NaN): a forbidden cell
          if (WINDOW) ok = ok && j >= lo && j < hi;
          double Rs = HVPW_BIG, Qs = 0.0;
          T wu = T(-1), wl = T(0), du = T(0), dl = T(0);
          if (ok) {
            if (HARD) {
              // In the data dtype with the first-order kernels' sentinel and tie-breaking, so the path is theirs.
              const T dT = dRv >= HVPW_HALF ? BIGT : T(dRv), uT = uR >= HVPW_HALF ? BIGT : T(uR),
                      lT = lR >= HVPW_HALF ? BIGT : T(lR);
              int choice;
              const T mn = PEN ? hard_min3(dT, uT + penT, lT + penT, choice) : hard_min3(dT, uT, lT, choice);
              if (mn < T(0.5) * BIGT) {
                Rs = double(mn + c);
                wu = choice == 1 ? T(1) : T(0);
                wl = choice == 2 ? T(1) : T(0);
              }
            } else {
              const double mn = fmin(lR, fmin(dRv, uR));  // lR last: the only operand on the row's chain
              if (mn < HVPW_HALF) {
                const T od = Num<T>::mx(Num<T>::mn(T(mn - dRv), T(0)), T(-2000));
                const T ou = Num<T>::mx(Num<T>::mn(T(mn - uR), T(0)), T(-2000));
                const T ol = Num<T>::mx(Num<T>::mn(T(mn - lR), T(0)), T(-2000));
                const T ed = Num<T>::ex2(od), eu = Num<T>::ex2(ou), el = Num<T>::ex2(ol);
                const T Z = ed + eu + el;  // >= 1: the minimum's term is 2^0
                const T lz = Num<T>::lg2(Z);
                const T iz = Num<T>::rcp(Z);
                const T wd = ed * iz;
                wu = eu * iz;
                wl = el * iz;
                // S-dot = sum_p w_p R-dot_p + gamma_dot H in float64, the weights multiplying differences to the
                // largest weight's R-dot only (hvp.cu, hvp_rdot). !VG: gamma_dot is 0 (no ln w, no H).
                const double Qr = mn == dRv ? dQv : (mn == uR ? uQ : lQ);
                double Sd;
                if constexpr (VG) {
                  const T lnd = T(LN2) * (od - lz), lnu = T(LN2) * (ou - lz), lnl = T(LN2) * (ol - lz);
                  const T H = wd * lnd + wu * lnu + wl * lnl;
                  Sd = Qr + double(wd * T(dQv - Qr) + wu * T(uQ - Qr) + wl * T(lQ - Qr) + gd * H);
                  du = wu * (T(Sd - uQ) - gd * lnu) * ig;
                  dl = wl * (T(Sd - lQ) - gd * lnl) * ig;
                } else {
                  Sd = Qr + double(wd * T(dQv - Qr) + wu * T(uQ - Qr) + wl * T(lQ - Qr));
                  du = wu * T(Sd - uQ) * ig;
                  dl = wl * T(Sd - lQ) * ig;
                }
                Qs = PEN ? Sd + (double(dr[k]) + pdot) : Sd + double(dr[k]);
                Rs = PEN ? (mn - double(lz)) + (double(c) * scale + pen2) : (mn - double(lz)) + double(c) * scale;
              }
            }
          }
          if (Rs >= HVPW_HALF) wu = T(-1);  // dead (hard DTW: unreachable)
          wu_[k] = wu;
          wl_[k] = wl;
          du_[k] = du;
          dl_[k] = dl;
          R[k] = Rs;
          Q[k] = Qs;
          dR = uR;
          dQ = uQ;
          lR = Rs;
          lQ = Qs;
        }
        lastR = R[K - 1];
        lastQ = Q[K - 1];
        T* dst = rlane + size_t(slot) * HVPW_REC * CW;
        store_lane_step<T, K, NL>(dst, wu_);
        store_lane_step<T, K, NL>(dst + CW, wl_);
        store_lane_step<T, K, NL>(dst + 2 * CW, du_);
        store_lane_step<T, K, NL>(dst + 3 * CW, dl_);
      }
      if (++slot == N) slot = 0;
      hvpw_hand_right<T, W>(hand, t, wg, lane, lastR, lastQ);
    }
    if constexpr (!XY) cp_async_wait<0>();
    if constexpr (OM || GR) {  // the value: R' of (n - 1, m - 1), in natural units
#pragma unroll
      for (int k = 0; k < K; ++k)
        if (j0 + k == m - 1 && n > 0)
          xy.v[b] = R[k] >= HVPW_HALF ? Num<T>::big() * Num<T>::big() : T(HARD ? R[k] : R[k] / scale);
    }
    // R, Q hold the last row now (every lane holding a column finished row n - 1 at its last live step).
    if constexpr (OE) hvpw_end<T, K, W, HARD>(R, Q, j0, m, gd, ig, se, sf, endvg, endvgd, hand);
  }
  __threadfence_block();  // the backward reads this lane's records through cp.async
  __syncthreads();

  // ---- backward ------------------------------------------------------------------------------------------
  double vg = 0.0, vgd = 0.0;
  double vp = 0.0, vpd = 0.0;  // step penalty: vpen, vpen_dot
  double s1 = 0.0;             // XY: sum of E C-dot
  if constexpr (OE) {
    vg = endvg;
    vgd = endvgd;
  }
  {
    // s: step t's record slot, t mod N (the caller counts it down with t: a modulo per step was ~25 instructions).
    // Ring: stage s at ring + s * RS; in it plane q, lane L at (q * NL + L) * K; XY: then x of row t - L, feature
    // d at (4 K + d) * NL + L (x-dot: DX + d).
    auto issue = [&](const int t, const int s) {
      const bool ok = t >= 0 && t - L >= 0 && t - L < n;
      T* stage = ring + size_t(t & (PB - 1)) * RS;
      T* dst = stage + size_t(L) * K;
      const T* src = rb + size_t(s) * HVPW_REC * CW;
#pragma unroll
      for (int q = 0; q < HVPW_REC; ++q) cp_async_step<T, K>(dst + q * NL * K, src + q * CW, L, NL, ok);
      if constexpr (XY) {
        const size_t r = size_t(b) * N + (ok ? t - L : 0);
        T* xs = stage + HVPW_REC * NL * K + L;
#pragma unroll
        for (int d = 0; d < DX; ++d) {
          cp_async<int(sizeof(T))>(xs + d * NL, xy.x + r * DX + d, ok);
          if constexpr (XD) cp_async<int(sizeof(T))>(xs + (DX + d) * NL, xy.xd + r * DX + d, ok);
        }
      }
      cp_async_commit();
    };
    for (int t = steps - 1; t > steps - PB; --t) issue(t, t >= 0 ? t % N : 0);
    int islot = steps - PB >= 0 ? (steps - PB) % N : 0;  // the loop's first issue: step steps - PB

    T upE[K], upF[K], dgE[K], dgF[K];  // messages from the row below: to the row above, to the diagonal
#pragma unroll
    for (int k = 0; k < K; ++k) { upE[k] = upF[k] = dgE[k] = dgF[k] = T(0); }
    if constexpr (OE) {  // the end node T's shares, to the last row as from the row below
#pragma unroll
      for (int k = 0; k < K; ++k) { upE[k] = se[k]; upF[k] = sf[k]; }
    }
    // XY: row's dx from lane L + 1 (with rcvE); this lane's dy sums. Channel c of feature d at c * DXA + d.
    T rcvX[NC * DXA], cy[XY ? K : 1][NC * DXA];
#pragma unroll
    for (int d = 0; d < NC * DXA; ++d) rcvX[d] = T(0);
#pragma unroll
    for (int k = 0; k < (XY ? K : 1); ++k)
#pragma unroll
      for (int d = 0; d < NC * DXA; ++d) cy[k][d] = T(0);
    T rcvE = T(0), rcvF = T(0);        // left message of lane L + 1's column 0, one step old
    T dnE = T(0), dnF = T(0);          // diagonal message of lane L + 1's column 0, one step old
    T doE = T(0), doF = T(0);          // ... two steps old (column K - 1's diagonal successor)
    const bool vst = VECK && vec;
    for (int t = steps - 1; t >= 0; --t) {
      const int i = t - L;
      const bool live = i >= 0 && i < n;
      issue(t - (PB - 1), islot);
      islot = islot == 0 ? N - 1 : islot - 1;
      cp_async_wait<PB - 1>();
      T sLE = T(0), sLF = T(0), sDE = T(0), sDF = T(0);  // what column 0 sends lane L - 1
      T sX[NC * DXA];  // XY: the row's dx so far, to lane L - 1
#pragma unroll
      for (int d = 0; d < NC * DXA; ++d) sX[d] = T(0);
      if (live) {
        const T* stage = ring + size_t(t & (PB - 1)) * RS;
        const T* src = stage + size_t(L) * K;
        T xv[DXA], xdv[DXA];  // XY: row i's x and x-dot (0 without a direction)
#pragma unroll
        for (int d = 0; d < DXA; ++d) {
          xv[d] = XY ? stage[HVPW_REC * NL * K + d * NL + L] : T(0);
          xdv[d] = XD ? stage[HVPW_REC * NL * K + (DX + d) * NL + L] : T(0);
        }
        T rE = rcvE, rF = rcvF;  // the right successor's message
        T cE = doE, cF = doF;    // the diagonal successor's message
        T eo[K], fo[K];
        T acc[NC * DXA], ss1 = T(0);
#pragma unroll
        for (int d = 0; d < NC * DXA; ++d) acc[d] = rcvX[d];
        // The step's K terms of the lane sums in the data dtype (as ss1), added to the float64 sums once a step:
        // a convert and a float64 add per cell and sum were 60 of DILATE's ~560 backward instructions a step.
        T svg = T(0), svgd = T(0);
        T svp = T(0), svpd = T(0);
#pragma unroll
        for (int k = K - 1; k >= 0; --k) {
          const int j = j0 + k;
          const T oE = dgE[k], oF = dgF[k];  // this column's diagonal message of the last step: column k - 1's
          T e, f;
          if (!OE && i == n - 1 && j == m - 1) {
            e = T(1);
            f = T(0);
          } else {
            e = rE + upE[k] + cE;
            f = rF + upF[k] + cF;
          }
          const T wu = src[k], wl = src[NL * K + k], du = src[2 * NL * K + k], dl = src[3 * NL * K + k];
          // Dead: no E. Its record (w_up = -1, the rest finite) then sends nothing: every message and sum below is
          // a product with e or f (two selects, where zeroing the record's values too cost ~8 moves a cell).
          if (wu < T(0)) e = f = T(0);
          const T wd = Num<T>::mx(T(1) - wu - wl, T(0));
          const T dd = -(du + dl);
          if (PEN) {  // the cell's up and left in-edges carry the penalty
            const T mv = wu + wl;
            svp += e * mv;
            svpd += f * mv + e * (du + dl);
          }
          if (!HARD && VG) {
            const T tiny = hvpw_tiny<T>();
            const T lnd = T(LN2) * Num<T>::lg2(Num<T>::mx(wd, tiny));
            const T lnu = T(LN2) * Num<T>::lg2(Num<T>::mx(wu, tiny));
            const T lnl = T(LN2) * Num<T>::lg2(Num<T>::mx(wl, tiny));
            const T H = wd * lnd + wu * lnu + wl * lnl;
            const T Hd = dd * lnd + du * lnu + dl * lnl;
            svg += e * H;
            svgd += f * H + e * Hd;
          }
          upE[k] = e * wu;
          upF[k] = f * wu + e * du;
          dgE[k] = e * wd;
          dgF[k] = f * wd + e * dd;
          rE = e * wl;
          rF = f * wl + e * dl;
          cE = oE;
          cF = oF;
          eo[k] = e;
          fo[k] = f;
          if constexpr (XY) {
            T cd = T(0);
#pragma unroll
            for (int d = 0; d < DX; ++d) {
              const T df = xv[d] - yv[k][d], dd = xdv[d] - ydv[k][d];
              const T sl = cost_slope<T, XC>(df);  // l1: the cost's own second derivative is 0
              cd += sl * dd;
              const T term = OM ? (xy.alpha * e + (T(1) - xy.alpha) * f) * sl : (XSQ ? f * df + e * dd : f * sl);
              acc[d] += term;
              cy[k][d] -= term;
              if constexpr (GR) {  // the gradient's channel
                acc[DXA + d] += e * sl;
                cy[k][DXA + d] -= e * sl;
              }
            }
            if (!OM) ss1 += e * cd;
          }
          if constexpr (OM) {
            ss1 += e * omega(i, j0 + k);
          }
        }
        if constexpr (XY) {
          s1 += double((XSQ && !OM) ? T(2) * ss1 : ss1);
          if (L == 0) {
#pragma unroll
            for (int d = 0; d < DX; ++d) {
              xy.dx[(size_t(b) * N + i) * DX + d] = acc[d];
              if constexpr (GR) xy.gx[(size_t(b) * N + i) * DX + d] = acc[DXA + d];
            }
          } else {
#pragma unroll
            for (int d = 0; d < NC * DX; ++d) sX[d] = acc[d];
          }
        }
        vg += double(svg);
        vgd += double(svgd);
        if (PEN) {
          vp += double(svp);
          vpd += double(svpd);
        }
        sLE = rE;
        sLF = rF;
        sDE = dgE[0];
        sDF = dgF[0];
        T* er = XY ? nullptr : Eb + size_t(i) * M + j0;
        T* fr = XY ? nullptr : Fb + size_t(i) * M + j0;
        if (XY) {
        } else if (vst && j0 + K <= m) {
#pragma unroll
          for (int k = 0; k < K; k += G) {
            Vec<T, G>::store(er + k, eo + k);
            Vec<T, G>::store(fr + k, fo + k);
          }
        } else {
#pragma unroll
          for (int k = 0; k < K; ++k)
            if (j0 + k < m) { er[k] = eo[k]; fr[k] = fo[k]; }
        }
      }
      if (W > 1) {
        if (lane == 0) {
          hand.msg[t & 1][wg][0] = sLE;
          hand.msg[t & 1][wg][1] = sLF;
          hand.msg[t & 1][wg][2] = sDE;
          hand.msg[t & 1][wg][3] = sDF;
          if constexpr (XY)
#pragma unroll
            for (int d = 0; d < NC * DX; ++d) xy.hand[((t & 1) * W + wg) * NC * DX + d] = sX[d];
        }
        __syncthreads();
      }
      if constexpr (XY)
#pragma unroll
        for (int d = 0; d < NC * DX; ++d) {
          rcvX[d] = __shfl_down_sync(FULL_MASK, sX[d], 1);
          if (lane == 31) rcvX[d] = (W > 1 && wg < W - 1) ? xy.hand[((t & 1) * W + wg + 1) * NC * DX + d] : T(0);
        }
      rcvE = __shfl_down_sync(FULL_MASK, sLE, 1);
      rcvF = __shfl_down_sync(FULL_MASK, sLF, 1);
      doE = dnE;
      doF = dnF;
      dnE = __shfl_down_sync(FULL_MASK, sDE, 1);
      dnF = __shfl_down_sync(FULL_MASK, sDF, 1);
      if (lane == 31) {  // from the warp on the right (its lane 0, this step), or nothing
        const bool r = W > 1 && wg < W - 1;
        rcvE = r ? hand.msg[t & 1][wg + 1][0] : T(0);
        rcvF = r ? hand.msg[t & 1][wg + 1][1] : T(0);
        dnE = r ? hand.msg[t & 1][wg + 1][2] : T(0);
        dnF = r ? hand.msg[t & 1][wg + 1][3] : T(0);
      }
    }
    cp_async_wait<0>();
    if constexpr (XY) {
#pragma unroll
      for (int k = 0; k < K; ++k)
        if (j0 + k < M)
#pragma unroll
          for (int d = 0; d < DX; ++d) {
            xy.dy[(size_t(b) * M + j0 + k) * DX + d] = cy[k][d];
            if constexpr (GR) xy.gy[(size_t(b) * M + j0 + k) * DX + d] = cy[k][DXA + d];
          }
    }
  }
  if constexpr (VG) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
      vg += __shfl_xor_sync(FULL_MASK, vg, o);
      vgd += __shfl_xor_sync(FULL_MASK, vgd, o);
    }
    if (W > 1) {
      if (lane == 0) {
        hand.red[0][wg] = vg;
        hand.red[1][wg] = vgd;
      }
      __syncthreads();
      vg = vgd = 0.0;
      for (int w = 0; w < W; ++w) {
        vg += hand.red[0][w];
        vgd += hand.red[1][w];
      }
    }
    if (L == 0) {
      vgamma[b] = HARD ? T(0) : T(vg);
      vgamma_dot[b] = HARD ? T(0) : T(vgd);
    }
  }
  if constexpr (XY) {
    double unused = 0.0;
    hvpw_all2<T, W, false>(s1, unused, hand);
    if (L == 0) xy.s1[b] = T(s1);
  }
  if constexpr (PEN) {
    hvpw_all2<T, W, false>(vp, vpd, hand);
    if (L == 0) {
      var.vpen[b] = T(vp);
      var.vpen_dot[b] = HARD ? T(0) : T(vpd);
    }
  }
}

// Grid: B blocks of W warps (one pair each). rec: (B, N, 4, 32 K) records in the data dtype. vec: C, C-dot, E,
// E-dot 16-byte aligned and M a multiple of 16 / sizeof(T) (then K-wide rows move as 16-byte pieces).
// VAR: the alignment variants (common.cuh, Variant); pen, pen_stride, pdot, pdot_stride, vpen, vpen_dot are read or
// written by the VAR_PENALTY instantiations only (HvpVar).
template <typename T, bool WINDOW, int K, int W, int VAR = 0>
__global__ void __launch_bounds__(32 * W)
hvp_warp_kernel(const T* __restrict__ C, const T* __restrict__ Cdot, const T* __restrict__ gamma,
                const T* __restrict__ gamma_dot, const long long* __restrict__ xlen,
                const long long* __restrict__ ylen, const int* __restrict__ window, T* __restrict__ rec,
                T* __restrict__ E, T* __restrict__ Edot, T* __restrict__ vgamma, T* __restrict__ vgamma_dot,
                int B, int N, int M, int vec, const T* __restrict__ pen, int pen_stride, const T* __restrict__ pdot,
                int pdot_stride, T* __restrict__ vpen, T* __restrict__ vpen_dot) {
  constexpr int CSTAGE = 2 * 32 * W * K * int(sizeof(T));
  constexpr int RSTAGE = hvpw_rstage<T>(K, W, 0);
  constexpr int CR = hvpw_depth(CSTAGE) * CSTAGE, RR = hvpw_depth(RSTAGE) * RSTAGE;
  constexpr int RING = (CR > RR ? CR : RR) / int(sizeof(T));
  __shared__ __align__(16) T ring[RING];  // the forward's C ring, then the backward's record ring
  __shared__ HvpwHand<T, W> hand;
  const int b = blockIdx.x;
  if (b >= B) return;
  const T g = *gamma;  // read on the device: no host sync
  HvpVar<T> var{};  // (filled for the variants only: the plain kernels' code stays what it was)
  if constexpr (VAR != 0) var = HvpVar<T>{pen, pen_stride, pdot, pdot_stride, vpen, vpen_dot};
  if (g == T(0)) {
    hvpw_pair<T, WINDOW, K, W, true, VAR>(C, Cdot, g, T(0), xlen, ylen, window, rec, E, Edot, vgamma, vgamma_dot, b,
                                          N, M, vec != 0, ring, hand, var);
  } else {
    hvpw_pair<T, WINDOW, K, W, false, VAR>(C, Cdot, g, gamma_dot[b], xlen, ylen, window, rec, E, Edot, vgamma,
                                           vgamma_dot, b, N, M, vec != 0, ring, hand, var);
  }
}

// One block's pair of the fused-cost kernels below (HvpXY; xy without its hand, which lives here): shared memory,
// gamma read on the device, hard DTW at gamma == 0. gamma_dot: (B,) or nullptr (0). VG: vgamma, vgamma_dot are
// wanted (else neither is computed nor written, and gamma_dot must be 0).
template <typename T, bool WINDOW, int K, int W, int DX, int XC, bool OM, bool VG = true, bool GR = false>
__device__ __forceinline__ void hvpw_xy_block(HvpXY<T> xy, const T* __restrict__ gamma,
                                              const T* __restrict__ gamma_dot, const long long* __restrict__ xlen,
                                              const long long* __restrict__ ylen, const int* __restrict__ window,
                                              T* __restrict__ rec, T* __restrict__ vgamma, T* __restrict__ vgamma_dot,
                                              int B, int N, int M) {
  constexpr int RSTAGE = hvpw_rstage<T>(K, W, DX);
  constexpr int RING = hvpw_depth(RSTAGE) * RSTAGE / int(sizeof(T));
  __shared__ __align__(16) T ring[RING];  // the backward's record ring (the forward reads no table)
  __shared__ HvpwHand<T, W> hand;
  __shared__ T xhand[2 * W * DX * (GR ? 2 : 1)];
  const int b = blockIdx.x;
  if (b >= B) return;
  const T g = *gamma;
  xy.hand = xhand;
  if (g == T(0)) {
    hvpw_pair<T, WINDOW, K, W, true, 0, DX, XC, OM, VG, GR>(nullptr, nullptr, g, T(0), xlen, ylen, window, rec,
                                                        nullptr, nullptr, vgamma, vgamma_dot, b, N, M, false, ring,
                                                        hand, HvpVar<T>{}, xy);
  } else {
    hvpw_pair<T, WINDOW, K, W, false, 0, DX, XC, OM, VG, GR>(nullptr, nullptr, g, gamma_dot ? gamma_dot[b] : T(0),
                                                         xlen, ylen, window, rec, nullptr, nullptr, vgamma,
                                                         vgamma_dot, b, N, M, false, ring, hand, HvpVar<T>{}, xy);
  }
}

// The second order of soft_dtw(x, y) with the cost XC (COST_SQEUCLIDEAN or COST_L1) of D = DX features formed in the
// cells (HvpXY): grid B blocks of W warps, rec as hvp_warp_kernel's; dx (B, N, DX), dy (B, M, DX), s1, vgamma,
// vgamma_dot (B,). No alignment variants (hvp.py falls back to hvp_cost for those). VG = false: gamma is a constant of
// the caller's graph (gamma_dot must be 0), so vgamma and vgamma_dot are neither computed nor written: no ln w in the
// forward, no H, H-dot (3 lg2 of the weights) in the backward.
template <typename T, bool WINDOW, int K, int W, int DX, int XC, bool VG = true>
__global__ void __launch_bounds__(32 * W)
hvp_warp_xy_kernel(const T* __restrict__ x, const T* __restrict__ y, const T* __restrict__ xdot,
                   const T* __restrict__ ydot, const T* __restrict__ gamma, const T* __restrict__ gamma_dot,
                   const long long* __restrict__ xlen, const long long* __restrict__ ylen,
                   const int* __restrict__ window, T* __restrict__ rec, T* __restrict__ dx, T* __restrict__ dy,
                   T* __restrict__ s1, T* __restrict__ vgamma, T* __restrict__ vgamma_dot, int B, int N, int M) {
  hvpw_xy_block<T, WINDOW, K, W, DX, XC, false, VG>(hvp_xy_io(x, y, xdot, ydot, dx, dy, s1), gamma, gamma_dot, xlen,
                                                    ylen, window, rec, vgamma, vgamma_dot, B, N, M);
}

// Value, gradient and one HVP of soft_dtw(x, y) in one launch, for a direction (x-dot, y-dot) known up front
// (backends/cuda/hvp.py, value_grad_hvp_xy): hvp_warp_xy_kernel's outputs (dx, dy the HVP's, s1, vgamma,
// vgamma_dot), and v (B,) the value, gx (B, N, DX) / gy (B, M, DX) the gradient, without the squared cost's factor 2
// (HvpXY, GR). The first-order forward and backward are not run: the HVP's own passes hold R' and E.
template <typename T, bool WINDOW, int K, int W, int DX, int XC, bool VG = true>
__global__ void __launch_bounds__(32 * W)
hvp_vgh_xy_kernel(const T* __restrict__ x, const T* __restrict__ y, const T* __restrict__ xdot,
                  const T* __restrict__ ydot, const T* __restrict__ gamma, const T* __restrict__ gamma_dot,
                  const long long* __restrict__ xlen, const long long* __restrict__ ylen,
                  const int* __restrict__ window, T* __restrict__ rec, T* __restrict__ v, T* __restrict__ gx,
                  T* __restrict__ gy, T* __restrict__ dx, T* __restrict__ dy, T* __restrict__ s1,
                  T* __restrict__ vgamma, T* __restrict__ vgamma_dot, int B, int N, int M) {
  HvpXY<T> xy = hvp_xy_io(x, y, xdot, ydot, dx, dy, s1);
  xy.v = v;
  xy.gx = gx;
  xy.gy = gy;
  hvpw_xy_block<T, WINDOW, K, W, DX, XC, false, VG, true>(xy, gamma, gamma_dot, xlen, ylen, window, rec, vgamma,
                                                          vgamma_dot, B, N, M);
}

// DILATE with a fused cost (backends/cuda/hvp.py, dilate_xy): the HVP along Omega_ij = ((i - j) / n)^2 with the cost
// XC of D = DX features formed in the cells (HvpXY, OM). Per pair: v (B,) the soft-DTW value, s1 (B,) the temporal
// term <E, Omega>, dx (B, N, DX) / dy (B, M, DX) = sum (alpha E + (1 - alpha) E-dot) (x_i - y_j) (l1: its sign)
// and minus that over i, without the squared cost's factor 2: the gradient of alpha v + (1 - alpha) s1. vgamma,
// vgamma_dot (B,) as hvp_warp_kernel's (gamma_dot = 0). No window, no alignment variant. alpha arrives by value.
template <typename T, int K, int W, int DX, int XC>
__global__ void __launch_bounds__(32 * W)
dilate_xy_kernel(const T* __restrict__ x, const T* __restrict__ y, const T* __restrict__ gamma,
                 const long long* __restrict__ xlen, const long long* __restrict__ ylen, T* __restrict__ rec,
                 const T alpha, T* __restrict__ v, T* __restrict__ s1, T* __restrict__ dx, T* __restrict__ dy,
                 T* __restrict__ vgamma, T* __restrict__ vgamma_dot, int B, int N, int M) {
  HvpXY<T> xy = hvp_xy_io<T>(x, y, nullptr, nullptr, dx, dy, s1);
  xy.alpha = alpha;
  xy.v = v;
  hvpw_xy_block<T, false, K, W, DX, XC, true>(xy, gamma, nullptr, xlen, ylen, nullptr, rec, vgamma, vgamma_dot, B, N,
                                              M);
}

}  // namespace sdtw
