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
  const T* C;               // (B, N, ldc), precomputed cost of columns [cbase, cbase + ldc) (a band of the full C)
  const long long* xlen;    // (B,)
  const long long* ylen;    // (B,)
  const int* window;        // (B, N, 2) column ranges [lo, hi), or unused
  T* value;                 // (B,)
  typename Link<T>::Word* saved;  // (B, nch, N, CW) step-major links, or unused
  T* bnd;                   // SEQ: (B, N), R of the previous chunk's last column; CHAIN / RECOMP: (B, nch, N),
                            // R of every chunk's last column (also the column checkpoint of memory="checkpoint")
  int* flags;               // CHAIN: (B, nch) rows of bnd published by each chunk (release / acquire)
  T* ckpt;                  // CHAIN with checkpoint: (B, ckpt_rows(N, TH), nch * CW), row checkpoints (tile_shift)
  int N, M, nch, TH;
  int stagger;              // rows between the tile boundaries of neighbouring chunks (tile_shift)
  int ldc, cbase;           // C's row stride and first column: (M, 0) for the whole table
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
  __device__ __forceinline__ Tiles(int c, int nch_b, int stagger, int TH_) : TH(TH_), shift(tile_shift(c, nch_b, stagger, TH_)) {}
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
// done (forward) and starts there (backward): fused costs, and K <= 4 (short series; the K = 16
// throughput backward would spill more for a saving of < 32 steps in its hundreds).
template <bool FUSED, int K>
__host__ __device__ constexpr bool trims_pass() { return FUSED && K <= 4; }
// The lanes a pass over chunk c visits: with TRIM, those holding a column of the pair; else all NL. The
// forward ends its pass after them and the backward starts at the last of them, so both take it from here.
template <bool TRIM, int K>
__device__ __forceinline__ int pass_lanes(int m, int c, int NL) {
  return TRIM ? min(NL, (m - c * NL * K + K - 1) / K) : NL;
}


// The per-row inputs that travel along the lanes with the wavefront.
template <typename T, int DT>
struct FwdRow {
  T x[DT];
  int lo, hi;  // window columns [lo, hi)
  T left;      // R[i, c * CW - 1] from the previous chunk (read by lane 0 of warp 0 only)
};

// SEQ: chunks [0, nch_b), rows [0, n). CHAIN: chunk c0, rows [0, n). RECOMP: chunk c0, rows [r0, r1), links
// to `tile` (TH step rows, slot = local step mod TH).
template <typename T, int COST, int DT, int K, int W, bool WINDOW, bool STORE, bool HARD, int P, int MODE = MODE_SEQ,
          int BAR = 0>
