// The eager training step's launcher in C++ (issue 27; softdtw/backends/cuda/fastpath.py builds and loads it).
//
// The Python path of a small cuda soft_dtw call pays, per training step, an autograd.Function applied from Python
// (its forward and, above all, its backward: a Python node the engine calls back into), a few torch calls and
// three ctypes launches. Here the same kernels, with the same arguments, are launched from a C++ autograd
// Function: the forward queues the value check (check.cu) and forward_kernel, the backward node is C++ and
// queues backward_kernel. With D > 16 and the squared Euclidean cost they take the "gram" form, as on the Python
// path: two norms and a GEMM before the forward, a GEMM for each gradient after the backward. Long pairs take the
// chained kernels (forward_chain_kernel, backward_chain_kernel) over all rows, as the Python path's
// _run_forward_chain and _run_backward_chain launch them. Large tables are stored here too (memory "store", or "auto"
// where fastpath.py finds it would store); running out of memory hands the call to the Python path, which raises
// its MemoryError. Everything a launch
// needs besides its tensors (CUfunction, grid, block, sizes) is a Plan registered once per shape by Python,
// which builds it with the Python path's own pieces. The driver's cuLaunchKernel, cuCtxGetCurrent and
// cuCtxSetCurrent come as addresses from Python (libcuda is opened by ctypes there), so this file needs the
// PyTorch headers only, no CUDA toolkit.
//
// What stays in Python: which calls may come here (fastpath.py), reading the value check's answer, and every
// other case. A backward with create_graph=True calls softdtw/_ops.py's _FusedGrad (set_grad_fn, set when the module
// loads), an autograd Function whose backward is the Hessian-vector product: the same graph as the Python path's _Fused.
//
// The ops' CUDA kernels (register_ops): a compiled graph (torch.compile) holds the custom ops softdtw::forward,
// backward, forward_cost, backward_cost and hvp_cost, whose only kernel was the Python one (CompositeExplicitAutograd,
// softdtw/_ops.py). Once registered, the CUDA dispatch key runs the *_op functions below, which launch the same
// kernels with the same arguments as the Python kernel for the calls they take (plain DP, no window, "store" or
// "none", a plan fastpath.py's learner registered) and hand every other call to the Python kernel, unchanged.
//
// DILATE's training call (Dilate, dilate) is the third piece: softdtw/dilate.py's Python path replayed in C++.
#include <torch/extension.h>
#include <torch/library.h>

#include <ATen/autocast_mode.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <deque>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

