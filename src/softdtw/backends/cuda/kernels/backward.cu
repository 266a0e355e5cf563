// Soft-DTW backward: the expected alignment E = dR[n-1, m-1] / dC and what follows from it.
//
// E[p] = sum over the successors s of p (down, right, diagonal) of E[s] * w(p -> s), where w <= 1 is p's
// normalised weight in s's soft-min, 2^(S[s] - R[p]) in log2 units (Link<T> in common.cuh): float reads
// it from the word the forward stored for s; double evaluates it from S[s] and R[p] = S[p] + cost[p].
// Hard DTW (gamma == 0): w = 1 if s chose p as its argmin, else 0.
//
// The same group layout as the forward runs in reverse: rows enter at the last lane of each warp, columns
// of a lane go right to left, and (E, link) of each lane's first column moves one lane down per step by
// __shfl_down_sync. As in the forward, per-row inputs (x row, window, the boundary column of the chunk
// to the right) come 32 rows at a time per warp, a block ahead, and per-cell inputs (the stored links, C)
// stream through a cp.async ring P - 1 steps ahead, so no step waits for DRAM. Outputs:
//   * fused costs: dx (carried along the row with (E, link), written by lane 0 of the first chunk) and dy
//     (per-lane registers, written at the end of each chunk), both multiplied by grad[b] last: g * (unit * acc), so
//     that a backward run with grad 1 and scaled afterwards (scale_grads.cu, the launcher's backward run ahead in
//     the forward) is bitwise this kernel's with grad;
//   * precomputed cost: dC[b, i, j] = grad[b] * E[b, i, j] (dC may alias C: each cell is read, then written,
//     by the same lane in the same step);
//   * dgamma[b] = grad[b] * (value[b] - <E_b, C_b>) / gamma, 0 at gamma = 0 (<E, C> summed in float64:
//     the two terms nearly cancel).
// dx rows past x_lengths and dy columns past y_lengths are written as zeros here (outputs need no memset).
#include "forward_pair.cuh"  // the checkpointed backward recomputes tiles with the forward