__device__ __forceinline__ void forward_pair(const ForwardArgs<T>& a, const int b, const T scale,
                                             const T unit, const T xs, T (*hand)[W], T* ring, const int c0 = 0,
                                             const int r0 = 0, int r1 = 0,
                                             typename Link<T>::Word* tile = nullptr, const int tile_index = 0) {
  constexpr int NL = 32 * W;
  constexpr int CW = NL * K;
  constexpr bool FUSED = COST != COST_PRECOMPUTED;
  using Word = typename Link<T>::Word;
  const int lane = threadIdx.x & 31;
  const unsigned tid = group_tid<W, BAR>(), nthreads = group_threads<W, BAR>();
  const int wg = (W == 1) ? 0 : int(tid >> 5);
  const int L = wg * 32 + lane;
  const T BIG = Num<T>::big();
  const int N = a.N, M = a.M;
  const int n = int(a.xlen[b]), m = int(a.ylen[b]);
  const int nch_b = (m + CW - 1) / CW;
  if (MODE != MODE_RECOMP) r1 = n;
  const int smod = MODE == MODE_RECOMP ? a.TH : N;  // step rows in the link store (ring of slots)
  const T* xb = a.x + size_t(b) * N * DT;
  const T* yb = a.y + size_t(b) * M * DT;
  const T* Cb = a.C + size_t(b) * N * a.ldc;  // column j of a row at Cb[row * ldc + j - cbase] (j >= cbase)
  const int cb = a.cbase;
  const int* wb = a.window + size_t(b) * N * 2;
  T* my_ring = ring + size_t(tid) * K;  // stage s at my_ring + s * nthreads * K

  const int c_lo = MODE == MODE_SEQ ? 0 : c0, c_hi = MODE == MODE_SEQ ? nch_b : c0 + 1;
  for (int c = c_lo; c < c_hi; ++c) {
    // The previous chunk's last column (read) and this chunk's (written).
    const T* bnd_in = MODE == MODE_SEQ ? a.bnd + size_t(b) * N : a.bnd + (size_t(b) * a.nch + c - 1) * N;
    T* bnd_out = MODE == MODE_SEQ ? a.bnd + size_t(b) * N : a.bnd + (size_t(b) * a.nch + c) * N;
    const int* flag_in = a.flags + size_t(b) * a.nch + c - 1;  // CHAIN, c > 0
    int* flag_out = a.flags + size_t(b) * a.nch + c;
    const bool waits = MODE == MODE_CHAIN && c > 0 && wg == 0;  // warp 0 reads the previous chunk
    const int j0 = c * CW + L * K;
    // The pass ends when the last lane holding a column of the pair has finished row r1 - 1: lanes past
    // column m - 1 (the last chunk of a narrow pair) hold nothing that matters (a 16-column pair in one
    // warp: 31 steps instead of 47). The backward (BWD_SEQ) starts its pass late by the same count and
    // never reads what those lanes did not store (trims_pass).
    const int steps = (r1 - r0) + pass_lanes<MODE == MODE_SEQ && trims_pass<FUSED, K>(), K>(m, c, NL) - 1;
    T yv[K][DT];
    if (FUSED) {
#pragma unroll
      for (int k = 0; k < K; ++k)
#pragma unroll
        for (int d = 0; d < DT; ++d) yv[k][d] = (j0 + k < M) ? yb[size_t(j0 + k) * DT + d] * xs : T(0);
    }
    T r[K];  // R of this lane's columns on the row it processed last (RECOMP: the checkpointed row r0 - 1)
    const T* top = (MODE == MODE_RECOMP && r0 > 0)
                       ? a.ckpt + (size_t(b) * ckpt_rows(N, a.TH) + tile_index) * (size_t(a.nch) * CW) + j0
                       : nullptr;
    // CHAIN with checkpoints: rows until this lane's next checkpointed row (the row above a tile), counted
    // down per row instead of a modulo per row.
    const bool keeps_ckpt = MODE == MODE_CHAIN && a.ckpt != nullptr;
    const Tiles tiles(c, nch_b, a.stagger, a.TH);
    int to_ckpt = keeps_ckpt ? (2 * a.TH - 1 - tiles.shift) % a.TH : -1;
#pragma unroll
    for (int k = 0; k < K; ++k) r[k] = top ? top[k] : BIG;
    T last = r[K - 1];  // what lane L + 1 reads as its left neighbour
    // Left neighbour received one step ago = diagonal neighbour now; lane 0 of a later chunk starting
    // below row 0 begins with R[r0 - 1, c CW - 1] from the saved column.
    T prevleft = (MODE == MODE_RECOMP && r0 > 0 && c > 0 && L == 0) ? bnd_in[r0 - 1] : BIG;
    if (W > 1) {
      if (lane == 31) { hand[0][wg] = BIG; hand[1][wg] = BIG; }
      group_sync<W, BAR>();
    }
    Word* sbase = MODE == MODE_RECOMP ? tile : (STORE ? a.saved + (size_t(b) * a.nch + c) * size_t(N) * CW : nullptr);
    const bool owns_end = (c == nch_b - 1) && (j0 <= m - 1) && (m - 1 < j0 + K);  // holds R[n-1, m-1]

    // Row stream: lane l of warp wg holds row (32 * floor(t / 32) - 32 * wg + l) in `cur`, the next
    // block in `nxt`; lane 0 of the warp needs row t - 32 * wg at step t.
    auto load_row = [&](const int row, FwdRow<T, DT>& q) {
      const bool ok = row >= 0 && row < n;
#pragma unroll
      for (int d = 0; d < DT; ++d) q.x[d] = (FUSED && ok) ? xb[size_t(row) * DT + d] * xs : T(0);
      q.lo = (WINDOW && ok) ? wb[2 * row] : 0;
      q.hi = (WINDOW && ok) ? wb[2 * row + 1] : 0;
      q.left = (c > 0 && wg == 0 && ok) ? __ldcg(bnd_in + row) : BIG;
    };
    FwdRow<T, DT> cur, nxt, mine;  // mine: the row this lane works on now
    if (waits) wait_rows(flag_in, min(n, 64));
    load_row(r0 - 32 * wg + lane, cur);
    load_row(r0 + 32 - 32 * wg + lane, nxt);
#pragma unroll
    for (int d = 0; d < DT; ++d) mine.x[d] = T(0);
    mine.lo = mine.hi = 0;

    // C ring (precomputed cost): step t's K values of row t - L, issued P - 1 steps ahead.
    auto issue_c = [&](const int t) {
      if constexpr (!FUSED && P > 0) {
        const int row = r0 + t - L;
        const bool ok = row >= 0 && row < n;
        T* dst = my_ring + size_t(t % P) * nthreads * K;
#pragma unroll
        for (int k = 0; k < K; ++k)
          cp_async<int(sizeof(T))>(dst + k, ok && j0 + k < M ? Cb + size_t(row) * a.ldc + (j0 + k - cb) : a.C, ok && j0 + k < M);
        cp_async_commit();
      }
    };
    if (!FUSED && P > 0)
      for (int t = 0; t < P - 1; ++t) issue_c(t);

    int slot = 0;  // t mod N
    for (int t = 0; t < steps; ++t) {
      const int i = r0 + t - L;
      const bool live = (i >= r0) && (i < r1);
      if ((t & 31) == 0 && t > 0) {
        cur = nxt;
        if (waits) wait_rows(flag_in, min(n, t + 64));
        load_row(r0 + t + 32 - 32 * wg + lane, nxt);
      }
      // Move the row inputs one lane along; lane 0 takes the next row from the warp's block.
      const int src = t & 31;
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
      T chunk_left = BIG;
      if (c > 0 && wg == 0) chunk_left = __shfl_sync(FULL_MASK, cur.left, src);  // warp-uniform
      T leftin = __shfl_up_sync(FULL_MASK, last, 1);
      // Lane 0 takes its left neighbour from lane 31 of the warp on the left (one step ago, through shared
      // memory; every lane reads the broadcast and selects, no divergent branch), from the previous
      // chunk's last column, or the border.
      T in0 = chunk_left;
      if (W > 1 && wg > 0) in0 = hand[(t + 1) & 1][wg - 1];  // warp-uniform
      if (lane == 0) leftin = in0;
      T diag = prevleft;
      if (L == 0 && c == 0) diag = (i == 0) ? T(0) : BIG;  // R[-1, -1] = 0
      prevleft = leftin;
      T cr[K];
      if constexpr (!FUSED && P > 0) {
        issue_c(t + P - 1);
        cp_async_wait<P - 1>();
        const T* src_c = my_ring + size_t(t % P) * nthreads * K;
#pragma unroll
        for (int k = 0; k < K; ++k) cr[k] = src_c[k];
      } else if constexpr (!FUSED) {  // RECOMP of a precomputed cost: plain loads (no ring in the backward)
#pragma unroll
        for (int k = 0; k < K; ++k) cr[k] = (live && j0 + k < M) ? Cb[size_t(i) * a.ldc + (j0 + k - cb)] : T(0);
      }
      if (live) {
        T left = leftin;
        Word sv[K];
#pragma unroll
        for (int k = 0; k < K; ++k) {
          T cst;  // in log2 units: x and y came pre-scaled, C is scaled here
          if (!FUSED) {
            cst = cr[k] * scale;
          } else {
            cst = T(0);
#pragma unroll
            for (int d = 0; d < DT; ++d) cst += cost_term<T, COST>(mine.x[d] - yv[k][d]);
          }
          const T up = r[k];
          Word w = Word(0);
          T v;
          if (HARD) {
            int choice;
            v = hard_min3(diag, up, left, choice) + cst;
            w = Link<T>::hard(choice);
          } else if (STORE) {
            v = Link<T>::soft(diag, up, left, w) + cst;
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
        if (STORE) store_step<Word, K>(sbase + size_t(slot) * CW, L, NL, sv);
        if (MODE != MODE_RECOMP && L == NL - 1 && c + 1 < nch_b) {
          bnd_out[i] = last;
          // Publish 32 rows at a time; the release orders this lane's bnd stores before the count.
          if (MODE == MODE_CHAIN && (((i + 1) & 31) == 0 || i == n - 1)) st_release(flag_out, i + 1);
        }
        if (MODE == MODE_CHAIN && to_ckpt-- == 0) {  // row i + 1 starts tile tiles.of(i + 1)
          to_ckpt = a.TH - 1;
          if (i + 1 < n) {
            T* q = a.ckpt + (size_t(b) * ckpt_rows(N, a.TH) + tiles.of(i + 1)) * (size_t(a.nch) * CW) + j0;
#pragma unroll
            for (int k = 0; k < K; ++k) q[k] = r[k];
          }
        }
        if (MODE != MODE_RECOMP && i == n - 1 && owns_end) {
#pragma unroll
          for (int k = 0; k < K; ++k)
            if (j0 + k == m - 1) a.value[b] = r[k] * unit;
        }
      }
      if (++slot == smod) slot = 0;
      if (W > 1) {
        if (lane == 31) hand[t & 1][wg] = last;
        group_sync<W, BAR>();
      }
    }
    if (!FUSED && P > 0) cp_async_wait<0>();
    group_sync<W, BAR>();  // bnd written by this chunk is read by the next
  }
}

}  // namespace sdtw