namespace {

using LaunchFn = int (*)(void* f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                         unsigned smem, void* stream, void** params, void** extra);
using CtxFn = int (*)(void** ctx);
using SetCtxFn = int (*)(void* ctx);
LaunchFn g_launch = nullptr;
CtxFn g_ctx_get = nullptr;
SetCtxFn g_ctx_set = nullptr;

struct Kernel {
  void* fn = nullptr;
  unsigned grid = 0, block = 0;
};

// One shape's launches; the integer tails are those of backends/cuda/__init__.py's _Seq (B, N, M, nch).
struct Plan {
  void* ctx = nullptr;  // the device's primary context, where the kernels are loaded
  Kernel check, fwd, bwd;
  int64_t saved_numel = 0;
  c10::ScalarType saved_dtype = c10::ScalarType::Int;
  std::vector<int64_t> fwd_bnd, bwd_bnd;  // the hand-over buffers' shapes, empty when one column chunk
  int64_t B = 0, N = 0, M = 0, nch = 1;
  std::string cost;
  bool gram = false;  // large-D squared Euclidean: the kernels take |x_i|, |y_j| and x·yᵀ (cost "gram")
  Kernel norms;       // gram: norms_kernel (its grid is set per launch)
  // gram, small (set_gram_gemm; backends/cuda/__init__.py's own_gram_gemm): kernels/gram_gemm.cu's gram_xy_kernel
  // (x·yᵀ and the norms) and gram_grads_kernel (dx, dy) in place of norms_kernel, at::bmm and the baddbmm_ pairs.
  Kernel gram_xy, gram_grads;
  // DILATE (set_hvp): fwd is the value-only forward of a precomputed cost, hvp is hvp_warp_kernel (hvp.py)
  Kernel hvp;
  int64_t rec_numel = 0;  // its per-cell records, in the data dtype
  int64_t vec_group = 1;  // values per 16 bytes: its vectorised path needs M a multiple of it
  // DILATE through one kernel (set_dilate_xy): hvp is dilate_xy_kernel (hvp.py's dilate_xy), fwd unused.
  bool dxy = false;
  Kernel lengths;  // check.cu's lengths_kernel (set_lengths; its grid is set per launch)
  // A chained plan (set_chain; backends/cuda/__init__.py's _run_forward_chain and _run_backward_chain): fwd and bwd
  // are forward_chain_kernel and backward_chain_kernel, B·nch blocks; fwd_bnd and bwd_bnd the flat hand-over
  // buffers, sync_numel the forward's zeroed int32 [ticket, flags], ws_numel the backward's zeroed int64 words.
  bool chain = false;
  int64_t stagger = 0, sync_numel = 0, ws_numel = 0;
  // A checkpointed large-D forward (set_checkpoint; backends/cuda/__init__.py's _forward_rows in one band of rows):
  // fwd keeps R on chunk and tile boundaries (TH rows) in the saved buffer, of the data dtype: col_numel values of the
  // chunks' columns, then the rows'. Its backward is the Python path's (_backward_rows: the table band by band).
  int64_t TH = 0, col_numel = 0;
  // A two-ended plan (set_two_ended; backends/cuda/two_ended.py, kernels/two_ended.cu): the call's B1 pairs of N1
  // rows run as this plan's B = 2 B1 pairs of N = ceil(N1 / 2) rows, the top half of each pair's rows and the bottom
  // half reversed, fwd and bwd with the open end. te_in writes the halves' inputs, te_seed folds the forward's end
  // values into the values and the backward's seeds, te_grads maps the halves' dx, dy back. end_off: bytes from
  // saved's start (the link table) to the forward's end values (2B M + 2B float64, then the chunks' partials).
  bool two = false;
  Kernel te_in, te_seed, te_grads;
  int64_t B1 = 0, N1 = 0, end_off = 0;
  // A backward run ahead (set_ahead; fastpath.py's _set_ahead): a storing forward queues the backward behind itself
  // with grad 1 (ones: (B,) ones of the data dtype, the tensor kept by fastpath.py; a two-ended plan's are the seed
  // kernel's), and the node's backward only scales (scale: scale_grads_kernel; a two-ended plan's te_grads).
  bool ahead = false;
  Kernel scale;
  int64_t ones = 0;
};

std::mutex g_lock;
// create_graph=True backward of the launcher's node: fn(grad, x, y, gamma, cost, x_lengths, y_lengths, value, saved)
// -> (dx, dy, dgamma), differentiable (set_grad_fn, by fastpath.py as it loads the module).
py::object* g_grad_fn = nullptr;
std::deque<Plan> g_plans;  // append-only: a plan's index is its id; a deque keeps references valid as it grows

const Plan& plan_of(int64_t id) {
  std::lock_guard<std::mutex> guard(g_lock);
  TORCH_CHECK(id >= 0 && id < (int64_t)g_plans.size(), "softdtw fast path: unknown plan ", id);
  return g_plans[id];
}

inline int64_t ptr(const at::Tensor& t) { return t.defined() ? (int64_t)(uintptr_t)t.data_ptr() : 0; }

// ceil(a / b) for a >= 0, b > 0: the blocks of a grid.
inline int64_t cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Every argument sits in an 8-byte slot, as in launch.py: the driver copies each parameter's own size from the
// start of its slot, so little-endian int64 slots serve int32 and pointer parameters alike.
// The engine runs a backward on its own thread per device, where PyTorch may not have made the primary context
// current yet (it skips cudaSetDevice when the device number already matches): the driver call needs it.
void bind(const Plan& p) {
  void* cur = nullptr;
  if (g_ctx_get(&cur) != 0 || cur != p.ctx) {
    const int err = g_ctx_set(p.ctx);
    TORCH_CHECK(err == 0, "softdtw: cuCtxSetCurrent failed with CUDA error ", err, ".");
  }
}

void launch(const Kernel& k, int64_t stream, std::initializer_list<int64_t> args, const char* what) {
  int64_t slots[40];
  void* params[40];
  TORCH_CHECK(args.size() <= 40, "softdtw fast path: too many kernel arguments (a bug, please report it).");
  size_t n = 0;
  for (int64_t a : args) {
    slots[n] = a;
    params[n] = &slots[n];
    ++n;
  }
  const int err = g_launch(k.fn, k.grid, 1, 1, k.block, 1, 1, 0, (void*)(uintptr_t)stream, params, nullptr);
  TORCH_CHECK(err == 0, "softdtw: cuLaunchKernel of ", what, " failed with CUDA error ", err, " (grid ", k.grid,
              ", block ", k.block, ").");
}

at::Tensor maybe_empty(const std::vector<int64_t>& shape, const at::TensorOptions& opts) {
  return shape.empty() ? at::Tensor() : at::empty(shape, opts);
}

constexpr int64_t kGramTile = 64;  // kernels/gram_gemm.cu's GG_TILE

// The gram cost's inputs, as backends/cuda/__init__.py's _gram: |x_i|, |y_j| (norms_kernel, one launch for both) and
// x·yᵀ (left undefined without gemm: a float32 backward that drops dgamma reads no cost, as _skips_cost); a small
// plan's gram_xy_kernel writes all three in one launch.
void gram_inputs(const Plan& p, int64_t stream, const at::Tensor& xa, const at::Tensor& ya, at::Tensor& xn,
                 at::Tensor& yn, at::Tensor& G, bool gemm = true) {
  const at::Tensor x = xa.contiguous(), y = ya.contiguous();  // (no copy for the launcher's own calls)
  const int64_t B = x.size(0), N = x.size(1), M = y.size(1), D = x.size(2);
  xn = at::empty({B, N}, x.options());
  yn = at::empty({B, M}, x.options());
  const int64_t rows = B * (N + M);
  if (gemm && p.gram_xy.fn != nullptr) {  // x·yᵀ and the norms in one launch (kernels/gram_gemm.cu)
    G = at::empty({B, N, M}, x.options());
    const int64_t tiles = B * cdiv(N, kGramTile) * cdiv(M, kGramTile);
    Kernel k = p.gram_xy;
    k.grid = (unsigned)(tiles + cdiv(rows, k.block));
    if (k.grid > 0) launch(k, stream, {ptr(x), ptr(y), B, N, M, D, ptr(G), ptr(xn), ptr(yn), tiles}, "gram_xy_kernel");
    return;
  }
  if (rows > 0) {
    TORCH_CHECK(p.norms.fn != nullptr,
                "softdtw fast path: a gram plan without its norms kernel (a bug, please report it).");
    Kernel k = p.norms;
    k.grid = (unsigned)cdiv(rows, k.block);
    launch(k, stream, {ptr(x), B * N, ptr(y), B * M, D, ptr(xn), ptr(yn)}, "norms_kernel");
  }
  if (gemm) G = at::bmm(x, y.transpose(1, 2));
}

// The gram cost's dx = 2 (rs x - E y) and dy = 2 (cs y - Eᵀ x) from E = grad_b E_b (B, N, M) and its row and column
// sums rs, cs, as backends/cuda/__init__.py's _backward_gram: gram_grads_kernel in one launch where the plan has it,
// else one GEMM each, accumulating into the scaled input in place. A gradient not needed stays undefined.
void gram_grads(const Plan& p, int64_t stream, const at::Tensor& E, const at::Tensor& xa, const at::Tensor& ya,
                const at::Tensor& rs, const at::Tensor& cs, bool need_x, bool need_y, at::Tensor& dx, at::Tensor& dy) {
  if (p.gram_grads.fn == nullptr) {
    if (need_x) dx = (xa * rs.unsqueeze(-1)).baddbmm_(E, ya, 2.0, -2.0);
    if (need_y) dy = (ya * cs.unsqueeze(-1)).baddbmm_(E.transpose(1, 2), xa, 2.0, -2.0);
    return;
  }
  const at::Tensor x = xa.contiguous(), y = ya.contiguous();
  const int64_t B = x.size(0), N = x.size(1), M = y.size(1), D = x.size(2);
  if (need_x) dx = at::empty({B, N, D}, x.options());
  if (need_y) dy = at::empty({B, M, D}, x.options());
  const int64_t tiles_x = need_x ? B * cdiv(N, kGramTile) * cdiv(D, kGramTile) : 0;
  const int64_t tiles_y = need_y ? B * cdiv(M, kGramTile) * cdiv(D, kGramTile) : 0;
  Kernel k = p.gram_grads;
  k.grid = (unsigned)(tiles_x + tiles_y);
  if (k.grid > 0)
    launch(k, stream, {ptr(E), ptr(x), ptr(y), ptr(rs), ptr(cs), B, N, M, D, ptr(dx), ptr(dy), tiles_x},
           "gram_grads_kernel");
}

// The row range of a chained launch over all rows (backends/cuda/__init__.py, _ALL_ROWS).
constexpr int64_t kAllRows = int64_t(1) << 30;

// forward_kernel (or a chained plan's forward_chain_kernel, as _launch_forward_chain launches it over all rows) of
// plan p on (a0, a1, C): the features x and y (fused costs), the gram cost's norms and x·yᵀ, or 0, 0 and a
// precomputed C. Returns the values (B,) and, storing, the link table (else an empty tensor). open_end (a two-ended
// plan's halves, storing): the forward's end values go after the table, at saved + p.end_off, and a chained forward's
// done counters after its [ticket, flags] (p.sync_numel counts them).
std::pair<at::Tensor, at::Tensor> run_forward(const Plan& p, int64_t stream, int64_t a0, int64_t a1, int64_t C,
                                              const at::Tensor& gamma, const at::Tensor& xl, const at::Tensor& yl,
                                              bool store, const at::TensorOptions& opts, bool open_end = false) {
  at::Tensor value = at::empty({p.B}, opts);
  // (an open end without storing: saved holds the end values alone, a value-only two-ended plan's)
  at::Tensor saved =
      (store || open_end) ? at::empty({p.saved_numel}, opts.dtype(p.saved_dtype)) : at::empty({0}, opts);
  at::Tensor bnd = maybe_empty(p.fwd_bnd, opts);
  const int64_t end = open_end ? ptr(saved) + p.end_off : 0;
  if (p.TH > 0) {  // checkpointed, one band of all N rows: the column checkpoints, then the rows'
    TORCH_CHECK(store, "softdtw fast path: a checkpointed plan called without a gradient (a bug, please report it).");
    const at::Tensor sync = at::zeros({p.sync_numel}, opts.dtype(at::kInt));
    launch(p.fwd, stream,
           {a0, a1, C, ptr(gamma), ptr(xl), ptr(yl), 0, ptr(value), 0, ptr(saved), ptr(sync),
            ptr(saved) + p.col_numel * (int64_t)saved.element_size(), p.B, p.N, p.M, p.nch, p.TH, 0, 0, p.N, 0, 0, 0,
            0},
           "forward_chain_kernel");
    return {value, saved};
  }
  if (p.chain) {
    const at::Tensor sync = at::zeros({p.sync_numel}, opts.dtype(at::kInt));
    const int64_t done = open_end ? ptr(sync) + 4 * (p.sync_numel - p.B) : 0;
    launch(p.fwd, stream,
           {a0, a1, C, ptr(gamma), ptr(xl), ptr(yl), 0, ptr(value), store ? ptr(saved) : 0, ptr(bnd), ptr(sync), 0,
            p.B, p.N, p.M, p.nch, 1, p.stagger, 0, kAllRows, 0, 0, end, done},
           "forward_chain_kernel");
    return {value, saved};
  }
  launch(p.fwd, stream,
         {a0, a1, C, ptr(gamma), ptr(xl), ptr(yl), 0, ptr(value), store ? ptr(saved) : 0, ptr(bnd), p.B, p.N, p.M,
          p.nch, 0, 0, end},
         "forward_kernel");
  return {value, saved};
}

// backward_kernel (or a chained plan's backward_chain_kernel over all rows, as _launch_backward_chain) of plan p on
// (a0, a1, C) as run_forward, reading the stored table: writes dx, dy (fused; the gram cost's row and column sums of
// E), dC (E for a precomputed or gram cost) and dgamma (B,). endbuf: the open end's seeds (a two-ended plan's halves),
// else 0.
void run_backward(const Plan& p, int64_t stream, int64_t a0, int64_t a1, int64_t C, const at::Tensor& gamma,
                  const at::Tensor& xl, const at::Tensor& yl, int64_t grad, const at::Tensor& saved,
                  const at::Tensor& value, int64_t dx, int64_t dy, int64_t dC, int64_t dgamma,
                  const at::TensorOptions& opts, int64_t endbuf = 0) {
  const at::Tensor bnd = maybe_empty(p.bwd_bnd, opts);
  if (p.chain) {
    const at::Tensor ws = at::zeros({p.ws_numel}, opts.dtype(at::kLong));
    launch(p.bwd, stream,
           {a0, a1, C, ptr(gamma), ptr(xl), ptr(yl), 0, grad, ptr(saved), dx, dy, dC, ptr(value), dgamma,
            ptr(bnd), ptr(ws) + 8 * p.B, ptr(ws), 0, 0, 0, p.B, p.N, p.M, p.nch, 1, p.stagger, 0, kAllRows, 0, 0, 0,
            endbuf, 0, 0},
           "backward_chain_kernel");
    return;
  }
  launch(p.bwd, stream,
         {a0, a1, C, ptr(gamma), ptr(xl), ptr(yl), 0, grad, ptr(saved), dx, dy, dC, ptr(value), dgamma,
          ptr(bnd), p.B, p.N, p.M, p.nch, 0, 0, endbuf, 0},
         "backward_kernel");
}
void run_backward(const Plan& p, int64_t stream, int64_t a0, int64_t a1, int64_t C, const at::Tensor& gamma,
                  const at::Tensor& xl, const at::Tensor& yl, const at::Tensor& grad, const at::Tensor& saved,
                  const at::Tensor& value, int64_t dx, int64_t dy, int64_t dC, const at::Tensor& dgamma,
                  const at::TensorOptions& opts, int64_t endbuf = 0) {
  run_backward(p, stream, a0, a1, C, gamma, xl, yl, ptr(grad), saved, value, dx, dy, dC, ptr(dgamma), opts, endbuf);
}

// A plan whose backward runs ahead (p.ahead, fastpath.py's _set_ahead): its forward, storing, queues the backward
// right behind itself with grad 1 (the plan's ones), so the GPU runs it while the host returns, takes .mean() and
// reaches .backward(), where only scale_grads_kernel is left (Fused::launch_scale). Returns dx1 (B, N, D), dy1
// (B, M, D) and the unused dgamma (B,) in one buffer; undefined where it did not fit (the backward runs when asked).
at::Tensor run_ahead(const Plan& p, int64_t stream, const at::Tensor& x, const at::Tensor& y, const at::Tensor& gamma,
                     const at::Tensor& xl, const at::Tensor& yl, const at::Tensor& value, const at::Tensor& saved) {
  const int64_t nx = x.numel(), ny = y.numel();
  at::Tensor d1;
  try {
    d1 = at::empty({nx + ny + p.B}, x.options());
  } catch (const c10::OutOfMemoryError&) {
    return at::Tensor();
  }
  const int64_t es = (int64_t)d1.element_size();
  run_backward(p, stream, ptr(x), ptr(y), 0, gamma, xl, yl, p.ones, saved, value, ptr(d1), ptr(d1) + nx * es, 0,
               ptr(d1) + (nx + ny) * es, x.options());
  return d1;
}

// A call's own per-pair lengths (ux, uy: the user's tensors in the plan's order, undefined for full lengths) as the
// kernels read them, replacing the plan's full xl, yl: int64 (B,) on x's device (CPU ones arrive in one
// host-to-device copy, non-blocking as _checks.as_lengths makes it) and, with the value check on (flag != 0), copies
// clamped into [1, T] by lengths_kernel, queued in front of the check kernel with a length out of range flagged in
// ws[0] (as checks.py's _lengths does on the Python path). Returns false, having launched nothing, for lengths this
// launcher leaves to the Python path (anything but an integer tensor of shape (B,) on x's device or the CPU): that
// path reads them with _checks.as_lengths and raises its error.
// lk: the plan's lengths_kernel; B pairs, tx and ty steps (x's and y's, in the order of ux, uy).
bool call_lengths(const Kernel& lk, int64_t B, int64_t tx, int64_t ty, const at::Tensor& x, const at::Tensor& ux,
                  const at::Tensor& uy, int64_t stream, int64_t flag, int64_t ws, at::Tensor& xl, at::Tensor& yl) {
  auto usable = [&](const at::Tensor& l) {
    return !l.defined() || (l.dim() == 1 && l.size(0) == B && at::isIntegralType(l.scalar_type(), false) &&
                            (l.device() == x.device() || l.is_cpu()));
  };
  if (lk.fn == nullptr || !usable(ux) || !usable(uy)) return false;
  at::Tensor gx, gy;
  if (ux.defined() && uy.defined() && ux.is_cpu() && uy.is_cpu()) {
    const at::Tensor both = at::stack({ux.to(at::kLong), uy.to(at::kLong)}).to(x.device(), at::kLong, true);
    gx = both.select(0, 0);
    gy = both.select(0, 1);
  } else {
    auto on_gpu = [&](const at::Tensor& l) {
      return l.defined() ? l.to(x.device(), at::kLong, l.is_cpu()).contiguous() : l;
    };
    gx = on_gpu(ux);
    gy = on_gpu(uy);
  }
  if (flag == 0) {  // checks off: the kernels read the lengths as given, as on the Python path
    if (gx.defined()) xl = gx;
    if (gy.defined()) yl = gy;
    return true;
  }
  const at::Tensor out = at::empty({2, B}, xl.options());
  Kernel k = lk;
  k.grid = (unsigned)cdiv(B, k.block);
  launch(k, stream, {ptr(gx), gx.defined() ? ptr(out) : 0, tx, ptr(gy), gy.defined() ? ptr(out) + 8 * B : 0, ty, B, ws},
         "lengths_kernel");
  if (gx.defined()) xl = out.select(0, 0);
  if (gy.defined()) yl = out.select(0, 1);
  return true;
}

// The call's own lengths where it has any (ux, uy; call_lengths), into xl, yl, with the plan's context bound; true
// without any. false: nothing launched, and the call goes to the Python path.
bool own_lengths(const Plan& p, int64_t tx, int64_t ty, const at::Tensor& x, const std::optional<at::Tensor>& ux,
                 const std::optional<at::Tensor>& uy, int64_t stream, int64_t flag, int64_t ws, at::Tensor& xl,
                 at::Tensor& yl) {
  if (!ux && !uy) return true;
  bind(p);
  // (a two-ended plan's B is the halves' 2 B1: the call has B1 pairs)
  return call_lengths(p.lengths, p.two ? p.B1 : p.B, tx, ty, x, ux.value_or(at::Tensor()), uy.value_or(at::Tensor()),
                      stream, flag, ws, xl, yl);
}

struct Fused : public torch::autograd::Function<Fused> {
  // x (B, N, D), y (B, M, D) contiguous in the plan's dtype, gamma a 0-d constant of that dtype (a float gamma:
  // never differentiated), xl / yl the (B,) int64 lengths: the plan's full ones, or the call's as the value
  // check's lengths_kernel clamped them. check: the value check's slot (mapped flag, the kernel's counters) or three
  // zeros for none.
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x, const at::Tensor& y,
                            const at::Tensor& gamma, const at::Tensor& xl, const at::Tensor& yl, int64_t plan_id,
                            int64_t stream, bool store, int64_t flag, int64_t ws, int64_t wmax) {
    const Plan& p = plan_of(plan_id);
    bind(p);
    if (flag != 0) {
      launch(p.check, stream, {ptr(x), x.numel(), ptr(y), y.numel(), 0, ptr(gamma), flag, ws, wmax}, "check_kernel");
    }
    if (p.two) return forward_two(ctx, x, y, gamma, xl, yl, p, plan_id, stream, store);
    at::Tensor xn, yn, G;  // the gram cost's inputs (backends/cuda/__init__.py, _gram)
    if (p.gram) gram_inputs(p, stream, x, y, xn, yn, G);
    auto [value, saved] = run_forward(p, stream, p.gram ? ptr(xn) : ptr(x), p.gram ? ptr(yn) : ptr(y), ptr(G), gamma,
                                      xl, yl, store, x.options());
    if (store) {
      // The gram cost keeps its norms for the backward, and x·yᵀ in float64 only: float32 links hold the
      // normalised weights, so with gamma a constant the backward reads no cost (kernels/backward.cu, readc).
      // A backward run ahead (never gram) keeps its unit dx, dy after the table, which stays for a create_graph=True
      // backward (python_backward's HVP).
      torch::autograd::variable_list keep{x, y, gamma, xl, yl, value, saved};
      const at::Tensor d1 = p.ahead ? run_ahead(p, stream, x, y, gamma, xl, yl, value, saved) : at::Tensor();
      if (d1.defined()) {
        keep.push_back(d1);
        ctx->saved_data["ahead"] = true;
      } else if (p.gram && p.TH == 0) {
        keep.push_back(xn);
        keep.push_back(yn);
        if (x.scalar_type() != at::kFloat) keep.push_back(G);
      }
      ctx->save_for_backward(keep);
      ctx->saved_data["plan"] = plan_id;
      ctx->saved_data["stream"] = stream;  // the engine runs a node's backward on its forward's stream
    }
    return value;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto s = ctx->get_saved_variables();
    TORCH_CHECK(s.size() >= 7, "softdtw fast path: nothing was saved for the backward (a bug, please report it).");
    const at::Tensor& x = s[0];
    const Plan& p = plan_of(ctx->saved_data["plan"].toInt());
    at::Tensor grad = grads[0];
    torch::autograd::variable_list out(11);
    if (!grad.defined()) return out;
    if (grad.scalar_type() != x.scalar_type()) grad = grad.to(x.scalar_type());
    if (!grad.is_contiguous()) grad = grad.contiguous();
    if (at::GradMode::is_enabled() || p.TH > 0) {
      // create_graph=True: softdtw._ops's _FusedGrad (a Python autograd.Function whose backward is the HVP), as
      // the Python path's _Fused takes it: the op's dispatch and generated autograd wrapper cost ~0.3 ms each. A
      // checkpointed plan's backward is the Python path's too: the table band by band (_backward_rows), whose
      // launches are queued while the GPU still runs the forward.
      python_backward(ctx, s, p, grad, out);
      return out;
    }
    try {
      if (ctx->saved_data.find("ahead") != ctx->saved_data.end()) {
        launch_scale(ctx, s, p, grad, out);
      } else {
        launch_backward(ctx, s, p, grad, out);
      }
    } catch (const c10::OutOfMemoryError&) {
      // A large table's E or gradients did not fit: the Python path's backward (the same kernels, here without a
      // graph) runs it again, and raises its MemoryError naming the sizes if it cannot fit either.
      out = torch::autograd::variable_list(11);
      python_backward(ctx, s, p, grad, out);
    }
    return out;
  }