namespace sdtw {

template <typename T>
struct BackwardArgs {
  const T* x;             // (B, N, DT), fused costs
  const T* y;             // (B, M, DT), fused costs
  const T* C;             // (B, N, M) cost table (COST_GRAM: x·yᵀ), or (B, crows, M): rows [crow0, crow0 + crows)
  const long long* xlen;  // (B,)
  const long long* ylen;  // (B,)
  const int* window;      // (B, N, 2) or unused
  const T* grad;          // (B,)
  const typename Link<T>::Word* saved;  // (B, nch, N, CW) step-major links from the forward
  T* dx;                  // (B, N, DT)
  T* dy;                  // (B, M, DT)
  T* dC;                  // like C (may be C itself)
  const T* value;         // (B,) forward values
  T* dgamma;              // (B,)
  T* bnd;                 // SEQ: (B, N, NB): (E, link, dx[DT]) of the first column of the chunk to the right;
                          // CHAIN: (B, nch, N, NB), every chunk's first column
  int* flags;             // CHAIN: (B, nch) rows of bnd published by each chunk, counted from the bottom
  T* fbnd;                // CKPT: the forward's column checkpoints (B, nch, N)
  T* ckpt;                // CKPT: the forward's row checkpoints (B, nT, nch * CW)
  typename Link<T>::Word* tile;  // CKPT: this block's two tile buffers of TH step rows of CW links
  double* ecsum;          // CHAIN: (B,) <E, C> summed over the chunks (zeroed by the caller)
  int* done;              // CHAIN: (B,) chunks finished (zeroed by the caller)
  int N, M, nch, TH;
  int stagger;            // CKPT: tile stagger between chunks, as in the forward (tile_shift)
  int crow0, crows;       // C's and dC's first row and rows per pair: (0, N) for the whole table; CKPT: the band of
                          // rows [crow0, crow0 + crows) this pass sweeps (the row bands of a large-D checkpoint)
  T* rowb;                // CKPT row bands: (B, M, 2) (E, link) of the row below the band (read) and of its top
                          // row (written), handed from band to band
  // Alignment variants (VAR, common.cuh); unused (null) in the plain DP.
  const T* pen;           // VAR_PENALTY: pair b's step penalty at pen[b * pen_stride] (natural units)
  int pen_stride;
  const double* endr;     // VAR_OPEN_END: (B, M) R of the last row and (B, 2) (value, argmin) from the forward
  const double* endv;
  T* dpen;                // VAR_PENALTY: (B,) grad_b d value_b / d p
  double* pensum;         // VAR_PENALTY, CHAIN: (B,) d value / d p summed over the chunks (zeroed by the caller)
};

// SEQ: one group walks the chunks of a pair right to left, links from the stored table. CHAIN: one block
// per (pair, chunk), chunks chained right to left through L2 flags, links from the stored table. CKPT:
// CHAIN without a stored table: the rows are cut into tiles of TH rows (tile_shift, forward_pair.cuh) and
// the block has two groups of W warps. The recompute group (recompute_tiles) runs tile r's forward
// (forward_pair, MODE_RECOMP) from the checkpointed row above it and the saved left column into tile
// buffer r & 1 while the backward group sweeps tile r + 1 (the FlashAttention pattern): only 2 TH CW links
// per block exist at any time, and the sweep never pauses for a recompute (a pause held up every chunk
// to its left: benchmarks/OPTIMIZATION_LOG.md).
enum BwdMode { BWD_SEQ = 0, BWD_CHAIN = 1, BWD_CKPT = 2 };

// Named barriers of the checkpointed backward: each group's own step barrier, and per tile buffer
// "tile ready" (the recompute group arrives, the backward group waits) and "buffer free" (the reverse).
enum Bar { BAR_BWD = 1, BAR_RECOMP = 2, BAR_READY = 3, BAR_FREE = 5 };

template <int COST, int DT>
struct Carry {  // values handed from lane to lane along a row: E, link, and dx[DT] (fused) or E's row sum (COST_GRAM)
  static constexpr int DX = fused_cost<COST>() ? DT : (COST == COST_GRAM ? 1 : 0);
  static constexpr int NB = 2 + DX;
};

// The per-row inputs that travel along the lanes with the (reverse) wavefront.
template <typename T, int DT, int NB>
struct BwdRow {
  T x[DT];
  int lo, hi;  // window columns [lo, hi)
  T right[NB];  // (E, link, dx) of the next chunk's first column (read by lane 31 of the last warp only)
};

template <typename T, int COST, int DT, int K, int W, bool WINDOW, bool HARD, int P, int MODE = BWD_SEQ,
          int BAR = 0, int VAR = 0>
__device__ __forceinline__ void backward_pair(const BackwardArgs<T>& a, const int b, const T scale,
                                              const T gamma, const T xs, T (*hand)[W][Carry<COST, DT>::NB], double* red,
                                              typename Link<T>::Word* wring, T* cring, const int c0 = 0) {
  constexpr int NL = 32 * W;
  constexpr int CW = NL * K;
  constexpr int DX = Carry<COST, DT>::DX;
  constexpr int NB = Carry<COST, DT>::NB;
  constexpr bool FUSED = fused_cost<COST>();
  constexpr bool GRAM = COST == COST_GRAM;  // also sums E's rows (dx) and columns (dy)
  constexpr bool XY = reads_xy<COST>();
  using Word = typename Link<T>::Word;
  const Word BORDER = Link<T>::border();
  constexpr bool OE = (VAR & VAR_OPEN_END) != 0, PEN = (VAR & VAR_PENALTY) != 0;
  const int lane = threadIdx.x & 31;
  const unsigned tid = group_tid<W, BAR>(), nthreads = group_threads<W, BAR>();
  const int wg = (W == 1) ? 0 : int(tid >> 5);
  const int L = wg * 32 + lane;
  const int N = a.N, M = a.M;
  const int n = int(a.xlen[b]), m = int(a.ylen[b]);
  const int nch_b = (m + CW - 1) / CW;
  // Rows of this pass, bottom up: [r0, r1) = [0, n), or in a row band of a large-D checkpoint (CKPT) the band's
  // rows of the pair. The row below then enters from rowb as (E, link), and the band's top row leaves there.
  // Only the checkpointed backward of a table (a cost, or COST_GRAM's x·yᵀ) takes bands of rows; the others compile
  // as they did without. COST_GRAM's row sums go to dx by absolute row; its column sums add up over the bands.
  constexpr bool ROWS = MODE == BWD_CKPT && !FUSED;
  const int r0 = ROWS ? a.crow0 : 0, r1 = ROWS ? min(n, a.crow0 + a.crows) : n, nr = r1 - r0;
  const bool below = ROWS && r1 < n;
  const int steps = nr + NL - 1;
  // The forward (SEQ, K <= 4) ended its pass at the last lane holding a column of the pair (forward_pair):
  // the reverse pass starts that many steps late, when that lane reaches row n - 1 (TRIM).
  constexpr bool TRIM = MODE == BWD_SEQ && trims_pass<K>();
  const T* xb = a.x + size_t(b) * N * DT;
  const T* yb = a.y + size_t(b) * M * DT;
  // Column j of row `row` of C and dC at [(row - r0) * M + j]: the whole table, or (ROWS) a band of its rows.
  const T* Cb = a.C + size_t(b) * (ROWS ? a.crows : N) * M;
  T* dCb = a.dC + size_t(b) * (ROWS ? a.crows : N) * M;
  // No C (a.C null, float links only): a float link holds the normalised weights, so the cost enters only <E, C>,
  // i.e. dgamma. A caller that drops dgamma passes none (the Gram backward then skips its x·yᵀ GEMM); the ring's
  // C slots stay zero, and the dgamma written is a finite value nobody reads. float64 links (S) need R = S + cost,
  // and the checkpointed backward recomputes the forward: both always read C.
  const bool readc = !FUSED && (Link<T>::NEEDS_R || MODE == BWD_CKPT || a.C != nullptr);
  // C read and dC written in 16-byte groups where both tables allow (common.cuh, table_groups).
  const bool cgroups = !FUSED && table_groups<T, K>(a.C, M) && table_groups<T, K>(a.dC, M);
  const int* wb = a.window + size_t(b) * N * 2;
  const T g = a.grad[b];
  // d cost / d x = slope_unit * cost_slope(x - y); the kernel sees pre-scaled x' = xs x, y' = xs y, so the
  // squared Euclidean slopes it sums are xs times too large (L1's signs are not).
  const T slope_unit = (COST == COST_SQEUCLIDEAN) ? T(2) / xs : T(1);
  const size_t stage = size_t(nthreads) * K;                       // ring stride between stages
  Word* my_wring = wring + size_t(tid) * K;
  T* my_cring = cring + size_t(tid) * K;
  if (!FUSED && !readc) {
    for (int q = 0; q < P * K; ++q) my_cring[(q / K) * stage + q % K] = T(0);  // read by this thread only
  }
  double ec = 0.0;
  // Penalty: in log2 units (the float64 weights add it to R of the vertical and horizontal predecessor), and
  // d value / d p summed over the pair (units of Link<T>::UNIT).
  const T pen = PEN ? a.pen[size_t(b) * a.pen_stride] * scale : T(0);
  double pensum = 0.0;
  if (MODE != BWD_SEQ) {  // this block zeroes what lies outside the pair in its own columns (and dx: chunk 0)
    const int cbeg = c0 * CW, cend = min(M, cbeg + CW);
    if (XY) {
      if (c0 == 0)
        for (int i = n + L; i < N; i += NL)
#pragma unroll
          for (int d = 0; d < DT; ++d) a.dx[(size_t(b) * N + i) * DT + d] = T(0);
      if (c0 >= nch_b)
        for (int j = cbeg + L; j < cend; j += NL)
#pragma unroll
          for (int d = 0; d < DT; ++d) a.dy[(size_t(b) * M + j) * DT + d] = T(0);
    }
    if (!FUSED) {
      for (int i = ROWS ? max(r0, c0 >= nch_b ? 0 : n) : (c0 >= nch_b ? 0 : n); i < (ROWS ? r0 + a.crows : N); ++i)
        for (int j = cbeg + L; j < cend; j += NL) dCb[size_t(i - r0) * M + j] = T(0);
    }
    if (c0 >= nch_b) return;  // block-uniform: no chunk of this pair lies here
    if (ROWS && r0 > 0 && nr <= 0) return;  // a row band below the pair's last row (the band at row 0 adds up <E, C>)
  } else {
    if (XY) {  // rows past n_b and columns past the visited chunks get zero gradients
      for (int i = n + L; i < N; i += NL)
#pragma unroll
        for (int d = 0; d < DT; ++d) a.dx[(size_t(b) * N + i) * DT + d] = T(0);
      for (int j = nch_b * CW + L; j < M; j += NL)
#pragma unroll
        for (int d = 0; d < DT; ++d) a.dy[(size_t(b) * M + j) * DT + d] = T(0);
    }
    if (!FUSED) {  // dC: rows past n_b, and columns right of the visited chunks (the main loop writes the rest)
      for (int i = n; i < N; ++i)
        for (int j = L; j < M; j += NL) dCb[size_t(i) * M + j] = T(0);
      for (int i = 0; i < n; ++i)
        for (int j = nch_b * CW + L; j < M; j += NL) dCb[size_t(i) * M + j] = T(0);
      if (TRIM && nch_b > 0) {
        // A trimmed pass (TRIM) starts late: a lane past the pair's last column, L >= PL, first reaches row
        // n - 2 - (L - PL); the same lane zeroes the rows above it here (no two threads write one cell).
        const int PL = pass_lanes<TRIM, K>(m, nch_b - 1, NL);
        const int jl = (nch_b - 1) * CW + L * K;
        if (L >= PL)
          for (int i = max(0, n - 1 - (L - PL)); i < n; ++i)
#pragma unroll
            for (int k = 0; k < K; ++k)
              if (jl + k < M) dCb[size_t(i) * M + jl + k] = T(0);
      }
    }
  }

  const int c_hi = MODE == BWD_SEQ ? nch_b - 1 : c0, c_lo = MODE == BWD_SEQ ? 0 : c0;
  for (int c = c_hi; c >= c_lo; --c) {
    // (E, link, dx) of the first column of the chunk on the right (read) and of this chunk (written).
    const T* bnd_in = MODE == BWD_SEQ ? a.bnd + size_t(b) * N * NB : a.bnd + (size_t(b) * a.nch + c + 1) * N * NB;
    T* bnd_out = MODE == BWD_SEQ ? a.bnd + size_t(b) * N * NB : a.bnd + (size_t(b) * a.nch + c) * N * NB;
    const int* flag_in = a.flags + size_t(b) * a.nch + c + 1;
    int* flag_out = a.flags + size_t(b) * a.nch + c;
    const int j0 = c * CW + L * K;
    T yv[K][DT];
    T dyacc[K][DT];
    if (XY) {
#pragma unroll
      for (int k = 0; k < K; ++k)
#pragma unroll
        for (int d = 0; d < DT; ++d) {
          yv[k][d] = (j0 + k < M) ? scaled_input<T, COST>(yb[size_t(j0 + k) * DT + d], xs) : T(0);
          dyacc[k][d] = T(0);
        }
    }
    T Eb[K];
    Word Sb[K];  // E and link of this lane's columns on the row below (processed one step ago)
#pragma unroll
    for (int k = 0; k < K; ++k) { Eb[k] = T(0); Sb[k] = BORDER; }
    if constexpr (OE) if (!below) {
      // Open end: the last row's E starts from the end's soft-min weights 2^(v - R[n-1, j]) (hard: one-hot on the
      // first argmin). They wait in Eb, the row "below" the last: float links Sb = one-hot "up" (w_up = 1, w_diag
      // = 0) carry them into the last row's E with no extra instruction per cell; float64 weights depend on R, so
      // Sb keeps the border (weights 0) and the cell adds Eb itself (endrow, below). The penalty sum, which adds
      // every w_up E term, takes the float seeds back out.
      const double v = a.endv[2 * b], arg = a.endv[2 * b + 1];
#pragma unroll
      for (int k = 0; k < K; ++k) {
        const int j = j0 + k;
        if (j < m) {
          Eb[k] = HARD ? T(double(j) == arg ? 1.0 : 0.0) : Num<T>::ex2(T(v - a.endr[size_t(b) * M + j]));
          if (!Link<T>::NEEDS_R) {
            Sb[k] = Link<T>::hard(1);
            if (PEN) pensum -= double(Eb[k] * Link<T>::w_up(Sb[k], T(0), HARD));
          }
        }
      }
    }
    // float links, no open end: the end cell's E = 1 enters the same way, as a seed "below" it with the one-hot up
    // link (w_up = Q exactly, and Q * UNIT == 1.f), not as a test per cell and step. Cells right of column m - 1
    // then get E = 0 with no test either: every E they read is 0 and float weights are finite whatever the bits
    // (OPTIMIZATION_LOG.md, "Backward: the end cell as a seed").
    constexpr bool SEED = !Link<T>::NEEDS_R && !OE;
    // Float links, with the seed or the open end's seeds (j < m only): every E a cell right of column m - 1 reads is
    // 0 and its weights are finite, so it gets E = 0 with no per-cell select on the serial E chain.
    constexpr bool ZERO_PAST_END = !Link<T>::NEEDS_R;
    if constexpr (SEED) if (!below) {
#pragma unroll
      for (int k = 0; k < K; ++k)
        if (j0 + k == m - 1) {
          Eb[k] = T(1);
          Sb[k] = Link<T>::hard(1);
          if (PEN) pensum -= double(Eb[k] * Link<T>::w_up(Sb[k], T(0), HARD));
        }
    }
    if (below) {  // the row below the band, from the band below (written by this lane there)
#pragma unroll
      for (int k = 0; k < K; ++k)
        if (j0 + k < M) {
          Eb[k] = a.rowb[(size_t(b) * M + j0 + k) * 2];
          Sb[k] = Link<T>::from_slot(a.rowb[(size_t(b) * M + j0 + k) * 2 + 1]);
        }
    }
    // (E, link) of column j0 on the row just processed -> lane L - 1; before the lane's first row, the row below.
    T Efirst = T(0);
    Word Sfirst = BORDER;
    if (below) {
      Efirst = Eb[0];
      Sfirst = Sb[0];
    }
    T dxout[DX > 0 ? DX : 1];        // dx of that row accumulated from column j0 rightwards
#pragma unroll
    for (int d = 0; d < DX; ++d) dxout[d] = T(0);
    T pE = T(0);
    Word pS = BORDER;  // right neighbour received one step ago = diagonal neighbour now
    if (below && L == NL - 1 && c + 1 < nch_b) {  // the next chunk's cell below-right
      pE = __ldcg(bnd_in + size_t(r1) * NB);
      pS = Link<T>::from_slot(__ldcg(bnd_in + size_t(r1) * NB + 1));
    }
    if (W > 1) {
      if (lane == 0) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          hand[h][wg][0] = T(0);
          hand[h][wg][1] = Link<T>::to_slot(BORDER);
#pragma unroll
          for (int d = 0; d < DX; ++d) hand[h][wg][2 + d] = T(0);
        }
      }
      group_sync<W, BAR>();
    }
    const Word* sbase = a.saved + (size_t(b) * a.nch + c) * size_t(N) * CW;
    unsigned colok = 0, colend = 0;  // per column k of the lane: j < m_b, j == m_b - 1 (bit k)
#pragma unroll
    for (int k = 0; k < K; ++k) {
      colok |= unsigned(j0 + k < m) << k;
      colend |= unsigned(j0 + k == m - 1) << k;
    }

