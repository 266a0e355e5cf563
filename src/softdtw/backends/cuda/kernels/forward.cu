// Soft-DTW forward kernels: the per-pair routine is in forward_pair.cuh (the backward of
// memory="checkpoint" runs it too, to recompute tiles).
#include "forward_pair.cuh"

namespace sdtw {

// Grid: W == 1: ceil(B / 4) blocks of 4 warps, a pair per warp; W > 1: B blocks of W warps.
// Register cap: one-warp pairs keep >= 20 (float, D <= 4) / 16 warps per SM, which the MUFU pipe needs
// (research/gpu-kernels.md: occupancy scan); without it ptxas picked 96 registers and double spilled.
// LONG: a float32 value-only pass of a long pair keeps frames, as the storing one does: its value is R at the
// pair's end, and a frameless float32 R loses ulp(|R|) in every cell (256 x 32768^2 at gamma = 1: 1.6e-5 off
// float64; with frames 2.5e-7, and no slower). launch.seq_frames picks it; the many-pair throughput passes of
// short pairs stay frameless. It keeps the 5-block cap: ptxas spills 8 words at K = 16 under it, yet 4 blocks
// per SM without spills ran 4 % slower (4096 x 8192^2; OPTIMIZATION_LOG.md, "Frames in long sequential passes").
// SPLIT_LINKS: a storing pass takes its soft-min in two stages (forward_pair.cuh, SPLIT_STORE; launch.split_links).
// VAR: alignment variants (common.cuh, Variant); pen, pen_stride, endbuf are read only by their instantiations:
// endbuf (VAR_OPEN_END) holds endr (B, M), then endv (B, 2) (ForwardArgs).
template <typename T, int COST, int DT, int K, int W, bool WINDOW, bool STORE, bool LONG = false, int VAR = 0,
          bool SPLIT_LINKS = false>
__global__ void __launch_bounds__(W == 1 ? 128 : 32 * W,
                                  W == 1 ? (sizeof(T) == 4 && DT <= 4 ? 5 : 4) : (W < 16 ? 16 / W : 1))
forward_kernel(const T* __restrict__ x, const T* __restrict__ y, const T* __restrict__ C,
               const T* __restrict__ gamma, const long long* __restrict__ xlen,
               const long long* __restrict__ ylen, const int* __restrict__ window, T* __restrict__ value,
               typename Link<T>::Word* __restrict__ saved, T* __restrict__ bnd, int B, int N, int M, int nch,
               const T* __restrict__ pen, int pen_stride, double* __restrict__ endbuf) {
  constexpr int THREADS = W == 1 ? 128 : 32 * W;
  constexpr int STAGE = fused_cost<COST>() ? 0 : THREADS * K * int(sizeof(T));
  constexpr int P = ring_depth(STAGE);
  static_assert(P * STAGE <= 40960, "ring too large: the planner limits K for this W (launch.k_max)");
  __shared__ T hand[3][W];  // last lane's R, double-buffered, and its frame
  __shared__ __align__(16) T ring[STAGE > 0 ? P * THREADS * K : 1];
  const int b = (W == 1) ? int(blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5)) : int(blockIdx.x);
  if (b >= B) return;  // only the last block of a W == 1 grid; W > 1 grids have exactly B blocks
  const ForwardArgs<T> a{x, y, C, xlen, ylen, window, value, saved, bnd, nullptr, nullptr, N, M, nch, N, 0, 0, N,
                        pen, pen_stride, endbuf, endbuf + size_t(B) * M, nullptr, nullptr};
  // gamma is read on the device: no host sync, and CUDA-graph replays see its current value.
  // Soft: values in log2 units, scale = 1 / (gamma ln 2). Fused costs scale their inputs instead of each
  // cell's cost (one multiply per loaded value, none per cell): by sqrt(scale) for the squared
  // Euclidean cost, by scale for L1.
  const T g = *gamma;
  if (g == T(0)) {
    forward_pair<T, COST, DT, K, W, WINDOW, STORE, true, P, MODE_SEQ, 0, false, LONG, VAR, SPLIT_LINKS>(
        a, b, T(1), T(1), T(1), hand, ring);
  } else {
    const T scale = T(1) / (g * T(LN2));
    const T xs = COST == COST_SQEUCLIDEAN ? sqrt(scale) : scale;
    forward_pair<T, COST, DT, K, W, WINDOW, STORE, false, P, MODE_SEQ, 0, false, LONG, VAR, SPLIT_LINKS>(
        a, b, scale, g * T(LN2), xs, hand, ring);
  }
}