  // Where a two-ended plan's seeds buffer (float64 entries) holds its B2 ones, after the seeds (B2, M) and the end
  // values (B2, 2): the halves' grad in launch_backward_two (two_ended.py's _ones_at).
  static int64_t ones_at(int64_t B2, int64_t M) { return B2 * M + 2 * B2; }

  // A two-ended plan's forward (p.two): the halves' inputs, the forward of the 2B pairs with the open end, and the
  // fold. Storing (a plan with a gradient): the end values after the link table in saved, folded into the values (B1,)
  // and the backward's seeds. Values only (a plan without, two_ended.forward's launches): the end values alone in
  // saved, folded by te_seed, two_ended_value_kernel there.
  static at::Tensor forward_two(torch::autograd::AutogradContext* ctx, const at::Tensor& x, const at::Tensor& y,
                                const at::Tensor& gamma, const at::Tensor& xl, const at::Tensor& yl, const Plan& p,
                                int64_t plan_id, int64_t stream, bool store) {
    const auto opts = x.options();
    const int64_t B2 = p.B, H = p.N, M = p.M, D = x.size(2);
    const at::Tensor data = at::empty({B2 * (H + M) * D}, opts);  // x2 (2B, H, D), then y2 (2B, M, D)
    const at::Tensor lens = at::empty({2 * B2}, opts.dtype(at::kLong));  // xl2, then yl2
    const at::Tensor xl2 = lens.narrow(0, 0, B2), yl2 = lens.narrow(0, B2, B2);
    const int64_t x2 = ptr(data), y2 = x2 + B2 * H * D * (int64_t)data.element_size();
    Kernel kin = p.te_in;
    kin.grid = (unsigned)cdiv(B2 * std::max(H, M), kin.block);
    launch(kin, stream, {ptr(x), ptr(y), ptr(xl), ptr(yl), p.B1, p.N1, M, D, x2, y2, ptr(xl2), ptr(yl2)},
           "two_ended_inputs_kernel");
    // (its values are the halves' own open-end values, unused)
    const at::Tensor saved = run_forward(p, stream, x2, y2, 0, gamma, xl2, yl2, store, opts, true).second;
    const at::Tensor value = at::empty({p.B1}, opts);
    Kernel ks = p.te_seed;
    ks.grid = (unsigned)p.B1;
    if (!store) {
      launch(ks, stream, {ptr(saved) + p.end_off, ptr(gamma), ptr(xl), ptr(yl), p.B1, p.N1, M, ptr(value)},
             "two_ended_value_kernel");
      return value;
    }
    const at::Tensor seeds = at::empty({ones_at(B2, M) + B2}, opts.dtype(at::kDouble));
    launch(ks, stream,
           {ptr(saved) + p.end_off, ptr(gamma), ptr(xl), ptr(yl), p.B1, p.N1, M, ptr(seeds), ptr(value),
            ptr(seeds) + 8 * ones_at(B2, M)},
           "two_ended_seed_kernel");
    ctx->saved_data["plan"] = plan_id;
    ctx->saved_data["stream"] = stream;
    if (p.ahead) {  // the halves' backward now (Plan::ahead); only two_ended_grads_kernel is left for the node's
      at::Tensor d2;
      try {
        d2 = halves_backward(p, stream, gamma, saved, data, lens, seeds, opts, D);
      } catch (const c10::OutOfMemoryError&) {
      }
      if (d2.defined()) {
        ctx->save_for_backward({x, y, gamma, xl, yl, value, at::empty({0}, saved.options()), d2});
        ctx->saved_data["ahead"] = true;
        return value;
      }
    }
    ctx->save_for_backward({x, y, gamma, xl, yl, value, saved, data, lens, seeds});
    return value;
  }