    // Row stream: lane 31 of warp wg works on row top - (tau mod 32) at step tau, with
    // top = n - 1 + 32 * (W - 1 - wg) - 32 * floor(tau / 32); lane l of the warp holds row top - l.
    const bool edge = (wg == W - 1) && (c + 1 < nch_b);  // lane 31 of this warp reads the next chunk
    const bool waits = MODE != BWD_SEQ && edge;           // ... once that chunk has published the rows
    auto load_row = [&](const int row, BwdRow<T, DT, NB>& q, const bool inputs, const bool right) {
      const bool ok = row >= 0 && row < n;
      if (inputs) {
#pragma unroll
        for (int d = 0; d < DT; ++d) q.x[d] = (XY && ok) ? scaled_input<T, COST>(xb[size_t(row) * DT + d], xs) : T(0);
        q.lo = (WINDOW && ok) ? wb[2 * row] : 0;
        q.hi = (WINDOW && ok) ? wb[2 * row + 1] : 0;
      }
      if (right) {
        const bool in = edge && (ROWS ? unsigned(row - r0) < unsigned(nr) : ok);  // (a row band: its own rows only)
        q.right[0] = in ? __ldcg(bnd_in + size_t(row) * NB) : T(0);
        q.right[1] = in ? __ldcg(bnd_in + size_t(row) * NB + 1) : Link<T>::to_slot(BORDER);
#pragma unroll
        for (int d = 0; d < DX; ++d) q.right[2 + d] = in ? __ldcg(bnd_in + size_t(row) * NB + 2 + d) : T(0);
      }
    };
    const int top0 = r1 - 1 + 32 * (W - 1 - wg);
    const int skip = NL - pass_lanes<TRIM, K>(m, c, NL);  // steps of lanes past column m - 1 only
    // Those lanes hand no E to the left (their cells are invalid: E = 0), but links the forward did not
    // store; float links are fixed-point and finite whatever the bits, a double S could be NaN (0 * NaN):
    // the lane left of them takes the border instead.
    const bool right_dead = TRIM && Link<T>::NEEDS_R && j0 + K >= m;
    // Rows enter each warp at lane 31 and travel down. A pass that starts late enters them at the warp's
    // last lane holding a column, 31 - sw: the warp's stream runs sw steps behind (stream step tq = tau - sw).
    const int sw = min(31, max(0, skip - 32 * (W - 1 - wg)));
    const int tq0 = skip - sw;
    // Chained (LATE): the next chunk's column of the next block is read LATE_AT steps into the block, not at
    // its start, as in the storing forward (forward_pair): the chunk waits for 32 - LATE_AT fewer rows. The
    // checkpoint backward once kept the early load (6 % slower with the late one); since the release left the
    // step, the late one is 3 % faster there and spares ptxas the spills the early one now gets
    // (OPTIMIZATION_LOG.md "Chained backward: release once per block").
    constexpr bool LATE = MODE != BWD_SEQ;
    constexpr int LATE_AT = CHAIN_LATE_AT;
    BwdRow<T, DT, NB> cur, nxt, mine;
    if (waits) wait_rows(flag_in, min(nr, 32));  // waits: chained, so LATE (the next block's rows come later)
    load_row(top0 - 32 * (tq0 / 32) - lane, cur, true, true);
    load_row(top0 - 32 * (tq0 / 32) - 32 - lane, nxt, true, !LATE);
    // LATE: the stream step of the next refill (a multiple of 32) or of the next late load: one test per step
    // for both, as many as the refill alone had (a second per-step test, tried before, won the store backward
    // only 0.5 of the 2.4 ms the lag costs: OPTIMIZATION_LOG.md, "Checkpoint sweep").
    int next_ev = LATE_AT;  // tq0 = 0 in the chained mode (no TRIM)
#pragma unroll
    for (int d = 0; d < DT; ++d) mine.x[d] = T(0);
    mine.lo = mine.hi = 0;