// Chained layout (MODE_CHAIN): B * nch blocks of W warps, one per (pair, chunk). Blocks take their (pair,
// chunk) from a ticket in the order they start, so a block only ever waits on a block that started
// before it: the chain makes progress whatever the number of resident blocks. sync: [ticket, flags (B, nch)],
// zeroed by the caller. CKPT: ckpt (memory="checkpoint", else null): row checkpoints every TH rows; bnd keeps the
// last column of every chunk for all rows (the column checkpoints).
// Row bands (CKPT, large D): one launch per band of rows [r_lo, r_hi), top to bottom, C holding only those rows
// (B, r_hi - r_lo, M), r_lo a tile boundary (stagger 0): each chunk starts from the row checkpoint the launch
// before wrote and the previous chunk's column (bnd, all rows); sync is the band's own [ticket, flags], zeroed.
// (r_lo, r_hi) = (0, N): the whole pair.
// Minimum blocks per SM (the register cap) of forward_chain_kernel, 0 for ptxas' choice. Capped: the float
// value-only kernels of fused costs, the builds measured on the H100. At K <= 4 (two-stage soft-min,
// forward_pair.cuh SPLIT_PASS) 1024 threads per SM, 64 registers (uncapped, ptxas picked fewer and a longer
// step); at K = 8, 1152 threads per SM, 56 registers, so that B = 16, N = 65536 (1024 blocks of 4 warps) keeps
// 9 blocks per SM and runs in one wave (uncapped: 72, 7 blocks per SM; at 80 registers it took +27 %,
// OPTIMIZATION_LOG.md "Frames in the value-only chained forward").
template <typename T, int COST, int K, int W, bool STORE, bool CKPT>
__host__ __device__ constexpr int chain_min_blocks() {
  return sizeof(T) == 4 && fused_cost<COST>() && !STORE && !CKPT && W <= 8 ? (K <= 4 ? 32 / W : 36 / W) : 0;
}
// SPLIT_LINKS: as forward_kernel.
// VAR: as forward_kernel; endbuf holds endr (B, M), endv (B, 2), then the chunks' partials (B, nch, 2), and done
// (B,) counts the chunks of each pair that have published theirs (zeroed by the caller).
template <typename T, int COST, int DT, int K, int W, bool WINDOW, bool STORE, bool CKPT, int VAR = 0,
          bool SPLIT_LINKS = false>
__global__ void __launch_bounds__(32 * W, chain_min_blocks<T, COST, K, W, STORE, CKPT>())
forward_chain_kernel(const T* __restrict__ x, const T* __restrict__ y, const T* __restrict__ C,
                     const T* __restrict__ gamma, const long long* __restrict__ xlen,
                     const long long* __restrict__ ylen, const int* __restrict__ window, T* __restrict__ value,
                     typename Link<T>::Word* __restrict__ saved, T* bnd, int* sync, T* ckpt, int B, int N,
                     int M, int nch, int TH, int stagger, int r_lo, int r_hi, const T* __restrict__ pen,
                     int pen_stride, double* endbuf, int* done) {
  constexpr int THREADS = 32 * W;
  constexpr int STAGE = fused_cost<COST>() ? 0 : THREADS * K * int(sizeof(T));
  constexpr int P = ring_depth(STAGE);
  static_assert(P * STAGE <= 40960, "ring too large: the planner limits K for this W (launch.k_max)");
  __shared__ T hand[3][W];  // last lane's R, double-buffered, and its frame
  __shared__ __align__(16) T ring[STAGE > 0 ? P * THREADS * K : 1];
  __shared__ int ticket;
  if (threadIdx.x == 0) ticket = atomicAdd(sync, 1);
  __syncthreads();
  const int b = ticket / nch, c = ticket % nch;
  if (b >= B) return;
  const int m = int(ylen[b]);
  if (c * THREADS * K >= m) return;  // past this pair's columns: nobody waits on this chunk
  // Rows of this launch (the whole pair but in a row band of a checkpoint); a pair ending above them has none.
  // (Tables only: forward_pair's ROWS.)
  constexpr bool ROWS = CKPT && !fused_cost<COST>();
  const int r0 = ROWS ? r_lo : 0, r1 = ROWS ? min(r_hi, N) : N;
  if (r0 > 0 && r0 >= int(xlen[b])) return;  // nor does any chunk wait on this one: its neighbours return too
  const ForwardArgs<T> a{x, y, C, xlen, ylen, window, value, saved, bnd, sync + 1, ckpt, N, M, nch, TH, stagger,
                        r0, r1 - r0, pen, pen_stride, endbuf, endbuf + size_t(B) * M,
                        endbuf + size_t(B) * M + 2 * size_t(B), done};
  const T g = *gamma;
  if (g == T(0)) {
    forward_pair<T, COST, DT, K, W, WINDOW, STORE, true, P, MODE_CHAIN, 0, CKPT, false, VAR, SPLIT_LINKS>(
        a, b, T(1), T(1), T(1), hand, ring, c, r0, r1);
  } else {
    const T scale = T(1) / (g * T(LN2));
    const T xs = COST == COST_SQEUCLIDEAN ? sqrt(scale) : scale;
    forward_pair<T, COST, DT, K, W, WINDOW, STORE, false, P, MODE_CHAIN, 0, CKPT, false, VAR, SPLIT_LINKS>(
        a, b, scale, g * T(LN2), xs, hand, ring, c, r0, r1);
  }
}

}  // namespace sdtw