  // The halves' backward of a two-ended plan (storing forward_two's buffers): the open end's backward of the 2B pairs
  // from the seeds, with grad 1 (the seed kernel's ones after the seeds; two_ended_grads_kernel scales by the call's
  // grad, so the host makes no copies of grad). Their dgamma is not asked for, so the values it reads may be any B2
  // finite ones: the halves' inputs (data). Returns dx2 (2B, H, D), dy2 (2B, M, D) and that dgamma (2B,) in one buffer.
  static at::Tensor halves_backward(const Plan& p, int64_t stream, const at::Tensor& gamma, const at::Tensor& saved,
                                    const at::Tensor& data, const at::Tensor& lens, const at::Tensor& seeds,
                                    const at::TensorOptions& opts, int64_t D) {
    const int64_t B2 = p.B, H = p.N, M = p.M;
    const at::Tensor d2 = at::empty({B2 * (H + M) * D + B2}, opts);
    const int64_t es = (int64_t)d2.element_size(), x2 = ptr(data), y2 = x2 + B2 * H * D * es;
    const at::Tensor ones2 = seeds.narrow(0, ones_at(B2, M), B2).view(opts.dtype().toScalarType()).narrow(0, 0, B2);
    run_backward(p, stream, x2, y2, 0, gamma, lens.narrow(0, 0, B2), lens.narrow(0, B2, B2), ptr(ones2), saved, data,
                 ptr(d2), ptr(d2) + B2 * H * D * es, 0, ptr(d2) + B2 * (H + M) * D * es, opts, ptr(seeds));
    return d2;
  }

  // dx, dy of a two-ended plan's B1 pairs from the halves' (d2: halves_backward's buffer), times grad.
  static void map_back(const Plan& p, int64_t stream, const at::Tensor& d2, const at::Tensor& grad,
                       const at::Tensor& x, const at::Tensor& y, const at::Tensor& xl, const at::Tensor& yl,
                       bool need_x, bool need_y, torch::autograd::variable_list& out) {
    const int64_t M = p.M, D = x.size(2), dx2 = ptr(d2), dy2 = dx2 + p.B * p.N * D * (int64_t)d2.element_size();
    const at::Tensor dx = at::empty_like(x), dy = at::empty_like(y);
    Kernel kg = p.te_grads;
    kg.grid = (unsigned)cdiv(p.B1 * std::max(p.N1, M), kg.block);
    launch(kg, stream, {dx2, dy2, ptr(grad), ptr(xl), ptr(yl), p.B1, p.N1, M, D, ptr(dx), ptr(dy)},
           "two_ended_grads_kernel");
    if (need_x) out[0] = dx;
    if (need_y) out[1] = dy;
  }

  // The node's backward where the forward ran it ahead (Plan::ahead): dx, dy scaled by grad from the saved unit ones
  // (s[7]), scale_grads_kernel (a two-ended plan: map_back's two_ended_grads_kernel).
  static void launch_scale(torch::autograd::AutogradContext* ctx, const torch::autograd::variable_list& s,
                           const Plan& p, const at::Tensor& grad, torch::autograd::variable_list& out) {
    const at::Tensor &x = s[0], &y = s[1], &xl = s[3], &yl = s[4], &d1 = s[7];
    const bool need_x = ctx->needs_input_grad(0), need_y = ctx->needs_input_grad(1);
    bind(p);
    const int64_t stream = ctx->saved_data["stream"].toInt();
    if (p.two) return map_back(p, stream, d1, grad, x, y, xl, yl, need_x, need_y, out);
    const at::Tensor dx = need_x ? at::empty_like(x) : at::Tensor(), dy = need_y ? at::empty_like(y) : at::Tensor();
    const int64_t D = x.size(2), dx1 = ptr(d1), dy1 = dx1 + x.numel() * (int64_t)d1.element_size();
    Kernel k = p.scale;
    k.grid = (unsigned)cdiv(p.B * std::max(p.N, p.M), k.block);
    launch(k, stream, {dx1, dy1, ptr(grad), ptr(xl), ptr(yl), p.B, p.N, p.M, D, ptr(dx), ptr(dy)},
           "scale_grads_kernel");
    if (need_x) out[0] = dx;
    if (need_y) out[1] = dy;
  }

  // A two-ended plan's backward: the halves' backward from the seeds, then dx, dy mapped back.
  static void launch_backward_two(torch::autograd::AutogradContext* ctx, const torch::autograd::variable_list& s,
                                  const Plan& p, const at::Tensor& grad, torch::autograd::variable_list& out) {
    const at::Tensor &x = s[0], &y = s[1], &gamma = s[2], &xl = s[3], &yl = s[4], &saved = s[6];
    const at::Tensor &data = s[7], &lens = s[8], &seeds = s[9];
    bind(p);
    const int64_t stream = ctx->saved_data["stream"].toInt();
    const at::Tensor d2 = halves_backward(p, stream, gamma, saved, data, lens, seeds, x.options(), x.size(2));
    map_back(p, stream, d2, grad, x, y, xl, yl, ctx->needs_input_grad(0), ctx->needs_input_grad(1), out);
  }

  // The Python path's backward of this node into out[0], out[1] (None from Python, for a gradient nobody uses, stays
  // undefined): softdtw._ops.fused_grad_for_launcher (set_grad_fn), differentiable under create_graph=True.
  static void python_backward(torch::autograd::AutogradContext* ctx, const torch::autograd::variable_list& s,
                              const Plan& p, const at::Tensor& grad, torch::autograd::variable_list& out) {
    TORCH_CHECK(g_grad_fn != nullptr, "softdtw fast path: no Python backward was set (a bug, please report it).");
    const bool need_x = ctx->needs_input_grad(0), need_y = ctx->needs_input_grad(1);
    py::gil_scoped_acquire gil;
    // A two-ended plan's table is the halves': the Python path gets none and runs its own storing forward again.
    const at::Tensor saved = p.two ? at::empty({0}, s[0].options()) : s[6];
    py::tuple r = (*g_grad_fn)(grad, s[0], s[1], s[2], p.cost, s[3], s[4], s[5], saved,
                               p.TH > 0 ? "checkpoint" : "store", need_x, need_y);
    if (!r[0].is_none()) out[0] = r[0].cast<at::Tensor>();
    if (!r[1].is_none()) out[1] = r[1].cast<at::Tensor>();
  }

  // The backward's kernels (gram: with its GEMMs) into out[0], out[1] where x and y need them.
  static void launch_backward(torch::autograd::AutogradContext* ctx, const torch::autograd::variable_list& s,
                              const Plan& p, const at::Tensor& grad, torch::autograd::variable_list& out) {
    if (p.two) return launch_backward_two(ctx, s, p, grad, out);
    const at::Tensor &x = s[0], &y = s[1], &gamma = s[2], &xl = s[3], &yl = s[4], &value = s[5], &saved = s[6];
    const bool need_x = ctx->needs_input_grad(0), need_y = ctx->needs_input_grad(1);
    bind(p);
    const auto opts = x.options();
    const int64_t stream = ctx->saved_data["stream"].toInt();
    const at::Tensor dgamma = at::empty({p.B}, opts);
    if (p.gram) {
      // grad_b E_b into E with its row and column sums rs, cs; then dx = 2 (rs x - E y), dy = 2 (cs y - Eᵀ x)
      // (gram_grads).
      const at::Tensor &xn = s[7], &yn = s[8];
      const int64_t G = s.size() > 9 ? ptr(s[9]) : 0;  // none in float32 (the forward above)
      at::Tensor E = at::empty({p.B, p.N, p.M}, opts), rs = at::empty_like(xn), cs = at::empty_like(yn);
      run_backward(p, stream, ptr(xn), ptr(yn), G, gamma, xl, yl, grad, saved, value, ptr(rs), ptr(cs), ptr(E), dgamma,
                   opts);
      gram_grads(p, stream, E, x, y, rs, cs, need_x, need_y, out[0], out[1]);
      return;
    }
    at::Tensor dx = at::empty_like(x), dy = at::empty_like(y);
    run_backward(p, stream, ptr(x), ptr(y), 0, gamma, xl, yl, grad, saved, value, ptr(dx), ptr(dy), 0, dgamma, opts);
    if (need_x) out[0] = dx;
    if (need_y) out[1] = dy;
  }
};