    // Link (and C) ring: the values of reverse step tau (row n - 1 - tau + NL - 1 - L, stored at forward
    // step n + NL - 2 - tau, i.e. slot (n + NL - 2 - tau) mod N), issued P - 1 steps ahead.
    int islot = (n + NL - 2 - skip) % N;
    const int TH = a.TH;
    const Tiles tiles(c, nch_b, a.stagger, TH);  // CKPT only
    // CKPT: the row of tile r sits in buffer r & 1 at slot (row - first(r) + L) mod TH. Issues come one
    // row up per call, so the slot counts down (mod TH), and the tile and its buffer change only when the
    // row leaves the tile. A division and a modulo per step here made the sweep's step loop 434
    // instructions against the store sweep's 292 (benchmarks/probes/sass_check.py), and the 65536^2 checkpoint
    // backward 93.5 ms against 66.8 now (OPTIMIZATION_LOG.md, "Checkpoint sweep").
    int trow = r1 - 1 - skip + (NL - 1 - L);  // the row of the next issue
    int tfirst = tiles.first(tiles.of(r1 - 1));
    int tslot = (trow - tfirst + L) % TH;     // >= 0: trow >= r1 - 1 >= tfirst
    const Word* tbuf = a.tile + size_t(tiles.of(r1 - 1) & 1) * TH * CW;
    const Word* const tother = a.tile + size_t(TH) * CW;  // tbuf toggles between a.tile and this
    auto issue = [&](const int tau) {
      const int row = r1 - 1 - tau + (NL - 1 - L);
      const bool ok = ROWS ? unsigned(row - r0) < unsigned(nr) : row >= 0 && row < n;
      const int s = int(unsigned(tau) % P);  // (tau >= 0: an unsigned modulo is 1-3 instructions, a signed one 5)
      const Word* src = sbase + size_t(islot) * CW;
      if (MODE == BWD_CKPT) {
        src = tbuf + size_t(ok ? tslot : 0) * CW;
        --trow;
        tslot = tslot == 0 ? TH - 1 : tslot - 1;
        if (unsigned(trow) < unsigned(tfirst)) {  // into the tile above (rows below 0 never cross)
          const int d = tfirst - max(0, tfirst - TH);  // rows of the tile above, <= TH
          tfirst -= d;
          tslot += d;
          if (tslot >= TH) tslot -= TH;
          tbuf = tbuf == a.tile ? tother : a.tile;
        }
      }
      cp_async_step<Word, K>(my_wring + s * stage, src, L, NL, ok);
      if (!FUSED && readc) {
        // (a row outside the pass is clamped into it: its address stays inside the table; common.cuh, table_groups)
        const int crow = ROWS ? min(max(row, r0), r1 - 1) - r0 : clamp_row(row, n);
        cp_async_table_row<T, K>(my_cring + s * stage, Cb + size_t(crow) * M + j0, ok, j0, M, cgroups);
      }
      cp_async_commit();
      islot = (islot == 0) ? N - 1 : islot - 1;
    };
    // CKPT: wait for tile r before the first prefetch of its rows, i.e. of lane NL - 1 (the lane furthest
    // up) at step n - first(r + 1); hand buffer r & 1 back once lane 0 (the last lane to leave a row)
    // has passed the tile's top row. The recompute group then writes tile r - 2 there, while the sweep is
    // in tile r - 1 at least TH > NL + P rows away (launch.py), so no prefetch in flight reads it.
    // The steps of the next wait and hand-back are kept, not recomputed per step (as the slots above).
    auto enter_step = [&](int r) { return r1 - tiles.first(r + 1); };  // lane NL - 1 reaches tile r's last row
    auto done_step = [&](int r) { return r1 - 1 - tiles.first(r) + NL - 1; };  // lane 0 leaves tile r's first row
    const int rt0 = ROWS ? tiles.of(r0) : 0;  // the pass's top tile (0 but in a row band)
    int next_tile = tiles.of(r1 - 1);
    int done_tile = next_tile;
    int enter_at = enter_step(next_tile), done_at = done_step(done_tile);
    auto ensure = [&](const int tq) {
      if constexpr (MODE == BWD_CKPT) {
        while (tq >= enter_at) {  // group-uniform
          bar_wait(BAR_READY + (next_tile & 1), 64 * W);
          --next_tile;
          enter_at = next_tile >= rt0 ? enter_step(next_tile) : 0x7fffffff;  // none left
        }
      }
    };
    auto release = [&](const int tq) {
      if constexpr (MODE == BWD_CKPT) {
        if (tq == done_at) {  // group-uniform
          if (done_tile >= rt0 + 2) bar_arrive(BAR_FREE + (done_tile & 1), 64 * W);
          --done_tile;
          done_at = done_tile >= rt0 ? done_step(done_tile) : -1;  // none left (tq >= 0)
        }
      }
    };
    for (int tau = skip; tau < skip + P - 1; ++tau) {
      ensure(tau);
      issue(tau);
    }

