// Soft-DTW forward: R[i, j] = cost(i, j) + smin(R[i-1, j-1], R[i-1, j], R[i, j-1]) for a batch of pairs.
//
// One group of NL = 32 * W lanes per pair (see common.cuh for the skewed layout). Costs are either
// computed in the kernel from x `(B, N, DT)` and y `(B, M, DT)` (COST_SQEUCLIDEAN, COST_L1; y's K
// columns of a lane sit in registers) or read from C `(B, N, M)`.
//
// Nothing on a step's critical path waits for DRAM:
//   * per-row inputs (x row, window bounds, the previous chunk's boundary value) are loaded by each warp
//     32 rows at a time, one block ahead, and handed to lane 0 by a shuffle; the row then moves one lane
//     per step with the DP's own wavefront (__shfl_up_sync);
//   * per-cell inputs (precomputed C) stream through a cp.async ring, P - 1 steps ahead.
//
// STORE: one word per cell for the backward (Link<T> in common.cuh: packed normalised weights for float,
// S for double) is written step-major, saved[b][c][t mod N][layout(L, k)], so that each step of a warp
// writes contiguous memory and the backward reads the same rows in reverse (research/gpu-kernels.md,
// lesson 1).
#pragma once
#include "common.cuh"

namespace sdtw {

template <typename T>
struct ForwardArgs {
  const T* x;               // (B, N, DT), fused costs
  const T* y;               // (B, M, DT), fused costs
  const T* C;               // (B, N, M) cost table (COST_GRAM: x·yᵀ), or (B, crows, M): rows [crow0, crow0 + crows)
  const long long* xlen;    // (B,)
  const long long* ylen;    // (B,)
  const int* window;        // (B, N, 2) column ranges [lo, hi), or unused
  T* value;                 // (B,)
  typename Link<T>::Word* saved;  // (B, nch, N, CW) step-major links, or unused
  T* bnd;                   // SEQ: (B, N), R of the previous chunk's last column; CHAIN / RECOMP: (B, nch, N),
                            // R of every chunk's last column (also the column checkpoint of memory="checkpoint");
                            // with frames (value, frame) pairs: (B, N, 2) / (B, nch, N, 2)
  int* flags;               // CHAIN: (B, nch) rows of bnd published by each chunk (release / acquire)
  T* ckpt;                  // CHAIN with checkpoint: (B, ckpt_rows(N, TH), nch, CW (+ NL frames)), row checkpoints
                            // (tile_shift)
  int N, M, nch, TH;
  int stagger;              // rows between the tile boundaries of neighbouring chunks (tile_shift)
  int crow0, crows;         // C's first row and rows per pair: (0, N) for the whole table; a band of rows
                            // [crow0, crow0 + crows) (the row bands of a large-D checkpoint) holds only those
  // Alignment variants (VAR, common.cuh); unused (null) in the plain DP.
  const T* pen;             // VAR_PENALTY: the step penalty of pair b at pen[b * pen_stride] (natural units)
  int pen_stride;           // 0: one penalty for all pairs, 1: one per pair
  double* endr;             // VAR_OPEN_END: (B, M) R of each pair's last row, log2 units (hard: natural)
  double* endv;             // VAR_OPEN_END: (B, 2) (value in log2 units, first argmin column)
  double* endp;             // VAR_OPEN_END, CHAIN: (B, nch, 2) per-chunk EndAcc partials
  int* done;                // VAR_OPEN_END, CHAIN: (B,) chunks that have published their partial (zeroed)
};

// memory="checkpoint" cuts each chunk's rows into tiles of TH rows: tile r of chunk c is rows
// [max(0, r TH - s), min(n, (r + 1) TH - s)) with s = tile_shift(c, ...), and the forward keeps R of the row
// above each tile but the first (ckpt[b][r]). The shift staggers the tile boundaries of neighbouring
// chunks by `stagger` rows (launch.tile_stagger), about the backward chain's lag, so that the chunks pause
// to recompute a tile at about the same moment. Unstaggered, each chunk's pause held up the chunk on its
// left once more, adding up to nch (TH + 32 W) steps to the pass (benchmarks/OPTIMIZATION_LOG.md).
__device__ __forceinline__ int tile_shift(int c, int nch_b, int stagger, int TH) {
  const int offset = int((long long)(nch_b - 1 - c) * stagger % TH);
  return (TH - offset) % TH;
}
// The tiles of one chunk: the forward's checkpoint rows, the recompute group and the backward's prefetch
// all take the geometry from here.
struct Tiles {
  int TH, shift;
  __device__ __forceinline__ Tiles(int c, int nch_b, int stagger, int TH_)
      : TH(TH_), shift(tile_shift(c, nch_b, stagger, TH_)) {}
  __device__ __forceinline__ int of(int row) const { return (row + shift) / TH; }  // the tile holding row
  __device__ __forceinline__ int first(int r) const { return max(0, r * TH - shift); }  // its first row
};
__host__ __device__ constexpr int ckpt_rows(int N, int TH) { return (N + TH - 1) / TH + 1; }

// How forward_pair covers a pair (research/gpu-kernels.md, "few long pairs"):
//   SEQ:    one group walks all column chunks of the pair in turn (many pairs fill the GPU);
//   CHAIN:  one block per (pair, chunk); the chunks of a pair run at the same time on different SMs,
//           chunk c reading the last column of chunk c - 1 through L2 as soon as it is published
//           (32 rows at a time, release / acquire flags), so a pair's critical path shrinks to about
//           N + nch (32 W + 64) steps instead of nch (N + 32 W) steps;
//   RECOMP: one chunk, rows [r0, r1) only, starting from the checkpointed row above and the saved left
//           column, storing links into a tile buffer (the backward of memory="checkpoint").
enum FwdMode { MODE_SEQ = 0, MODE_CHAIN = 1, MODE_RECOMP = 2 };

// Whether a SEQ pass over a pair narrower than its last chunk ends once the last lane holding a column is
// done (forward) and starts there (backward): K <= 4 (short series; the K = 16 throughput backward would
// spill more for a saving of < 32 steps in its hundreds), every cost. A cost table's backward zeroes the
// cells its trimmed lanes skip (backward_pair).
template <int K>
__host__ __device__ constexpr bool trims_pass() { return K <= 4; }
// The lanes a pass over chunk c visits: with TRIM, those holding a column of the pair; else all NL. The
// forward ends its pass after them and the backward starts at the last of them, so both take it from here.
template <bool TRIM, int K>
__device__ __forceinline__ int pass_lanes(int m, int c, int NL) {
  return TRIM ? min(NL, (m - c * NL * K + K - 1) / K) : NL;
}


// Frames (float32 passes whose links matter: storing, checkpointing, recomputing). R grows with the
// path, to 1e5..1e7 in log2 units for large costs at small gamma, and a float32 R is rounded to ulp(|R|):
// every weight of every cell would inherit that error (4e-3 in dy at D = 33, gamma = 0.1). So each lane
// keeps its K values relative to a frame F of its own (R = F + r), and a value handed to another lane is
// moved into the receiver's frame by adding the difference of the two frames, a small number. Every lane
// moves its frame to its last value at the same steps, the start of every 32nd (with the row refill, no
// branch of its own), so between two moves the difference to the right neighbour's frame is a constant
// `dr`: the sender adds it to the value it shuffles (one add per step), renewed by one shuffle per 32
// steps (lane 0 of a later warp adds `dl`, from the frame the last lane of the warp on its left left in
// shared memory; lane 0 of a later chunk takes the frames stored beside the chunk column bnd, converted a
// block of 32 rows at a time). The row checkpoints keep each lane's frame too. The step holds no lane
// predicate through the cells (row tests instead, below): with one more, ptxas ran out of predicates in
// the soft-min and serialised its two ex2 (+26% per chained step, benchmarks/OPTIMIZATION_LOG.md).
// benchmarks/probes/f32_precision_model.py models the precision: dy 4e-3 -> 3e-5 (measured 1e-5). Hard DTW keeps
// F = 0 (same layout, exact ties as before; it still writes and reads its zero frames: gating those on
// REBASE changed ptxas' schedule of the soft checkpointing forward, one serialised ex2,
// benchmarks/probes/sass_check.py); double needs no frames.
template <typename T>
__host__ __device__ constexpr bool has_frames(bool saves) { return sizeof(T) == 4 && saves; }
// Every float32 chained forward keeps frames, the value-only one too: its value is R at the pair's end, and a
// frameless float32 R loses ulp(|R|) in every cell (2^16 x 2^18 at gamma = 1: value 1.5e-4 off the float64
// one; with frames 9e-9). At K <= 4 frames also make the step faster (0 serialised ex2 instead of 2; 65536^2
// 33.5 -> 30.8 ms); at K = 8 under chain_min_blocks' 56-register cap they fit without spills (the frameless
// build spilled 14). OPTIMIZATION_LOG.md, "Frames in the value-only chained forward" and "Value-only
// precision of long pairs". launch.chain_frames is the host's copy of this rule; the SEQ value-only pass keeps
// frames for long pairs only (forward_pair's LONG, launch.seq_frames).
template <typename T, int MODE>
__host__ __device__ constexpr bool pass_frames(bool saves) {
  return has_frames<T>(saves || MODE == MODE_CHAIN);
}

// The per-row inputs that travel along the lanes with the wavefront.
template <typename T, int DT>
struct FwdRow {
  T x[DT];
  int lo, hi;  // window columns [lo, hi)
  T left;      // R[i, c * CW - 1] from the previous chunk (read by lane 0 of warp 0 only)
  T leftF;     // its frame (frames only; else 0)
};

// SEQ: chunks [0, nch_b), rows [0, n). CHAIN: chunk c0, rows [r0, min(r1, n)): the whole pair (r0 = 0, r1 = N), or
// a band of rows of a large-D checkpoint (CKPT; r0 a tile boundary, the pass starting from the checkpointed row
// above it and the previous chunk's saved column). RECOMP: chunk c0, rows [r0, r1), links
// to `tile` (TH step rows, slot = local step mod TH). CKPT: a CHAIN pass keeping checkpoints (a.ckpt). LONG: a
// SEQ value-only pass that keeps frames all the same (long pairs, forward.cu).
// hand: [3][W], R of each warp's last lane one step ago (double-buffered) and, with frames, its frame.
template <typename T, int COST, int DT, int K, int W, bool WINDOW, bool STORE, bool HARD, int P, int MODE = MODE_SEQ,
          int BAR = 0, bool CKPT = false, bool LONG = false, int VAR = 0, bool SPLIT_LINKS = false>
__device__ __forceinline__ void forward_pair(const ForwardArgs<T>& a, const int b, const T scale,
                                             const T unit, const T xs, T (*hand)[W], T* ring, const int c0 = 0,
                                             const int r0 = 0, int r1 = 0,
                                             typename Link<T>::Word* tile = nullptr, const int tile_index = 0) {
  constexpr int NL = 32 * W;
  constexpr int CW = NL * K;
  constexpr bool FUSED = fused_cost<COST>();
  constexpr bool XY = reads_xy<COST>();
  using Word = typename Link<T>::Word;
  // the layout of bnd and ckpt; LONG: a SEQ value-only pass of a long pair (forward.cu, forward_kernel)
  constexpr bool FR = pass_frames<T, MODE>(STORE || CKPT || MODE == MODE_RECOMP || LONG);
  constexpr bool REBASE = FR && !HARD;                                     // frames that move
  constexpr int BS = FR ? 2 : 1;                                           // bnd values per row
  // The value-only and checkpointing chained forwards: at K <= 4 (float) their soft cells take the soft-min in two
  // stages (common.cuh, soft_open2 / soft_close2: a 5-instruction chain along the row and 3 MUFU operations a cell).
  // H200, against the closed two-stage form (4 MUFU, a chain of 6): value-only 16 x 8192² one-ended 2.91 -> 2.43 ms,
  // 65536² 21.6 -> 17.5; checkpointing forward 65536² 24.2 -> 21.9. Not at K = 8 (the closed form was +50 % at
  // B = 16 N = 65536 under a 64-register cap; 72 registers without); the many-pair SEQ kernels are MUFU- and
  // issue-bound and keep soft_min3 (OPTIMIZATION_LOG.md, "Two-stage soft-min in the value-only chained forward" and
  // "The diag-up stage left open").
  constexpr bool SPLIT_PASS = MODE == MODE_CHAIN && !STORE && sizeof(T) == 4 && K <= 4;
  constexpr bool SPLIT = SPLIT_PASS && !HARD;
  constexpr bool OB = (VAR & VAR_OPEN_BEGIN) != 0, OE = (VAR & VAR_OPEN_END) != 0, PEN = (VAR & VAR_PENALTY) != 0;
  // SPLIT_STORE (SPLIT_LINKS, the launch's choice: launch.split_links): the storing soft-min in two stages too
  // (common.cuh, Link<float>::soft_open / soft_close), the first left open: soft()'s 2 ex2, 1 lg2 and 1 rcp a cell on
  // a serial chain of 5 instructions instead of ~11, a gain in latency- and MUFU-bound batches alike. Without a band
  // only (one measured, with the earlier closed first stage: +5 %).
  constexpr bool SPLIT_STORE = SPLIT_LINKS && STORE && !HARD && sizeof(T) == 4 && !WINDOW;
  // Passes over a band of rows of a table (a cost, or COST_GRAM's x·yᵀ: the row bands of a large-D checkpoint): the
  // checkpointing chained forward and the recompute. The other passes compile as they did without bands (r0 = 0,
  // C whole).
  constexpr bool ROWS = !FUSED && (MODE == MODE_RECOMP || (MODE == MODE_CHAIN && CKPT));
  const int lane = threadIdx.x & 31;
  const unsigned tid = group_tid<W, BAR>(), nthreads = group_threads<W, BAR>();
  const int wg = (W == 1) ? 0 : int(tid >> 5);
  const int L = wg * 32 + lane;
  const T BIG = Num<T>::big();
  const int N = a.N, M = a.M;
  const int n = int(a.xlen[b]), m = int(a.ylen[b]);
  const int nch_b = (m + CW - 1) / CW;
  if (MODE == MODE_SEQ) r1 = n;
  if (MODE == MODE_CHAIN) r1 = ROWS ? min(r1, n) : n;
  const int nr = r1 - r0;  // rows of this pass; a chained pass counts the rows it publishes from r0
  const int smod = MODE == MODE_RECOMP ? a.TH : N;  // step rows in the link store (ring of slots)
  const T* xb = a.x + size_t(b) * N * DT;
  const T* yb = a.y + size_t(b) * M * DT;
  // Column j of row `row` at Cb[crow(row) * M + j]: C holds rows [crow0, crow0 + crows) of each pair. A row the pass
  // does not use is clamped into them (its address stays inside).
  const T* Cb = a.C + size_t(b) * (ROWS ? a.crows : N) * M;
  const int crow_lo = ROWS ? a.crow0 : 0, crow_hi = (ROWS ? min(n, a.crow0 + a.crows) : n) - 1;
  auto crow = [&](const int row) { return size_t(min(max(row, crow_lo), crow_hi) - crow_lo); };
  const int* wb = a.window + size_t(b) * N * 2;
  T* my_ring = ring + size_t(tid) * K;  // stage s at my_ring + s * nthreads * K
  // Variants (common.cuh, Variant): the penalty in the DP's units, and R of the row above row 0 (v0 with an
  // open begin, else the border).
  const T pen = PEN ? a.pen[size_t(b) * a.pen_stride] * scale : T(0);
  const T above = (OB && r0 == 0) ? ((PEN || HARD) ? T(0) : T(1)) : BIG;

  const int c_lo = MODE == MODE_SEQ ? 0 : c0, c_hi = MODE == MODE_SEQ ? nch_b : c0 + 1;
  for (int c = c_lo; c < c_hi; ++c) {
    // The previous chunk's last column (read) and this chunk's (written).
    const T* bnd_in = MODE == MODE_SEQ ? a.bnd + size_t(b) * N * BS : a.bnd + (size_t(b) * a.nch + c - 1) * N * BS;
    T* bnd_out = MODE == MODE_SEQ ? a.bnd + size_t(b) * N * BS : a.bnd + (size_t(b) * a.nch + c) * N * BS;
    const int* flag_in = a.flags + size_t(b) * a.nch + c - 1;  // CHAIN, c > 0
    int* flag_out = a.flags + size_t(b) * a.nch + c;
    const bool waits = MODE == MODE_CHAIN && c > 0 && wg == 0;  // warp 0 reads the previous chunk
    const int j0 = c * CW + L * K;
    // The pass ends when the last lane holding a column of the pair has finished row r1 - 1: lanes past
    // column m - 1 (the last chunk of a narrow pair) hold nothing that matters (a 16-column pair in one
    // warp: 31 steps instead of 47). The backward (BWD_SEQ) starts its pass late by the same count and
    // never reads what those lanes did not store (trims_pass).
    const int steps = (r1 - r0) + pass_lanes<MODE == MODE_SEQ && trims_pass<K>(), K>(m, c, NL) - 1;
    T yv[K][DT];
    if (XY) {
#pragma unroll
      for (int k = 0; k < K; ++k)
#pragma unroll
        for (int d = 0; d < DT; ++d)
          yv[k][d] = (j0 + k < M) ? scaled_input<T, COST>(yb[size_t(j0 + k) * DT + d], xs) : T(0);
    }
    T r[K];  // R - F of this lane's columns on the row it processed last (RECOMP: the checkpointed row r0 - 1)
    T F = T(0);  // the lane's frame
    // Row checkpoint `row` of this chunk: CW values, then (frames) NL frames.
    constexpr int CKS = FR ? CW + NL : CW;
    auto ckpt_row = [&](const int row) { return a.ckpt + ((size_t(b) * ckpt_rows(N, a.TH) + row) * a.nch + c) * CKS; };
    const Tiles tiles(c, nch_b, a.stagger, a.TH);
    // R of the row above r0: RECOMP's tile and a chained band's first row are tile boundaries, checkpointed.
    const T* top = ((MODE == MODE_RECOMP || ROWS) && r0 > 0) ? ckpt_row(MODE == MODE_RECOMP ? tile_index : tiles.of(r0))
                                                             : nullptr;
    // CHAIN with checkpoints: rows until this lane's next checkpointed row (the row above a tile), counted
    // down per row instead of a modulo per row.
    constexpr bool keeps_ckpt = MODE == MODE_CHAIN && CKPT;
    int to_ckpt = keeps_ckpt ? (2 * a.TH - 1 - (ROWS ? (r0 + tiles.shift) % a.TH : tiles.shift)) % a.TH : -1;
    // The count-down is dead without checkpoints (-1 never reaches 0 again), and left out of the step, except
    // in the value-only passes other than SPLIT_PASS: without it ptxas gave the K = 8 one 72 registers instead
    // of 56, and B = 16 N = 65536 (1024 blocks) would no longer run in one wave. The storing forward runs
    // 3-8 % faster without it (OPTIMIZATION_LOG.md, "Two-stage soft-min in the value-only chained forward").
    constexpr bool ckpt_test = keeps_ckpt || (MODE == MODE_CHAIN && !STORE && !SPLIT_PASS);
#pragma unroll
    for (int k = 0; k < K; ++k) r[k] = top ? top[L * K + k] : above;
    if (FR && top) F = top[CW + L];
    // A later chunk starting at row 0 takes R[0, c CW - 1], the chunk column's first row, as every lane's frame
    // rather than 0: frames move only every 32 steps, and a lane whose rows all fall between two moves (any x
    // of fewer than 32 rows against a long y: 24 x 4000 closed-end) kept R itself, |R| ~ 3e4 in log2 units at
    // ulp 4e-3, in every weight (dy 2e-4 relative, benchmarks/probes/short_x_precision.py). Equal frames keep
    // dr = dl = 0 until the first move. Only where links are made (storing forward, recompute): a value needs
    // no more than it has (its rounding stays relative to |R|), and the checkpointing forward's schedule moved
    // (ptxas serialised one more ex2). Not with an open begin (R of row -1 is 0 in every lane's frame).
    if constexpr (REBASE && !OB && (STORE || MODE == MODE_RECOMP)) {
      if (c > 0 && !top) {
        if (MODE == MODE_CHAIN) wait_rows(flag_in, 1);  // every warp, before warp 0's wait for its first block
        const T v0 = __ldcg(bnd_in + size_t(r0) * BS), f0 = __ldcg(bnd_in + size_t(r0) * BS + 1);
        if (v0 < T(1e29)) F = v0 + f0;
      }
    }
    T last = r[K - 1];  // what lane L + 1 reads as its left neighbour
    // Left neighbour received one step ago = diagonal neighbour now; lane 0 of a later chunk starting
    // below row 0 begins with R[r0 - 1, c CW - 1] from the saved column.
    T prevleft = OB ? above : ((L == 0 && c == 0 && r0 == 0) ? T(0) : BIG);
    if ((MODE == MODE_RECOMP || ROWS) && r0 > 0 && c > 0 && L == 0)  // (a chained band: an earlier launch's column)
      prevleft = bnd_in[size_t(r0 - 1) * BS] + (FR ? bnd_in[size_t(r0 - 1) * BS + 1] - F : T(0));
    if (W > 1) {
      if (lane == 31) {
        hand[0][wg] = above; hand[1][wg] = above;
        if (REBASE) hand[2][wg] = F;
      }
      group_sync<W, BAR>();
    }
    Word* sbase = MODE == MODE_RECOMP ? tile : (STORE ? a.saved + (size_t(b) * a.nch + c) * size_t(N) * CW : nullptr);
    // Rows compared per step rather than lane predicates held through the loop (the soft-min needs them):
    // the row whose value this lane writes (R[n-1, m-1], else -1), and the rows below which it hands its
    // last column to the next chunk (all, else none).
    const bool owns_end = (c == nch_b - 1) && (j0 <= m - 1) && (m - 1 < j0 + K);
    const int end_row = (MODE != MODE_RECOMP && owns_end && !OE) ? n - 1 : -1;
    const int bnd_rows = (MODE != MODE_RECOMP && L == NL - 1 && c + 1 < nch_b) ? n : 0;

    // Row stream: lane l of warp wg holds row (32 * floor(t / 32) - 32 * wg + l) in `cur`, the next
    // block in `nxt`; lane 0 of the warp needs row t - 32 * wg at step t.
    // Storing CHAIN (LATE): the previous chunk's column of the next block is read LATE_AT steps into the block
    // rather than at its start, so the chunk waits for 32 - LATE_AT fewer of its neighbour's rows (lag per
    // chunk 32 W + ~40 steps instead of 32 W + ~64). Measured at 65536^2: storing forward -8 %, store backward
    // -6 %; the value-only forward did not move, and the checkpointing forward and backward got 2.5-6 % slower
    // (benchmarks/OPTIMIZATION_LOG.md, "Frame hand-over and late chain loads"), so they keep the early load; but
    // a row band's pass (ROWS) is short, and each chunk's lag is paid again in every band (OPTIMIZATION_LOG.md,
    // "Row bands for the large-D checkpoint"). The value-only pass with an open end (the two-ended halves,
    // two_ended.cu) reads late too: H200, 16 x 8192² from both ends 2.21 -> 2.05 ms, 65536² 14.5 -> 13.0; the
    // closed one got slower with it (2.43 -> 2.70 ms; ptxas' step loop 119 -> 125 instructions, the open one's
    // 118 -> 103), so it keeps the early load (OPTIMIZATION_LOG.md, "The diag-up stage left open").
    constexpr bool LATE = MODE == MODE_CHAIN && (STORE || ROWS || (SPLIT_PASS && !CKPT && OE));
    constexpr int LATE_AT = CHAIN_LATE_AT;
    auto load_row = [&](const int row, FwdRow<T, DT>& q, const bool inputs, const bool left) {
      const bool ok = row >= 0 && row < n;
      if (inputs) {
#pragma unroll
        for (int d = 0; d < DT; ++d) q.x[d] = (XY && ok) ? scaled_input<T, COST>(xb[size_t(row) * DT + d], xs) : T(0);
        q.lo = (WINDOW && ok) ? wb[2 * row] : 0;
        q.hi = (WINDOW && ok) ? wb[2 * row + 1] : 0;
      }
      if (left) {
        // (A row band reads only its own rows of the column: those below it are not written yet.)
        const bool in = ROWS ? unsigned(row - r0) < unsigned(nr) : ok;
        q.left = (c > 0 && wg == 0 && in) ? __ldcg(bnd_in + size_t(row) * BS) : BIG;
        q.leftF = (REBASE && c > 0 && wg == 0 && in) ? __ldcg(bnd_in + size_t(row) * BS + 1) : T(0);
      }
    };
    FwdRow<T, DT> cur, nxt, mine;  // mine: the row this lane works on now
    if (waits) wait_rows(flag_in, min(nr, LATE ? 32 : 64));
    load_row(r0 - 32 * wg + lane, cur, true, true);
    load_row(r0 + 32 - 32 * wg + lane, nxt, true, !LATE);
    // Frames, constant until they move again: dr, this lane's frame minus the right neighbour's (its last
    // value travels in the neighbour's frame), and for lane 0 of a later warp dl, the frame the warp on
    // its left left in hand[2] minus its own; the chunk column's rows of the next 32 steps (lane 0 of
    // warp 0) go into lane 0's frame now.
    T dr = T(0), dl = T(0);
    auto renew_frames = [&]() {
      dr = F - __shfl_down_sync(FULL_MASK, F, 1);
      dl = (W > 1 && wg > 0) ? hand[2][wg - 1] - F : T(0);
      const T f0 = __shfl_sync(FULL_MASK, F, 0);
      if (c > 0 && wg == 0) cur.left += cur.leftF - f0;
    };
    if (REBASE) renew_frames();
#pragma unroll
    for (int d = 0; d < DT; ++d) mine.x[d] = T(0);
    mine.lo = mine.hi = 0;

    // C ring (precomputed cost): step t's K values of row t - L, issued P - 1 steps ahead. (Stage t % P:
    // counting the stages instead took fewer instructions but made the gram forward 2-3 % slower, and the
    // store backward 10-15 %, benchmarks/OPTIMIZATION_LOG.md "Leaner steps".)
    const bool cgroups = !FUSED && table_groups<T, K>(a.C, M);  // 16-byte copies (common.cuh)
    auto issue_c = [&](const int t) {
      if constexpr (!FUSED && P > 0) {
        const int row = r0 + t - L;
        const bool ok = ROWS ? unsigned(row - r0) < unsigned(nr) : row >= 0 && row < n;
        T* dst = my_ring + size_t(t % P) * nthreads * K;
        cp_async_table_row<T, K>(dst, Cb + crow(row) * M + j0, ok, j0, M, cgroups);
        cp_async_commit();
      }
    };
    if (!FUSED && P > 0)
      for (int t = 0; t < P - 1; ++t) issue_c(t);

    // Step bookkeeping kept to a few instructions (a latency-bound step pays ~4 cycles for each,
    // benchmarks/OPTIMIZATION_LOG.md "Leaner steps"): the steps run in blocks of 32 (the row refill once
    // per block, the row stream's source lane the block's step index), the link store goes to the lane's
    // own base plus slot * CW (slot = t mod smod), and the hand-over slots of W > 1 alternate by an offset.
    Word* const slane = STORE ? sbase + StepLayout<K>::offset(L, 0, NL) : nullptr;  // RECOMP stores too
    int slot = 0;
    T* const hflat = &hand[0][0];  // hand[h][w] = hflat[h * W + w]
    int hrd = W, hwr = 0;          // offsets of the slots read ((t + 1) & 1) and written (t & 1)
    for (int tb = 0; tb < steps; tb += 32) {
      if (tb > 0) {
        // The rows this chunk's last lane has finished (those of steps < tb); the release orders its bnd
        // stores before the count (common.cuh, publish_rows).
        publish_rows(MODE == MODE_CHAIN && bnd_rows > 0, flag_out, tb, NL, nr);
        cur = nxt;
        if (!LATE && waits) wait_rows(flag_in, min(nr, tb + 64));
        load_row(r0 + tb + 32 - 32 * wg + lane, nxt, true, !LATE);
        if (REBASE) {
          // Every lane moves its frame to its last value (the row above), once that is reachable.
          if (last < T(1e29)) {
            const T Fn = F + last, dd = Fn - F;
            F = Fn;
#pragma unroll
            for (int k = 0; k < K; ++k) r[k] -= dd;
            prevleft -= dd;
            last = r[K - 1];
          }
          if (W > 1) {
            // Lane 31 hands the warp on its right its last value again, now in its new frame, and that
            // frame; the warp on the right reads both after this barrier (the value at its next step).
            // Here, once per 32 steps, rather than at the block's last step: there, the per-step test and
            // the frame slot's address (rebuilt every step) made the checkpointing forward 27 % slower
            // (65536^2: 40.0 against 31.6 ms; OPTIMIZATION_LOG.md, "Frame hand-over and late chain loads").
            if (lane == 31) {
              hflat[wg + hrd] = last;
              hand[2][wg] = F;
            }
            group_sync<W, BAR>();
          }
          renew_frames();
        }
      }
      // Steps [0, LATE_AT) and [LATE_AT, 32) of the block as two passes of one loop body (LATE; a test per
      // step cost more than the lag saves, and a second copy of the body serialised the storing soft-min).
#pragma unroll 1
      for (int seg = 0; seg < (LATE ? 2 : 1); ++seg) {
        if (LATE && seg == 1 && tb + 32 < steps) {
          if (waits) wait_rows(flag_in, min(nr, tb + 64));
          load_row(r0 + tb + 32 - 32 * wg + lane, nxt, false, true);
        }
        const int s0 = LATE && seg == 1 ? LATE_AT : 0;
        const int sn = min(LATE && seg == 0 ? LATE_AT : 32, steps - tb);
        for (int src = s0; src < sn; ++src) {  // step t = tb + src; lane 0 takes row t from lane src
          const int t = tb + src;
          const int i = r0 + t - L;
          const bool live = unsigned(t - L) < unsigned(r1 - r0);
          // Move the row inputs one lane along; lane 0 takes the next row from the warp's block.
#pragma unroll
          for (int d = 0; d < DT; ++d) {
            const T in = __shfl_sync(FULL_MASK, cur.x[d], src);
            const T up = __shfl_up_sync(FULL_MASK, mine.x[d], 1);
            mine.x[d] = (lane == 0) ? in : up;
          }
          if (WINDOW) {
            const int lin = __shfl_sync(FULL_MASK, cur.lo, src), hin = __shfl_sync(FULL_MASK, cur.hi, src);
            const int lup = __shfl_up_sync(FULL_MASK, mine.lo, 1), hup = __shfl_up_sync(FULL_MASK, mine.hi, 1);
            mine.lo = (lane == 0) ? lin : lup;
            mine.hi = (lane == 0) ? hin : hup;
          }
          // BIG except in lane 0 of warp 0 of a later chunk (load_row): a shuffle for every warp costs less
          // than a branch, and keeps a predicate free for the soft-min (SASS: its two ex2 back to back).
          const T chunk_left = __shfl_sync(FULL_MASK, cur.left, src);
          // With frames the sender adds dr, off the receiver's path (an unreachable BIG stays unreachable).
          T leftin = __shfl_up_sync(FULL_MASK, REBASE ? last + dr : last, 1);
          // Lane 0 takes its left neighbour from lane 31 of the warp on the left (one step ago, through shared
          // memory; every lane reads the broadcast and selects, no divergent branch), from the previous
          // chunk's last column (already in lane 0's frame), or the border.
          T in0 = chunk_left;
          if (W > 1 && wg > 0) in0 = hflat[wg - 1 + hrd] + (REBASE ? dl : T(0));  // warp-uniform
          if (lane == 0) leftin = in0;
          T diag = prevleft;  // lane 0 of chunk 0: 0 (R[-1, -1]) before row 0, then the border's BIG
          prevleft = leftin;
          T cr[K];
          if constexpr (!FUSED && P > 0) {
            issue_c(t + P - 1);
            cp_async_wait<P - 1>();
            const T* src_c = my_ring + size_t(t % P) * nthreads * K;
#pragma unroll
            for (int k = 0; k < K; ++k) cr[k] = src_c[k];
          } else if constexpr (!FUSED) {  // RECOMP of a table with no room for a ring (backward.cu, PR = 0): plain loads
            load_table_row<T, K>(cr, Cb + crow(i) * M + j0, live, j0, M, cgroups);
          }
          if (live) {
            T left = leftin;
            Word sv[K];
            // Penalty: added to the vertical predecessor (+inf on row 0 with an open begin) and the horizontal one.
            const T uadd = (OB && i == 0) ? BIG : pen;
            // SPLIT, SPLIT_STORE: the diag-up half of every cell's soft-min first (with the weight of up in it when
            // storing); only the left half stays serial.
            T u[K], us[K];  // SPLIT: the open diag-up stage (common.cuh, soft_open2); SPLIT_STORE: u and up's weight
            float wu[K];
            if constexpr (SPLIT || SPLIT_STORE) {
              T dg = diag;
#pragma unroll
              for (int k = 0; k < K; ++k) {
                const T pu = PEN ? r[k] + uadd : r[k];
                if constexpr (SPLIT_STORE) {
                  Link<float>::soft_open(dg, pu, u[k], us[k], wu[k]);
                } else {
                  soft_open2(dg, pu, u[k], us[k]);
                }
                dg = r[k];
              }
            }
#pragma unroll
            for (int k = 0; k < K; ++k) {
              T cst;  // in log2 units: x and y came pre-scaled, C is scaled here
              if (COST == COST_GRAM) {
                cst = gram_cost(cr[k], mine.x[0], yv[k][0], scale);
              } else if (!FUSED) {
                cst = cr[k] * scale;
              } else {
                cst = T(0);
#pragma unroll
                for (int d = 0; d < DT; ++d) cst += cost_term<T, COST>(mine.x[d] - yv[k][d]);
              }
              const T up = r[k];
              Word w = Word(0);
              T v;
              if constexpr (PEN) {
                const T pu = up + uadd, pl = left + pen;
                if (HARD) {
                  int choice;
                  v = hard_min3(diag, pu, pl, choice) + cst;
                  w = Link<T>::hard(choice);
                } else if constexpr (SPLIT_STORE) {
                  v = Link<float>::soft_close(u[k], us[k], wu[k], pl, cst, w);
                } else if (STORE) {
                  v = Link<T>::soft(diag, pu, pl, w) + cst;
                } else if constexpr (SPLIT) {
                  v = soft_close2(u[k], us[k], pl, cst);
                } else {
                  v = Link<T>::value(diag, pu, pl) + cst;
                }
              } else if (HARD) {
                int choice;
                v = hard_min3(diag, up, left, choice) + cst;
                w = Link<T>::hard(choice);
              } else if constexpr (SPLIT_STORE) {
                v = Link<float>::soft_close(u[k], us[k], wu[k], left, cst, w);
              } else if (STORE) {
                v = Link<T>::soft(diag, up, left, w) + cst;
              } else if constexpr (SPLIT) {
                v = soft_close2(u[k], us[k], left, cst);
              } else {
                v = Link<T>::value(diag, up, left) + cst;
              }
              if (WINDOW) {
                const int j = j0 + k;
                if (j < mine.lo || j >= mine.hi) v = BIG;  // outside the band: unreachable
              }
              sv[k] = w;
              diag = up;
              left = v;
              r[k] = v;
            }
            last = r[K - 1];
            if (STORE) store_lane_step<Word, K, NL>(slane + size_t(unsigned(slot)) * CW, sv);
            if (i < bnd_rows) {
              bnd_out[size_t(i) * BS] = last;
              if (FR) bnd_out[size_t(i) * BS + 1] = F;
            }
            if (ckpt_test && to_ckpt-- == 0) {  // row i + 1 starts tile tiles.of(i + 1)
              to_ckpt = a.TH - 1;
              if (i + 1 < n) {
                T* q = ckpt_row(tiles.of(i + 1));
#pragma unroll
                for (int k = 0; k < K; ++k) q[L * K + k] = r[k];
                if (FR) q[CW + L] = F;
              }
            }
            if (i == end_row) {
#pragma unroll
              for (int k = 0; k < K; ++k)
                if (j0 + k == m - 1) a.value[b] = (F + r[k]) * unit;
            }
          }
          if (++slot == smod) slot = 0;
          if (W > 1) {
            if (lane == 31) hflat[wg + hwr] = last;
            hrd = W - hrd;
            hwr = W - hwr;
            group_sync<W, BAR>();
          }
        }
      }
    }
    if (MODE == MODE_CHAIN && bnd_rows > 0) st_release(flag_out, nr);  // the rows since the last block
    if constexpr (OE && MODE != MODE_RECOMP) {
      // The last row, for the end's soft-min and the backward: after the pass every lane holds R[n - 1, j] of its
      // columns (F + r; later frame moves shift F and r by the same exact difference), so nothing in the step
      // tests for the row (a test and K stores in the step cost the K = 16, W = 8 long pair 4 % of its forward).
      // A band of rows above the last has none of it.
      if (r1 == n) {
#pragma unroll
        for (int k = 0; k < K; ++k)
          if (j0 + k < m) a.endr[size_t(b) * M + j0 + k] = double(F) + double(r[k]);
      }
    }
    if (!FUSED && P > 0) cp_async_wait<0>();
    group_sync<W, BAR>();  // bnd written by this chunk is read by the next
  }
  if constexpr (OE && MODE != MODE_RECOMP) {
    // Open end: the soft-min of the last row. Each lane folds the columns it wrote (its own stores: no barrier),
    // then the group; SEQ has every chunk of the pair, CHAIN publishes its chunk's partial, and the pair's last
    // chunk to finish folds them all (in the band of rows holding the last row).
    if (r1 < n) return;  // group-uniform
    using Acc = EndAcc<T, HARD>;
    Acc acc;
    const double* er = a.endr + size_t(b) * M;
    for (int c = c_lo; c < c_hi; ++c)
#pragma unroll
      for (int k = 0; k < K; ++k) {
        const int j = c * CW + L * K + k;
        if (j < m) acc.add(er[j], j);
      }
    acc.warp_merge();
    if constexpr (W > 1) {
      __shared__ double scratch[2 * W];
      group_sync<W, BAR>();
      if (lane == 0) { scratch[2 * wg] = acc.m; scratch[2 * wg + 1] = double(acc.s); }
      group_sync<W, BAR>();
      acc = Acc();  // every warp's total, this one's included, from the scratch
      for (int w = 0; w < W; ++w) acc.merge(scratch[2 * w], typename Acc::S(scratch[2 * w + 1]));
    }
    bool fold = MODE == MODE_SEQ;
    if (MODE == MODE_CHAIN && wg == 0) {
      int last = 0;
      if (lane == 0) {
        double* part = a.endp + (size_t(b) * a.nch + c0) * 2;
        part[0] = acc.m;
        part[1] = double(acc.s);
        __threadfence();
        last = atomicAdd(a.done + b, 1) == nch_b - 1;
      }
      fold = __shfl_sync(FULL_MASK, last, 0) != 0;
      if (fold) {  // warp 0 of the pair's last chunk
        __threadfence();
        Acc all;
        const double* part = a.endp + size_t(b) * a.nch * 2;
        for (int q = lane; q < nch_b; q += 32) all.merge(__ldcg(part + 2 * q), typename Acc::S(__ldcg(part + 2 * q + 1)));
        all.warp_merge();
        acc = all;
      }
    }
    if (fold && L == 0) {
      const double v = acc.value();
      a.endv[2 * b] = v;
      a.endv[2 * b + 1] = double(acc.s);
      a.value[b] = T(v * double(unit));
    }
  }
}

}  // namespace sdtw