// hvp_warp_kernel (backends/cuda/hvp.py's hvp_cost, no window or variant) along (Cd, gd); its vectorised path
// wants M a multiple of 16 bytes' values and 16-byte aligned tables.
void launch_hvp(const Plan& p, int64_t stream, const at::Tensor& C, const at::Tensor& Cd, const at::Tensor& gamma,
                const at::Tensor& gd, const at::Tensor& xl, const at::Tensor& yl, const at::Tensor& rec,
                const at::Tensor& E, const at::Tensor& Ed, const at::Tensor& vg, const at::Tensor& vgd) {
  bool vec = p.M % p.vec_group == 0;
  for (int64_t a : {ptr(C), ptr(Cd), ptr(E), ptr(Ed)}) vec = vec && a % 16 == 0;
  launch(p.hvp, stream,
         {ptr(C), ptr(Cd), ptr(gamma), ptr(gd), ptr(xl), ptr(yl), 0, ptr(rec), ptr(E), ptr(Ed), ptr(vg), ptr(vgd), p.B,
          p.N, p.M, vec ? 1 : 0, 0, 0, 0, 0, 0, 0},
         "hvp_warp_kernel");
}


// DILATE (softdtw/dilate.py) of x (B, N, D), y (B, M, D) with the squared Euclidean cost, the default Omega and
// no lengths or band: loss = alpha sdtw + (1 - alpha) <E, Omega>. The same torch calls and kernels as the Python
// path, in the same order, so the loss and the gradients are bitwise the Python path's. Where dilate_xy_kernel
// runs (p.dxy: hvp.py's hvp_xy_plan) that path is dilate._DilateXY: one kernel, the loss from its terms, and a
// backward that scales its gradient sums. Elsewhere (K·D past the kernel's registers) it is dilate._terms with
// _Dilate: C by broadcasting, a value-only forward of C, one hvp_cost along Omega, and a backward that replays
// what autograd does for _Dilate's backward and C's broadcast formula.
struct Dilate : public torch::autograd::Function<Dilate> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x, const at::Tensor& y,
                            const at::Tensor& gamma, const at::Tensor& xl, const at::Tensor& yl, const at::Tensor& om,
                            const at::Tensor& gdot, int64_t plan_id, int64_t stream, int64_t flag, int64_t ws,
                            int64_t wmax, double alpha) {
    const Plan& p = plan_of(plan_id);
    bind(p);
    if (flag != 0) {
      launch(p.check, stream, {ptr(x), x.numel(), ptr(y), y.numel(), 0, ptr(gamma), flag, ws, wmax}, "check_kernel");
    }
    const auto opts = x.options();
    if (p.dxy) {
      // dilate._DilateXY's forward (hvp.dilate_xy): one kernel gives the terms and the loss's gradient in x, y.
      at::Tensor rec = at::empty({p.rec_numel}, opts), v = at::empty({p.B}, opts), tv = at::empty({p.B}, opts),
                 vg = at::empty({p.B}, opts), vgd = at::empty({p.B}, opts), dx = at::empty_like(x),
                 dy = at::empty_like(y);
      int64_t abits = 0;  // alpha by value: its bits in the slot
      if (x.scalar_type() == at::kFloat) {
        const float a = (float)alpha;
        int32_t i;
        std::memcpy(&i, &a, 4);
        abits = i;
      } else {
        std::memcpy(&abits, &alpha, 8);
      }
      launch(p.hvp, stream,
             {ptr(x), ptr(y), ptr(gamma), ptr(xl), ptr(yl), ptr(rec), abits, ptr(v), ptr(tv), ptr(dx), ptr(dy),
              ptr(vg), ptr(vgd), p.B, p.N, p.M},
             "dilate_xy_kernel");
      dx.mul_(2.0);
      dy.mul_(2.0);
      ctx->save_for_backward({v, dx, dy});
      ctx->saved_data["alpha"] = alpha;
      return at::add(at::mul(v, alpha), at::mul(tv, 1.0 - alpha));
    }
    at::Tensor diff = x.unsqueeze(2) - y.unsqueeze(1);  // costs.sqeuclidean's broadcast form
    at::Tensor C = diff.pow(2).sum(-1);
    const at::Tensor value = run_forward(p, stream, 0, 0, ptr(C), gamma, xl, yl, false, opts).first;
    at::Tensor E = at::empty_like(C), Ed = at::empty_like(C), vg = at::empty({p.B}, opts),
               vgd = at::empty({p.B}, opts), rec = at::empty({p.rec_numel}, opts);
    launch_hvp(p, stream, C, om, gamma, gdot, xl, yl, rec, E, Ed, vg, vgd);
    at::Tensor temporal = (E * om).sum({1, 2});
    ctx->save_for_backward({diff, value, E, Ed});
    ctx->saved_data["alpha"] = alpha;
    return at::add(at::mul(value, alpha), at::mul(temporal, 1.0 - alpha));
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    torch::autograd::variable_list out(13);
    const at::Tensor& grad = grads[0];
    if (!grad.defined()) return out;
    TORCH_CHECK_NOT_IMPLEMENTED(!at::GradMode::is_enabled(),
                "a double backward through dilate_loss is not supported: DILATE's gradient is already a second "
                "derivative of soft-DTW (softdtw::hvp_cost), which has no derivative of its own. Take its "
                "backward with create_graph=False.");
    const auto s = ctx->get_saved_variables();
    if (s.size() == 3) {  // dilate_xy_kernel's (dilate._DilateXY.backward)
      const at::Tensor gk = grad * at::isfinite(s[0]).to(s[0].scalar_type());
      if (ctx->needs_input_grad(0)) out[0] = s[1] * gk.view({-1, 1, 1});
      if (ctx->needs_input_grad(1)) out[1] = s[2] * gk.view({-1, 1, 1});
      return out;
    }
    const at::Tensor &diff = s[0], &value = s[1], &E = s[2], &Ed = s[3];
    const double alpha = ctx->saved_data["alpha"].toDouble();
    // loss = alpha * shape + (1 - alpha) * temporal: MulBackward0 of each term, then _Dilate.backward.
    const at::Tensor keep = at::isfinite(value).to(E.scalar_type());
    const at::Tensor gs = grad.mul(alpha) * keep, gt = grad.mul(1.0 - alpha) * keep;
    const at::Tensor dC = gs.view({-1, 1, 1}) * E + gt.view({-1, 1, 1}) * Ed;
    // C = (x[:, :, None] - y[:, None]).pow(2).sum(-1): SumBackward0, PowBackward0 (grad * (2 * diff^1)), then
    // SubBackward0 with the broadcast dimension summed (keepdim) and UnsqueezeBackward0.
    const at::Tensor t = dC.unsqueeze(-1).expand(diff.sizes()) * (diff.pow(1.0) * 2.0);
    if (ctx->needs_input_grad(0)) out[0] = t.sum({2}, true).squeeze(2);
    if (ctx->needs_input_grad(1)) out[1] = (-t).sum({1}, true).squeeze(1);
    return out;
  }
};

// ux, uy: the call's own lengths (undefined for full ones; call_lengths), taken with dilate_xy_kernel only (the
// default Omega divides by each pair's length, which the other route's plan holds for full lengths). An undefined
// result, with nothing launched, sends the call to the Python path.
at::Tensor dilate(const at::Tensor& x, const at::Tensor& y, const at::Tensor& gamma, const at::Tensor& xl,
                  const at::Tensor& yl, const std::optional<at::Tensor>& ux, const std::optional<at::Tensor>& uy,
                  const at::Tensor& om, const at::Tensor& gdot, int64_t plan_id, int64_t stream, int64_t flag,
                  int64_t ws, int64_t wmax, double alpha) {
  at::Tensor cxl = xl, cyl = yl;
  if (ux || uy) {
    const Plan& p = plan_of(plan_id);
    if (!p.dxy || !own_lengths(p, p.N, p.M, x, ux, uy, stream, flag, ws, cxl, cyl)) return at::Tensor();
  }
  return Dilate::apply(x, y, gamma, cxl, cyl, om, gdot, plan_id, stream, flag, ws, wmax, alpha);
}

// The hvp kernel of a DILATE plan (add_plan registered its check and value-only forward).
// A DILATE plan's second-order kernel (fn, grid, block) and its records' size; with the caller holding g_lock.
Plan& set_second_order(int64_t id, int64_t fn, int64_t grid, int64_t block, int64_t rec_numel) {
  TORCH_CHECK(id >= 0 && id < (int64_t)g_plans.size(), "softdtw fast path: unknown plan ", id);
  Plan& p = g_plans[id];
  p.hvp.fn = (void*)(uintptr_t)fn;
  p.hvp.grid = (unsigned)grid;
  p.hvp.block = (unsigned)block;
  p.rec_numel = rec_numel;
  return p;
}

void set_hvp(int64_t id, int64_t fn, int64_t grid, int64_t block, int64_t rec_numel, int64_t vec_group) {
  std::lock_guard<std::mutex> guard(g_lock);
  set_second_order(id, fn, grid, block, rec_numel).vec_group = vec_group;
}

// DILATE through dilate_xy_kernel for a DILATE plan (instead of set_hvp's value-only forward and hvp_warp_kernel).
void set_dilate_xy(int64_t id, int64_t fn, int64_t grid, int64_t block, int64_t rec_numel) {
  std::lock_guard<std::mutex> guard(g_lock);
  set_second_order(id, fn, grid, block, rec_numel).dxy = true;
}

// ux, uy: the call's own lengths in the plan's order (undefined for full ones; call_lengths). An undefined result,
// with nothing launched, sends the call to the Python path.
at::Tensor fused(const at::Tensor& x, const at::Tensor& y, const at::Tensor& gamma, const at::Tensor& xl,
                 const at::Tensor& yl, const std::optional<at::Tensor>& ux, const std::optional<at::Tensor>& uy,
                 int64_t plan_id, int64_t stream, bool store, int64_t flag, int64_t ws, int64_t wmax) {
  at::Tensor cxl = xl, cyl = yl;
  if (ux || uy) {
    const Plan& p = plan_of(plan_id);
    if (!own_lengths(p, p.two ? p.N1 : p.N, p.M, x, ux, uy, stream, flag, ws, cxl, cyl)) return at::Tensor();
  }
  return Fused::apply(x, y, gamma, cxl, cyl, plan_id, stream, store, flag, ws, wmax);
}