    // hand[h][w][q] = hflat[(h W + w) NB + q]: the slots read ((tau + 1) & 1) and written (tau & 1)
    // alternate by an offset instead of an index computed per step. (Counting the ring stages the same
    // way instead of tau % P was tried: fewer instructions, 10-15 % slower store backward, OPTIMIZATION_LOG.)
    T* const hflat = &hand[0][0][0];
    int hrd = ((skip + 1) & 1) * W * NB, hwr = (skip & 1) * W * NB;
    // Two steps per iteration: the values a step hands to the next (E and the links of the row below, the
    // right neighbour's) then alternate between two register sets instead of ~10 moves per step. Backward DP
    // -4 to -18 % (32 x 512² 181 -> 153 µs, 16 x 2048² 914 -> 770). Not for float64 (+1-5 %), the chained
    // Gram-cost kernel (+3 %) nor the checkpoint sweep (its recompute shares the kernel: 128 registers, spills
    // and serialised ex2 in SASS). OPTIMIZATION_LOG.md, "The backward's step loop unrolled by two".
    constexpr int UNROLL = (sizeof(T) == 8 || MODE == BWD_CKPT || (GRAM && MODE == BWD_CHAIN)) ? 1 : 2;
#pragma unroll UNROLL
    for (int tau = skip; tau < steps; ++tau) {
      const int i = r1 - 1 - tau + (NL - 1 - L);
      const bool live = ROWS ? unsigned(i - r0) < unsigned(nr) : (i >= 0) && (i < n);
      const int tq = tau - sw;
      if (LATE ? tq == next_ev : (tq & 31) == 0 && tq > tq0) {
        if (!LATE || (tq & 31) == 0) {
          // The rows lane 0 has handed over (those of steps < tau; common.cuh, publish_rows). Chained modes
          // only: there tq == tau (no TRIM).
          publish_rows(MODE != BWD_SEQ && L == 0 && c > 0, flag_out, tau, NL, nr);
          cur = nxt;
          load_row(top0 - 32 * (tq / 32) - 32 - lane, nxt, true, !LATE);
          next_ev = tq + LATE_AT;
        } else {
          if (waits) wait_rows(flag_in, min(nr, 32 * (tq / 32) + 64));
          load_row(top0 - 32 * (tq / 32) - 32 - lane, nxt, false, true);
          next_ev = tq + 32 - LATE_AT;
        }
      }
      const int src = tq & 31;
      const bool entry = lane == 31 - sw;
#pragma unroll
      for (int d = 0; d < DT; ++d) {
        const T in = __shfl_sync(FULL_MASK, cur.x[d], src);
        const T dn = __shfl_down_sync(FULL_MASK, mine.x[d], 1);
        mine.x[d] = entry ? in : dn;
      }
      if (WINDOW) {
        const int lin = __shfl_sync(FULL_MASK, cur.lo, src), hin = __shfl_sync(FULL_MASK, cur.hi, src);
        const int ldn = __shfl_down_sync(FULL_MASK, mine.lo, 1), hdn = __shfl_down_sync(FULL_MASK, mine.hi, 1);
        mine.lo = entry ? lin : ldn;
        mine.hi = entry ? hin : hdn;
      }
      T nextchunk[NB];
#pragma unroll
      for (int q = 0; q < NB; ++q) nextchunk[q] = q == 1 ? Link<T>::to_slot(BORDER) : T(0);
      if (edge) {  // warp-uniform: only the last warp, and only when a chunk lies to the right
#pragma unroll
        for (int q = 0; q < NB; ++q) nextchunk[q] = __shfl_sync(FULL_MASK, cur.right[q], src);
      }
      T Er = __shfl_down_sync(FULL_MASK, Efirst, 1);
      Word Sr = __shfl_down_sync(FULL_MASK, Sfirst, 1);
      T dxin[DX > 0 ? DX : 1];
#pragma unroll
      for (int d = 0; d < DX; ++d) dxin[d] = __shfl_down_sync(FULL_MASK, dxout[d], 1);
      // Lane 31 takes its right neighbour from lane 0 of the warp on the right (one step ago, through shared
      // memory), or from the next chunk's first column. Every lane reads (a broadcast) and selects: no
      // divergent branch around the shuffles.
      T in31[NB];
#pragma unroll
      for (int q = 0; q < NB; ++q) in31[q] = nextchunk[q];
      if (W > 1 && wg < W - 1) {  // warp-uniform
        const T* h = hflat + (wg + 1) * NB + hrd;
#pragma unroll
        for (int q = 0; q < NB; ++q) in31[q] = h[q];
      }
      if (lane == 31) {
        Er = in31[0];
        Sr = Link<T>::from_slot(in31[1]);
#pragma unroll
        for (int d = 0; d < DX; ++d) dxin[d] = in31[2 + d];
      }
      if (right_dead) Sr = BORDER;  // (Er is 0 there)
      T Ed = pE;
      Word Sd = pS;
      pE = Er;
      pS = Sr;
      ensure(tau + P - 1);
      issue(tau + P - 1);
      cp_async_wait<P - 1>();
      Word s[K];
      T cr[K];
#pragma unroll
      for (int k = 0; k < K; ++k) {
        s[k] = my_wring[(unsigned(tau) % P) * stage + k];
        cr[k] = T(0);
        if constexpr (!FUSED) cr[k] = my_cring[(unsigned(tau) % P) * stage + k];
      }
      if (live) {
        const bool endrow = i == n - 1;
        T ecrow = T(0);
        T penrow = T(0);
        T dcrow[FUSED ? 1 : K];  // grad[b] E of the lane's cells, stored as one row piece after them
#pragma unroll
        for (int k = K - 1; k >= 0; --k) {
          const int j = j0 + k;
          T cst;  // fused, COST_GRAM: in log2 units (pre-scaled inputs); precomputed: natural units
          if (FUSED) {
            cst = T(0);
#pragma unroll
            for (int d = 0; d < DT; ++d) cst += cost_term<T, COST>(mine.x[d] - yv[k][d]);
          } else if (GRAM) {
            cst = gram_cost(cr[k], mine.x[0], yv[k][0], scale);
          } else {
            cst = cr[k];
          }
          T Rp = T(0);
          if constexpr (Link<T>::NEEDS_R) Rp = s[k] + (XY ? cst : cst * scale);
          T e;
          if constexpr (PEN) {
            // This cell is the vertical / horizontal predecessor of the cells below and right: the E terms of
            // those two edges are its share of d value / d p. (float64: the penalty is part of their weights,
            // and a cell outside the pair or the band has no R to form them with: it adds nothing.)
            const T Rq = Link<T>::NEEDS_R ? Rp + pen : Rp;
            const T t = Eb[k] * Link<T>::w_up(Sb[k], Rq, HARD) + Er * Link<T>::w_left(Sr, Rq, HARD);
            const bool in = ((colok >> k) & 1u) && (!WINDOW || (j >= mine.lo && j < mine.hi));
            penrow += in ? t : T(0);
            e = (t + Ed * Link<T>::w_diag(Sd, Rp, HARD)) * T(Link<T>::UNIT);
          } else {
            // Er (the cell just formed, right of this one) is the serial E chain: it enters last.
            e = (Eb[k] * Link<T>::w_up(Sb[k], Rp, HARD) + Ed * Link<T>::w_diag(Sd, Rp, HARD) +
                 Er * Link<T>::w_left(Sr, Rp, HARD)) * T(Link<T>::UNIT);
          }
          if constexpr (OE) {
            if (Link<T>::NEEDS_R && endrow) e += Eb[k];
          } else if (!SEED && endrow && ((colend >> k) & 1u)) {
            e = T(1);
          }
          if (!ZERO_PAST_END || WINDOW) {  // (float links: past column m - 1, e is 0 already)
            bool valid = (colok >> k) & 1u;
            if (WINDOW) valid = valid && j >= mine.lo && j < mine.hi;
            if (!valid) e = T(0);
          }
          Ed = Eb[k];
          Sd = Sb[k];
          Eb[k] = e;
          Sb[k] = s[k];
          Er = e;
          Sr = s[k];
          ecrow += e * cst;
          if (FUSED) {
#pragma unroll
            for (int d = 0; d < DT; ++d) {
              const T gd = e * cost_slope<T, COST>(mine.x[d] - yv[k][d]);
              dxin[d] += gd;
              dyacc[k][d] += gd;
            }
          } else {
            dcrow[k] = g * e;
            if (GRAM) {  // (e = 0 past column m - 1)
              dxin[0] += e;
              dyacc[k][0] += e;
            }
          }
        }
        if constexpr (!FUSED) store_table_row<T, K>(dCb + size_t(i - r0) * M + j0, dcrow, j0, M, cgroups);
        ec += double(ecrow);
        if (PEN) pensum += double(penrow);
        Efirst = Er;
        Sfirst = Sr;
#pragma unroll
        for (int d = 0; d < DX; ++d) dxout[d] = dxin[d];
      }
      // Lane 0's row output, after the cells' block rather than inside it: inside, ptxas copied every
      // loop-carried register on both sides of the branch, ~30 moves per step in warp 0 (SASS).
      if (L == 0 && live) {
        if (c > 0) {  // hand the row over to the chunk on the left
          T* q = bnd_out + size_t(i) * NB;
          q[0] = Efirst;
          q[1] = Link<T>::to_slot(Sfirst);
#pragma unroll
          for (int d = 0; d < DX; ++d) q[2 + d] = dxout[d];
        } else if (XY) {
#pragma unroll
          for (int d = 0; d < DX; ++d) a.dx[(size_t(b) * N + i) * DT + d] = g * (GRAM ? dxout[d] : slope_unit * dxout[d]);
        }
      }
      if (W > 1) {
        if (lane == 0) {
          T* h = hflat + wg * NB + hwr;
          h[0] = Efirst;
          h[1] = Link<T>::to_slot(Sfirst);
#pragma unroll
          for (int d = 0; d < DX; ++d) h[2 + d] = dxout[d];
        }
        hrd = W * NB - hrd;
        hwr = W * NB - hwr;
        group_sync<W, BAR>();
      }
      release(tau);
    }
    if (MODE != BWD_SEQ && L == 0 && c > 0) st_release(flag_out, nr);  // the rows since the last refill
    cp_async_wait<0>();
    if (ROWS && r0 > 0) {  // the band's top row (Eb, Sb hold it now), for the band above
#pragma unroll
      for (int k = 0; k < K; ++k)
        if (j0 + k < M) {
          a.rowb[(size_t(b) * M + j0 + k) * 2] = Eb[k];
          a.rowb[(size_t(b) * M + j0 + k) * 2 + 1] = Link<T>::to_slot(Sb[k]);
        }
    }
    if (XY) {  // fused: dy; COST_GRAM: E's column sums
      const T dyunit = GRAM ? T(1) : -slope_unit;
#pragma unroll
      for (int k = 0; k < K; ++k)
        if (j0 + k < M) {
#pragma unroll
          for (int d = 0; d < DT; ++d) {
            T& out = a.dy[(size_t(b) * M + j0 + k) * DT + d];
            const T v = (j0 + k < m) ? g * (dyunit * dyacc[k][d]) : T(0);
            out = below ? out + v : v;  // a row band above the pair's bottom band adds to it (the same block wrote it)
          }
        }
    }
    group_sync<W, BAR>();  // bnd written by this chunk is read by the next
  }
  ec = group_sum<W, BAR>(ec, red);
  if (PEN) pensum = group_sum<W, BAR>(pensum, red);
  if (MODE != BWD_SEQ) {  // the chunk that finishes last adds up <E, C> of all chunks
    if (L != 0) return;
    atomicAdd(a.ecsum + b, ec);
    if (PEN) atomicAdd(a.pensum + b, pensum);
    if (ROWS && r0 > 0) return;  // a row band: the last launch, at row 0, adds up (its done counters are its own)
    __threadfence();
    if (atomicAdd(a.done + b, 1) != nch_b - 1) return;
    __threadfence();
    ec = atomicAdd(a.ecsum + b, 0.0);  // read through L2
    if (PEN) pensum = atomicAdd(a.pensum + b, 0.0);
  }
  if (XY) ec /= double(scale);  // back to natural units
  if (L == 0) {
    if constexpr (PEN) {
      // value = <E, C> + p dv/dp + gamma dv/dgamma (soft-DTW is homogeneous of degree 1 in (C, p, gamma)).
      const double dp = pensum * double(Link<T>::UNIT), p = double(a.pen[size_t(b) * a.pen_stride]);
      const double dg = HARD ? 0.0 : double(g) * (double(a.value[b]) - ec - p * dp) / double(gamma);
      a.dgamma[b] = T(dg);
      a.dpen[b] = T(double(g) * dp);
    } else {
      const double dg = HARD ? 0.0 : double(g) * (double(a.value[b]) - ec) / double(gamma);
      a.dgamma[b] = T(dg);
    }
  }
}

// Grid as the forward: W == 1: ceil(B / 4) blocks of 4 warps; W > 1: B blocks of W warps.
// Register cap (float, small D): 16 warps per SM keep enough loads of the links in flight.
// VAR: alignment variants (common.cuh, Variant): pen, endbuf (the forward's endr (B, M) and endv (B, 2)) and dpen
// are read or written only by their instantiations.
template <typename T, int COST, int DT, int K, int W, bool WINDOW, int VAR = 0>
__global__ void __launch_bounds__(W == 1 ? 128 : 32 * W, (W == 1 && sizeof(T) == 4 && DT == 1) ? 4 : 1)
backward_kernel(const T* __restrict__ x, const T* __restrict__ y, const T* C, const T* __restrict__ gamma,
                const long long* __restrict__ xlen, const long long* __restrict__ ylen,
                const int* __restrict__ window, const T* __restrict__ grad,
                const typename Link<T>::Word* __restrict__ saved,
                T* __restrict__ dx, T* __restrict__ dy, T* dC, const T* __restrict__ value,
                T* __restrict__ dgamma, T* __restrict__ bnd, int B, int N, int M, int nch,
                const T* __restrict__ pen, int pen_stride, const double* __restrict__ endbuf, T* __restrict__ dpen) {
  using Word = typename Link<T>::Word;
  constexpr int THREADS = W == 1 ? 128 : 32 * W;
  constexpr int STAGE = THREADS * K * int(sizeof(Word) + (fused_cost<COST>() ? 0 : sizeof(T)));
  constexpr int P = ring_depth(STAGE);
  static_assert(P * STAGE <= 40960, "ring too large: the planner limits K for this W (launch.k_max)");
  __shared__ T hand[2][W][Carry<COST, DT>::NB];
  __shared__ double red[W];
  __shared__ __align__(16) Word wring[P * THREADS * K];
  __shared__ __align__(16) T cring[fused_cost<COST>() ? 1 : P * THREADS * K];
  const int b = (W == 1) ? int(blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5)) : int(blockIdx.x);
  if (b >= B) return;
  const BackwardArgs<T> a{x, y, C, xlen, ylen, window, grad, saved, dx, dy, dC, value, dgamma, bnd,
                          nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, N, M, nch, N, 0, 0, N, nullptr,
                          pen, pen_stride, endbuf, endbuf + size_t(B) * M, dpen, nullptr};
  const T g = *gamma;  // scales as in the forward (inputs pre-scaled for fused costs)
  if (g == T(0)) {
    backward_pair<T, COST, DT, K, W, WINDOW, true, P, BWD_SEQ, 0, VAR>(a, b, T(1), g, T(1), hand, red, wring, cring);
  } else {
    const T scale = T(1) / (g * T(LN2));
    const T xs = COST == COST_SQEUCLIDEAN ? sqrt(scale) : scale;
    backward_pair<T, COST, DT, K, W, WINDOW, false, P, BWD_SEQ, 0, VAR>(a, b, scale, g, xs, hand, red, wring, cring);
  }
}