// soft_dtw_divergence (softdtw/functional.py): sdtw(x, y) - 0.5 sdtw(x, x) - 0.5 sdtw(y, y) as three Fused nodes
// combined by the same ATen ops as the Python expression, so values and gradients are bitwise those of three fused
// calls. What it saves over three calls: one value check over x and y instead of three (each of which the host
// waited for in turn, behind the previous term's kernels), one lengths_kernel whose clamped copies serve all three
// terms, and two round trips from Python. plans: the terms' plans (x·y, x·x, y·y); swap: the first is for (y, x)
// (launch.transposes); full: x's and y's full lengths (B,); store: whether each term keeps its table for a gradient.
// ux, uy: the call's own lengths (call_lengths). An undefined result, with nothing launched, sends the call to the
// Python path.
at::Tensor divergence(const at::Tensor& x, const at::Tensor& y, const at::Tensor& gamma, std::vector<int64_t> plans,
                      bool swap, const at::Tensor& full_x, const at::Tensor& full_y,
                      const std::optional<at::Tensor>& ux, const std::optional<at::Tensor>& uy, int64_t stream,
                      std::vector<bool> store, int64_t flag, int64_t ws, int64_t wmax) {
  TORCH_CHECK(plans.size() == 3 && store.size() == 3, "softdtw fast path: a divergence takes three plans");
  const Plan& p = plan_of(plans[0]);
  bind(p);
  at::Tensor xl = full_x, yl = full_y;
  if (!own_lengths(p, x.size(1), y.size(1), x, ux, uy, stream, flag, ws, xl, yl)) return at::Tensor();
  // The check (x and y, as the first term's plan has it) runs in front of the first term only.
  const at::Tensor vxy = swap ? Fused::apply(y, x, gamma, yl, xl, plans[0], stream, store[0], flag, ws, wmax)
                              : Fused::apply(x, y, gamma, xl, yl, plans[0], stream, store[0], flag, ws, wmax);
  const at::Tensor vxx = Fused::apply(x, x, gamma, xl, xl, plans[1], stream, store[1], 0, 0, 0);
  const at::Tensor vyy = Fused::apply(y, y, gamma, yl, yl, plans[2], stream, store[2], 0, 0, 0);
  // In the Python expression's order (vxy - 0.5 * vxx - 0.5 * vyy): the autograd nodes get the same sequence.
  const at::Tensor hxx = at::mul(vxx, 0.5);
  const at::Tensor d = at::sub(vxy, hxx);
  const at::Tensor hyy = at::mul(vyy, 0.5);
  return at::sub(d, hyy);
}

// --- the ops' CUDA kernels ------------------------------------------------------------------------------------

// One plan per (B, N, M, D, dtype, device, cost, store), registered by fastpath.py's learner at a key's first
// call: its plan id, or -1 for a call this file does not take.
struct OpKey {
  int64_t B, N, M, D;
  int dtype, dev;
  std::string cost;
  bool store;
  bool operator==(const OpKey& o) const {
    return B == o.B && N == o.N && M == o.M && D == o.D && dtype == o.dtype && dev == o.dev && store == o.store &&
           cost == o.cost;
  }
};
struct OpKeyHash {
  size_t operator()(const OpKey& k) const {
    size_t h = std::hash<std::string>()(k.cost);
    for (int64_t v : {k.B, k.N, k.M, k.D, (int64_t)k.dtype, (int64_t)k.dev, (int64_t)k.store})
      h = h * 1000003u ^ std::hash<int64_t>()(v);
    return h;
  }
};
std::unordered_map<OpKey, int64_t, OpKeyHash> g_op_plans;
constexpr size_t kOpPlansMax = 4096;
bool g_ops_on = false;
std::atomic<int64_t> g_ops_taken{0}, g_ops_passed{0};  // calls the kernels below ran / handed to Python (tests)
// Never freed: Python objects and the registration must outlive the interpreter's teardown of this module.
py::object* g_learner = nullptr;
torch::Library* g_ops_lib = nullptr;

bool is_dense(const at::Tensor& t, const at::Tensor& x, int64_t dim) {
  return t.defined() && t.device() == x.device() && t.dim() == dim && t.is_contiguous();
}

// Whether gamma and the lengths are what the kernels read for data x: gamma a 0-d tensor of x's dtype on its
// device, the lengths int64 (B,) there.
bool scalars_ok(const at::Tensor& x, const at::Tensor& gamma, const at::Tensor& xl, const at::Tensor& yl) {
  return is_dense(gamma, x, 0) && gamma.scalar_type() == x.scalar_type() && is_dense(xl, x, 1) &&
         is_dense(yl, x, 1) && xl.scalar_type() == at::kLong && yl.scalar_type() == at::kLong &&
         xl.size(0) == x.size(0) && yl.size(0) == x.size(0);
}

bool data_ok(const at::Tensor& x) {
  return x.is_cuda() && is_dense(x, x, 3) && (x.scalar_type() == at::kFloat || x.scalar_type() == at::kDouble);
}

// The plan id of a key, asking fastpath.py's learner (with a and b: x and y, or C twice) at the key's first call.
int64_t lookup(OpKey key, const at::Tensor& a, const at::Tensor& b) {
  {
    std::lock_guard<std::mutex> guard(g_lock);
    auto it = g_op_plans.find(key);
    if (it != g_op_plans.end()) return it->second;
  }
  int64_t id;
  {
    py::gil_scoped_acquire gil;
    id = (*g_learner)(a, b, key.cost, key.store).cast<int64_t>();
  }
  if (id == -2) return -1;  // not now (a graph capture, a forced plan), ask again next time
  std::lock_guard<std::mutex> guard(g_lock);
  if (g_op_plans.size() < kOpPlansMax) g_op_plans.emplace(std::move(key), id);
  return id;
}

// The plan of a fused-cost call the kernels below take, or -1 (then the Python kernel runs it). x, y (B, N, D),
// (B, M, D) contiguous float32 / float64 of one dtype on one CUDA device; the plan itself (fused cost, small
// table, not chained) is fastpath.py's decision.
int64_t op_plan(const at::Tensor& x, const at::Tensor& y, const at::Tensor& gamma, const at::Tensor& xl,
                const at::Tensor& yl, c10::string_view cost, bool store) {
  if (!g_ops_on || g_learner == nullptr || !data_ok(x) || !is_dense(y, x, 3) || y.scalar_type() != x.scalar_type() ||
      y.size(0) != x.size(0) || y.size(2) != x.size(2) || !scalars_ok(x, gamma, xl, yl))
    return -1;
  return lookup({x.size(0), x.size(1), y.size(1), x.size(2), (int)x.scalar_type(), (int)x.get_device(),
                 std::string(cost), store},
                x, y);
}

// The same for a precomputed cost C (B, N, M): kind "precomputed" (forward_cost, backward_cost) or "hvp" (hvp_cost).
int64_t cost_plan(const at::Tensor& C, const at::Tensor& gamma, const at::Tensor& xl, const at::Tensor& yl,
                  const char* kind, bool store) {
  if (!g_ops_on || g_learner == nullptr || !data_ok(C) || !scalars_ok(C, gamma, xl, yl)) return -1;
  return lookup({C.size(0), C.size(1), C.size(2), 0, (int)C.scalar_type(), (int)C.get_device(), kind, store}, C, C);
}

int64_t current_stream(const at::Tensor& x) {
  return (int64_t)(uintptr_t)c10::impl::getDeviceGuardImpl(c10::DeviceType::CUDA)->getStream(x.device())
      .native_handle();
}


// A backward op's value and saved table as the forward of plan p left them (data: x or C), and a gradient per
// pair; anything else is the Python kernel's.
bool stored_as_planned(const Plan& p, const at::Tensor& data, const at::Tensor& grad, const at::Tensor& value,
                       const at::Tensor& saved) {
  return is_dense(saved, data, 1) && saved.numel() == p.saved_numel && saved.scalar_type() == p.saved_dtype &&
         is_dense(value, data, 1) && value.size(0) == p.B && value.scalar_type() == data.scalar_type() &&
         grad.defined() && grad.device() == data.device() && grad.dim() == 1 && grad.size(0) == p.B &&
         grad.is_floating_point();
}

bool plain(const torch::jit::Stack& s, size_t window, size_t backend) {
  // no window, backend "cuda", and the alignment variants' defaults (open_begin, open_end, step_penalty)
  return s[window].isNone() && s[backend].toStringRef() == "cuda" && !s[backend + 1].toBool() &&
         !s[backend + 2].toBool() && s[backend + 3].isNone();
}

// Counts the call and, when no plan takes it (id < 0), hands it to the Python kernel: true when handed over.
bool handed_over(const c10::OperatorHandle& op, torch::jit::Stack& s, int64_t id) {
  if (id >= 0) {
    ++g_ops_taken;
    return false;
  }
  ++g_ops_passed;
  op.callBoxedForDispatchKey(c10::DispatchKey::CompositeExplicitAutograd, s);
  return true;
}

// softdtw::forward(x, y, gamma, cost, x_lengths, y_lengths, window, memory, backend, open_begin, open_end,
// step_penalty) -> (value, saved): backends/cuda/__init__.py's forward and _run_forward for the calls it takes.
void forward_op(const c10::OperatorHandle& op, c10::DispatchKeySet, torch::jit::Stack* stack) {
  auto& s = *stack;
  const size_t a = s.size() - 12;
  int64_t id = -1;
  const std::string& memory = s[a + 7].toStringRef();
  const bool store = memory == "store";
  if ((store || memory == "none") && plain(s, a + 6, a + 8)) {
    id = op_plan(s[a].toTensor(), s[a + 1].toTensor(), s[a + 2].toTensor(), s[a + 4].toTensor(),
                 s[a + 5].toTensor(), s[a + 3].toStringRef(), store);
  }
  if (id >= 0 && plan_of(id).gram && at::autocast::is_autocast_enabled(at::kCUDA)) id = -1;
  if (handed_over(op, s, id)) return;
  const at::Tensor x = s[a].toTensor(), y = s[a + 1].toTensor(), gamma = s[a + 2].toTensor();
  const at::Tensor xl = s[a + 4].toTensor(), yl = s[a + 5].toTensor();
  const Plan& p = plan_of(id);
  bind(p);
  at::Tensor xn, yn, G;
  if (p.gram) gram_inputs(p, current_stream(x), x, y, xn, yn, G);
  auto [value, saved] = run_forward(p, current_stream(x), p.gram ? ptr(xn) : ptr(x), p.gram ? ptr(yn) : ptr(y),
                                    ptr(G), gamma, xl, yl, store, x.options());
  torch::jit::drop(s, 12);
  torch::jit::push(s, std::move(value), std::move(saved));
}