// The recompute group of the checkpointed backward: tiles from the bottom up, each into buffer r & 1 once
// the backward group has handed that buffer back (it held tile r + 2), then "tile r ready". A table (precomputed or
// COST_GRAM's x·yᵀ) streams through fring, a cp.async ring of PR stages (PR = 0: plain loads).
template <typename T, int COST, int DT, int K, int W, bool WINDOW, bool HARD, int PR, int VAR = 0,
          bool SPLIT_LINKS = false>
__device__ __forceinline__ void recompute_tiles(const ForwardArgs<T>& fa, const int b, const int c, const T scale,
                                                const T xs, T (*fhand)[W], T* fring, typename Link<T>::Word* tile) {
  constexpr int CW = 32 * W * K;
  const int n = int(fa.xlen[b]), m = int(fa.ylen[b]);
  const int nch_b = (m + CW - 1) / CW;
  const Tiles tiles(c, nch_b, fa.stagger, fa.TH);
  // The rows of the pass (backward_pair): [0, n), or a row band's [crow0, min(n, crow0 + crows)), whose top is
  // a tile boundary.
  constexpr bool ROWS = !fused_cost<COST>();
  const int r0 = ROWS ? fa.crow0 : 0, r1 = ROWS ? min(n, fa.crow0 + fa.crows) : n;
  const int bottom = tiles.of(r1 - 1);
  for (int r = bottom; r >= (ROWS ? tiles.of(r0) : 0); --r) {  // (none for a pair that ends above the band)
    if (r <= bottom - 2) bar_wait(BAR_FREE + (r & 1), 64 * W);
    forward_pair<T, COST, DT, K, W, WINDOW, true, HARD, PR, MODE_RECOMP, BAR_RECOMP, false, false, VAR, SPLIT_LINKS>(
        fa, b, scale, T(1), xs, fhand, fring, c, tiles.first(r), min(r1, tiles.first(r + 1)),
        tile + size_t(r & 1) * fa.TH * CW, r);
    __threadfence_block();  // the tile's stores before the backward group's reads (the barrier orders them too)
    bar_arrive(BAR_READY + (r & 1), 64 * W);
  }
}

// Chained layout: B * nch blocks, one per (pair, chunk), chunks taken right to left from a ticket in the
// order blocks start (see forward_chain_kernel): W warps, or with CKPT (memory="checkpoint": saved holds no
// links; fbnd / ckpt are the forward's checkpoints, `tiles` has 2 TH CW links per block) 2 W warps, the
// backward group (warps [0, W)) and the recompute group (warps [W, 2 W)).
// sync: [ticket, flags (B, nch), done (B)], ecsum (B,), zeroed by the caller. Row bands: see below.
// VAR: as backward_kernel; pensum (B,) float64 zeroed by the caller (VAR_PENALTY).
// SPLIT_LINKS: the recompute group's soft-min in two stages (forward_kernel's; CKPT only).
template <typename T, int COST, int DT, int K, int W, bool WINDOW, bool CKPT, int VAR = 0, bool SPLIT_LINKS = false>
__global__ void __launch_bounds__(CKPT ? 64 * W : 32 * W)
backward_chain_kernel(const T* __restrict__ x, const T* __restrict__ y, const T* C, const T* __restrict__ gamma,
                      const long long* __restrict__ xlen, const long long* __restrict__ ylen,
                      const int* __restrict__ window, const T* __restrict__ grad,
                      const typename Link<T>::Word* __restrict__ saved,
                      T* __restrict__ dx, T* __restrict__ dy, T* dC, const T* __restrict__ value,
                      T* __restrict__ dgamma, T* bnd, int* sync, double* ecsum, T* fbnd, T* ckpt,
                      typename Link<T>::Word* tiles, int B, int N, int M, int nch, int TH, int stagger, int r_lo,
                      int r_hi, T* rowb,
                      const T* __restrict__ pen, int pen_stride, const double* endbuf, T* dpen, double* pensum) {
  using Word = typename Link<T>::Word;
  constexpr int THREADS = 32 * W;  // one group
  constexpr int STAGE = THREADS * K * int(sizeof(Word) + (fused_cost<COST>() ? 0 : sizeof(T)));
  constexpr int P = ring_depth(STAGE);
  static_assert(P * STAGE <= 40960, "ring too large: the planner limits K for this W (launch.k_max)");
  __shared__ T hand[2][W][Carry<COST, DT>::NB];
  __shared__ T fhand[3][W];  // the recompute group's warp hand-over (forward_pair)
  // CKPT, a table: the recompute group's own C ring, in what the backward's rings leave of 44 KB (static shared
  // memory stops at 48 KB a block). With plain loads the recompute's step waited on each row's load from DRAM, and
  // the sweep on the recompute (benchmarks/OPTIMIZATION_LOG.md, "The checkpoint's recompute through a ring").
  // Fewer than two stages would fit: plain loads (PR = 0).
  constexpr int RSTAGE = CKPT && !fused_cost<COST>() ? THREADS * K * int(sizeof(T)) : 0;
  constexpr int RFIT = RSTAGE > 0 ? (45056 - P * STAGE) / RSTAGE : 0;
  constexpr int PR = RFIT >= 8 ? 8 : (RFIT >= 2 ? RFIT : 0);
  __shared__ __align__(16) T fring[PR > 0 ? PR * THREADS * K : 1];
  __shared__ double red[W];
  __shared__ __align__(16) Word wring[P * THREADS * K];
  __shared__ __align__(16) T cring[fused_cost<COST>() ? 1 : P * THREADS * K];
  __shared__ int ticket;
  if (threadIdx.x == 0) ticket = atomicAdd(sync, 1);
  __syncthreads();
  const int b = ticket / nch, c = nch - 1 - ticket % nch;
  if (b >= B) return;
  // Tile buffers for the blocks of one launch: (B, nch) of them.
  Word* tile = CKPT ? tiles + (size_t(b) * nch + c) * 2 * size_t(TH) * (THREADS * K) : nullptr;
  // Rows of this launch: the whole pair, or (CKPT) a band of rows [r_lo, r_hi), bands launched bottom up, each with
  // its own sync [ticket, flags, done] (zeroed); ecsum (and pensum) summed over them.
  constexpr bool ROWS = CKPT && !fused_cost<COST>();
  const int r0 = ROWS ? r_lo : 0, rows = ROWS ? min(r_hi, N) - r0 : N;
  const BackwardArgs<T> a{x, y, C, xlen, ylen, window, grad, saved, dx, dy, dC, value, dgamma, bnd,
                          sync + 1, fbnd, ckpt, tile, ecsum, sync + 1 + B * nch, N, M, nch, TH, stagger, r0, rows,
                          rowb, pen, pen_stride, endbuf, endbuf + size_t(B) * M, dpen, pensum};
  constexpr int MODE = CKPT ? BWD_CKPT : BWD_CHAIN;
  constexpr int BAR = CKPT ? BAR_BWD : 0;
  const T g = *gamma;
  const T scale = g == T(0) ? T(1) : T(1) / (g * T(LN2));
  const T xs = g == T(0) ? T(1) : (COST == COST_SQEUCLIDEAN ? sqrt(scale) : scale);
  if (CKPT && threadIdx.x >= THREADS) {  // the recompute group
    if (c * THREADS * K >= int(ylen[b])) return;  // no chunk of this pair here: the backward group only zeroes
    const ForwardArgs<T> fa{x, y, C, xlen, ylen, window, nullptr, nullptr, fbnd, nullptr, ckpt, N, M, nch, TH, stagger,
                            r0, rows, pen, pen_stride};
    if (g == T(0)) {
      recompute_tiles<T, COST, DT, K, W, WINDOW, true, PR, VAR, SPLIT_LINKS>(fa, b, c, scale, xs, fhand, fring,
                                                                             tile);
    } else {
      recompute_tiles<T, COST, DT, K, W, WINDOW, false, PR, VAR, SPLIT_LINKS>(fa, b, c, scale, xs, fhand, fring,
                                                                             tile);
    }
    return;
  }
  if (g == T(0)) {
    backward_pair<T, COST, DT, K, W, WINDOW, true, P, MODE, BAR, VAR>(a, b, scale, g, xs, hand, red, wring, cring, c);
  } else {
    backward_pair<T, COST, DT, K, W, WINDOW, false, P, MODE, BAR, VAR>(a, b, scale, g, xs, hand, red, wring, cring,
                                                                        c);
  }
}

}  // namespace sdtw