// softdtw::backward(grad, x, y, gamma, cost, x_lengths, y_lengths, window, value, saved, memory, backend,
// open_begin, open_end, step_penalty, needs) -> (dx, dy, dgamma, dpenalty): backends/cuda/__init__.py's backward
// (_run_backward, or _backward_gram for the gram cost) for the calls it takes. needs (bits: 1 dx, 2 dy, 4 dgamma):
// an output left out comes back empty, (0,); the gram cost runs no GEMM for it (nor x·yᵀ without dgamma in float32).
void backward_op(const c10::OperatorHandle& op, c10::DispatchKeySet, torch::jit::Stack* stack) {
  auto& s = *stack;
  const size_t a = s.size() - 16;
  int64_t id = -1;
  if (s[a + 10].toStringRef() == "store" && plain(s, a + 7, a + 11)) {
    id = op_plan(s[a + 1].toTensor(), s[a + 2].toTensor(), s[a + 3].toTensor(), s[a + 5].toTensor(),
                 s[a + 6].toTensor(), s[a + 4].toStringRef(), true);
  }
  if (id >= 0) {
    const Plan& p = plan_of(id);
    if ((p.gram && at::autocast::is_autocast_enabled(at::kCUDA)) ||
        !stored_as_planned(p, s[a + 1].toTensor(), s[a].toTensor(), s[a + 8].toTensor(), s[a + 9].toTensor()))
      id = -1;
  }
  if (handed_over(op, s, id)) return;
  const Plan& p = plan_of(id);
  const at::Tensor x = s[a + 1].toTensor(), y = s[a + 2].toTensor(), gamma = s[a + 3].toTensor();
  const at::Tensor xl = s[a + 5].toTensor(), yl = s[a + 6].toTensor(), value = s[a + 8].toTensor();
  const at::Tensor saved = s[a + 9].toTensor();
  at::Tensor grad = s[a].toTensor();
  if (grad.scalar_type() != x.scalar_type() || !grad.is_contiguous()) grad = grad.to(x.scalar_type()).contiguous();
  bind(p);
  const auto opts = x.options();
  const int64_t stream = current_stream(x);
  const int64_t needs = s[a + 15].toInt();
  const bool need_x = needs & 1, need_y = needs & 2, need_g = needs & 4;
  at::Tensor dgamma = at::empty({p.B}, opts), dx, dy;
  if (p.gram) {
    // E = grad_b E_b (over x·yᵀ in place, or a fresh buffer when no cost is read), its row and column sums rs, cs;
    // dx = 2 (rs x - E y), dy = 2 (cs y - Eᵀ x) (gram_grads).
    const bool skip = x.scalar_type() == at::kFloat && !need_g;
    at::Tensor xn, yn, G;
    gram_inputs(p, stream, x, y, xn, yn, G, !skip);
    if (skip) G = at::empty({p.B, p.N, p.M}, opts);
    at::Tensor rs = at::empty_like(xn), cs = at::empty_like(yn);
    run_backward(p, stream, ptr(xn), ptr(yn), skip ? 0 : ptr(G), gamma, xl, yl, grad, saved, value, ptr(rs), ptr(cs),
                 ptr(G), dgamma, opts);
    gram_grads(p, stream, G, x, y, rs, cs, need_x, need_y, dx, dy);
  } else {
    dx = at::empty_like(x);
    dy = at::empty_like(y);
    run_backward(p, stream, ptr(x), ptr(y), 0, gamma, xl, yl, grad, saved, value, ptr(dx), ptr(dy), 0, dgamma, opts);
  }
  if (!need_x) dx = at::empty({0}, opts);
  if (!need_y) dy = at::empty({0}, opts);
  if (!need_g) dgamma = at::empty({0}, opts);
  at::Tensor dpen = at::empty({0}, opts);
  torch::jit::drop(s, 16);
  torch::jit::push(s, std::move(dx), std::move(dy), std::move(dgamma), std::move(dpen));
}

// softdtw::forward_cost(C, gamma, x_lengths, y_lengths, window, memory, backend, open_begin, open_end,
// step_penalty) -> (value, saved): backends/cuda/__init__.py's forward_cost for the calls it takes.
void forward_cost_op(const c10::OperatorHandle& op, c10::DispatchKeySet, torch::jit::Stack* stack) {
  auto& s = *stack;
  const size_t a = s.size() - 10;
  int64_t id = -1;
  const std::string& memory = s[a + 5].toStringRef();
  const bool store = memory == "store";
  if ((store || memory == "none") && plain(s, a + 4, a + 6)) {
    id = cost_plan(s[a].toTensor(), s[a + 1].toTensor(), s[a + 2].toTensor(), s[a + 3].toTensor(), "precomputed",
                   store);
  }
  if (handed_over(op, s, id)) return;
  const at::Tensor C = s[a].toTensor(), gamma = s[a + 1].toTensor(), xl = s[a + 2].toTensor(),
                   yl = s[a + 3].toTensor();
  const Plan& p = plan_of(id);
  bind(p);
  auto [value, saved] = run_forward(p, current_stream(C), 0, 0, ptr(C), gamma, xl, yl, store, C.options());
  torch::jit::drop(s, 10);
  torch::jit::push(s, std::move(value), std::move(saved));
}

// softdtw::backward_cost(grad, C, gamma, x_lengths, y_lengths, window, value, saved, memory, backend, open_begin,
// open_end, step_penalty) -> (dC, dgamma, dpenalty): backends/cuda/__init__.py's backward_cost for the calls it
// takes (a stored table).
void backward_cost_op(const c10::OperatorHandle& op, c10::DispatchKeySet, torch::jit::Stack* stack) {
  auto& s = *stack;
  const size_t a = s.size() - 13;
  int64_t id = -1;
  if (s[a + 8].toStringRef() == "store" && plain(s, a + 5, a + 9)) {
    id = cost_plan(s[a + 1].toTensor(), s[a + 2].toTensor(), s[a + 3].toTensor(), s[a + 4].toTensor(),
                   "precomputed", true);
  }
  if (id >= 0 && !stored_as_planned(plan_of(id), s[a + 1].toTensor(), s[a].toTensor(), s[a + 6].toTensor(),
                                    s[a + 7].toTensor()))
    id = -1;
  if (handed_over(op, s, id)) return;
  const Plan& p = plan_of(id);
  const at::Tensor C = s[a + 1].toTensor(), gamma = s[a + 2].toTensor(), xl = s[a + 3].toTensor(),
                   yl = s[a + 4].toTensor(), value = s[a + 6].toTensor(), saved = s[a + 7].toTensor();
  at::Tensor grad = s[a].toTensor();
  if (grad.scalar_type() != C.scalar_type() || !grad.is_contiguous()) grad = grad.to(C.scalar_type()).contiguous();
  bind(p);
  const auto opts = C.options();
  at::Tensor dC = at::empty_like(C), dgamma = at::empty({p.B}, opts);
  run_backward(p, current_stream(C), 0, 0, ptr(C), gamma, xl, yl, grad, saved, value, 0, 0, ptr(dC), dgamma, opts);
  at::Tensor dpen = at::empty({0}, opts);
  torch::jit::drop(s, 13);
  torch::jit::push(s, std::move(dC), std::move(dgamma), std::move(dpen));
}

// softdtw::hvp_cost(C, gamma, x_lengths, y_lengths, window, Cdot, gamma_dot, backend, open_begin, open_end,
// step_penalty, penalty_dot) -> (E, vgamma, Edot, vgamma_dot, vpen, vpen_dot): backends/cuda/hvp.py's hvp_cost
// for the calls hvp_warp_kernel takes (plan "hvp": set_hvp).
void hvp_cost_op(const c10::OperatorHandle& op, c10::DispatchKeySet, torch::jit::Stack* stack) {
  auto& s = *stack;
  const size_t a = s.size() - 12;
  int64_t id = -1;
  if (plain(s, a + 4, a + 7) && s[a + 11].isNone()) {
    const at::Tensor &C = s[a].toTensor(), &Cd = s[a + 5].toTensor(), &gd = s[a + 6].toTensor();
    // C-dot and gamma-dot as the kernel reads them: C's shape and dtype, contiguous; (B,)
    if (is_dense(Cd, C, 3) && Cd.sizes() == C.sizes() && Cd.scalar_type() == C.scalar_type() &&
        is_dense(gd, C, 1) && gd.scalar_type() == C.scalar_type() && gd.size(0) == C.size(0))
      id = cost_plan(C, s[a + 1].toTensor(), s[a + 2].toTensor(), s[a + 3].toTensor(), "hvp", false);
  }
  if (handed_over(op, s, id)) return;
  const Plan& p = plan_of(id);
  const at::Tensor C = s[a].toTensor(), gamma = s[a + 1].toTensor(), xl = s[a + 2].toTensor(),
                   yl = s[a + 3].toTensor(), Cd = s[a + 5].toTensor(), gd = s[a + 6].toTensor();
  bind(p);
  const auto opts = C.options();
  at::Tensor E = at::empty_like(C), Ed = at::empty_like(C), vg = at::empty({p.B}, opts),
             vgd = at::empty({p.B}, opts), rec = at::empty({p.rec_numel}, opts);
  launch_hvp(p, current_stream(C), C, Cd, gamma, gd, xl, yl, rec, E, Ed, vg, vgd);
  torch::jit::drop(s, 12);
  torch::jit::push(s, std::move(E), std::move(vg), std::move(Ed), std::move(vgd), at::empty({0}, opts),
                   at::empty({0}, opts));
}

// Register the kernels above at the CUDA key of softdtw::forward, backward, forward_cost, backward_cost and hvp_cost
// (once; the ops are defined by softdtw/_ops.py). learner(x, y, cost, store) -> plan id, -1 (not taken) or -2 (not now).
void register_ops(py::object learner) {
  std::lock_guard<std::mutex> guard(g_lock);
  if (g_ops_lib != nullptr) return;
  g_learner = new py::object(std::move(learner));
  g_ops_lib = new torch::Library(torch::Library::IMPL, "softdtw", c10::DispatchKey::CUDA, __FILE__, __LINE__);
  g_ops_lib->impl("forward", torch::CppFunction::makeFromBoxedFunction<&forward_op>());
  g_ops_lib->impl("backward", torch::CppFunction::makeFromBoxedFunction<&backward_op>());
  g_ops_lib->impl("forward_cost", torch::CppFunction::makeFromBoxedFunction<&forward_cost_op>());
  g_ops_lib->impl("backward_cost", torch::CppFunction::makeFromBoxedFunction<&backward_cost_op>());
  g_ops_lib->impl("hvp_cost", torch::CppFunction::makeFromBoxedFunction<&hvp_cost_op>());
  g_ops_on = true;
}

void set_ops_enabled(bool on) { g_ops_on = on; }

void set_grad_fn(py::object fn) {
  std::lock_guard<std::mutex> guard(g_lock);
  if (g_grad_fn == nullptr) g_grad_fn = new py::object(std::move(fn));
}

std::vector<int64_t> op_counts() { return {g_ops_taken.load(), g_ops_passed.load()}; }

// A kernel as fastpath.py passes it: (CUfunction, grid, block).
Kernel kernel_of(const std::vector<int64_t>& k) {
  TORCH_CHECK(k.size() == 3, "softdtw fast path: a kernel is (CUfunction, grid, block)");
  Kernel out;
  out.fn = (void*)(uintptr_t)k[0];
  out.grid = (unsigned)k[1];
  out.block = (unsigned)k[2];
  return out;
}

int64_t add_plan(int64_t context, std::vector<int64_t> check, std::vector<int64_t> fwd, std::vector<int64_t> bwd, int64_t saved_numel,
                 c10::ScalarType saved_dtype, std::vector<int64_t> fwd_bnd, std::vector<int64_t> bwd_bnd, int64_t B,
                 int64_t N, int64_t M, int64_t nch, std::string cost, bool gram) {
  Plan p;
  p.ctx = (void*)(uintptr_t)context;
  p.check = kernel_of(check);
  p.fwd = kernel_of(fwd);
  p.bwd = kernel_of(bwd);
  p.saved_numel = saved_numel;
  p.saved_dtype = saved_dtype;
  p.fwd_bnd = std::move(fwd_bnd);
  p.bwd_bnd = std::move(bwd_bnd);
  p.B = B;
  p.N = N;
  p.M = M;
  p.nch = nch;
  p.cost = std::move(cost);
  p.gram = gram;
  std::lock_guard<std::mutex> guard(g_lock);
  g_plans.push_back(std::move(p));
  return (int64_t)g_plans.size() - 1;
}

// A gram plan's norms_kernel (fastpath.py): (CUfunction, grid (unused: set per launch), block).
void set_norms(int64_t id, std::vector<int64_t> k) {
  const Kernel n = kernel_of(k);
  std::lock_guard<std::mutex> guard(g_lock);
  TORCH_CHECK(id >= 0 && id < (int64_t)g_plans.size(), "softdtw fast path: unknown plan ", id);
  g_plans[id].norms = n;
}

// A small gram plan's gram_xy_kernel and gram_grads_kernel (fastpath.py; backends/cuda/__init__.py, own_gram_gemm),
// each (CUfunction, grid (unused: set per launch), block).
void set_gram_gemm(int64_t id, std::vector<int64_t> xy, std::vector<int64_t> grads) {
  const Kernel a = kernel_of(xy), b = kernel_of(grads);
  std::lock_guard<std::mutex> guard(g_lock);
  TORCH_CHECK(id >= 0 && id < (int64_t)g_plans.size(), "softdtw fast path: unknown plan ", id);
  TORCH_CHECK(g_plans[id].gram,
              "softdtw fast path: set_gram_gemm on a plan that is not gram (a bug, please report it).");
  g_plans[id].gram_xy = a;
  g_plans[id].gram_grads = b;
}

// A chained plan (fastpath.py): its tiles' stagger and the sizes of its zeroed sync (int32) and ws (int64) buffers.
void set_chain(int64_t id, int64_t stagger, int64_t sync_numel, int64_t ws_numel) {
  std::lock_guard<std::mutex> guard(g_lock);
  TORCH_CHECK(id >= 0 && id < (int64_t)g_plans.size(), "softdtw fast path: unknown plan ", id);
  Plan& p = g_plans[id];
  p.chain = true;
  p.stagger = stagger;
  p.sync_numel = sync_numel;
  p.ws_numel = ws_numel;
}

// A two-ended plan (fastpath.py, after add_plan and, chained, set_chain): its three kernels (CUfunction, grid (unused:
// set per launch), block), the call's pairs and rows, and where the forward's end values start in saved (bytes).
void set_two_ended(int64_t id, std::vector<int64_t> in, std::vector<int64_t> seed, std::vector<int64_t> grads,
                   int64_t B1, int64_t N1, int64_t end_off) {
  std::lock_guard<std::mutex> guard(g_lock);
  TORCH_CHECK(id >= 0 && id < (int64_t)g_plans.size(), "softdtw fast path: unknown plan ", id);
  Plan& p = g_plans[id];
  p.two = true;
  p.te_in = kernel_of(in);
  p.te_seed = kernel_of(seed);
  p.te_grads = kernel_of(grads);
  p.B1 = B1;
  p.N1 = N1;
  p.end_off = end_off;
}

// A plan whose backward runs ahead (fastpath.py's _set_ahead): scale_grads_kernel (CUfunction, grid (unused: set per
// launch), block; ignored for a two-ended plan, whose te_grads scales) and the address of its (B,) ones.
// false, changing nothing, for a plan whose backward is not one kernel over the stored table (gram, chained,
// checkpointed).
bool set_ahead(int64_t id, std::vector<int64_t> scale, int64_t ones) {
  std::lock_guard<std::mutex> guard(g_lock);
  TORCH_CHECK(id >= 0 && id < (int64_t)g_plans.size(), "softdtw fast path: unknown plan ", id);
  Plan& p = g_plans[id];
  if (p.gram || p.chain || p.TH > 0) return false;
  p.ahead = true;
  p.scale = kernel_of(scale);
  p.ones = ones;
  return true;
}

// A checkpointed plan (fastpath.py; after set_chain): its tiles' rows TH and the column checkpoints' length.
void set_checkpoint(int64_t id, int64_t TH, int64_t col_numel) {
  std::lock_guard<std::mutex> guard(g_lock);
  TORCH_CHECK(id >= 0 && id < (int64_t)g_plans.size(), "softdtw fast path: unknown plan ", id);
  Plan& p = g_plans[id];
  p.TH = TH;
  p.col_numel = col_numel;
}

// A plan's lengths_kernel (check.cu, on the plan's device; fastpath.py): (CUfunction, block).
void set_lengths(int64_t id, int64_t fn, int64_t block) {
  std::lock_guard<std::mutex> guard(g_lock);
  TORCH_CHECK(id >= 0 && id < (int64_t)g_plans.size(), "softdtw fast path: unknown plan ", id);
  Kernel& k = g_plans[id].lengths;
  k.fn = (void*)(uintptr_t)fn;
  k.block = (unsigned)block;
}

void set_driver(int64_t launch, int64_t ctx_get, int64_t ctx_set) {
  g_launch = (LaunchFn)(uintptr_t)launch;
  g_ctx_get = (CtxFn)(uintptr_t)ctx_get;
  g_ctx_set = (SetCtxFn)(uintptr_t)ctx_set;
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "softdtw's eager cuda launcher (softdtw/backends/cuda/fastpath.py)";
  m.def("set_driver", &set_driver, "the addresses of the driver's cuLaunchKernel, cuCtxGetCurrent, cuCtxSetCurrent");
  m.def("add_plan", &add_plan, "register one shape's launches; returns its id");
  m.def("fused", &fused, "soft-DTW values (B,) with a C++ autograd node");
  m.def("dilate", &dilate, "DILATE losses (B,) with a C++ autograd node");
  m.def("divergence", &divergence, "soft-DTW divergences (B,): three fused terms, one value check");
  m.def("set_hvp", &set_hvp, "the hvp kernel of a DILATE plan");
  m.def("set_norms", &set_norms, "the norms kernel of a gram plan");
  m.def("set_gram_gemm", &set_gram_gemm, "a small gram plan's own GEMM kernels (kernels/gram_gemm.cu)");
  m.def("set_chain", &set_chain, "make a plan chained (forward_chain_kernel, backward_chain_kernel)");
  m.def("set_checkpoint", &set_checkpoint, "make a chained gram plan a checkpointed one (one band of rows)");
  m.def("set_two_ended", &set_two_ended, "make a plan a two-ended one (the halves of each pair's rows)");
  m.def("set_ahead", &set_ahead, "make a storing plan run its backward in its forward (grad 1), scaled when asked");
  m.def("set_lengths", &set_lengths, "the lengths kernel of a plan (calls with per-pair lengths)");
  m.def("set_dilate_xy", &set_dilate_xy, "a DILATE plan through dilate_xy_kernel");
  m.def("register_ops", &register_ops, "the CUDA kernels of softdtw::forward and softdtw::backward");
  m.def("set_ops_enabled", &set_ops_enabled, "off: every op call runs the Python kernel");
  m.def("set_grad_fn", &set_grad_fn, "the create_graph=True backward of the launcher's node (softdtw._ops)");
  m.def("op_counts", &op_counts, "[op calls the C++ kernels ran, op calls handed to the Python kernel]");
}
