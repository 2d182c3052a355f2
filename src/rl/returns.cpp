// Return and advantage estimators (tensordict/returns.h): the functions on
// tensors (their TensorDict form, ValueEstimator, and multi_step are in
// value_estimator.cpp).
//
// Every estimator reads its inputs as contiguous CPU memory viewed as
// `[outer, T, inner]` (the dims before the time dim, the time dim, the dims
// after it: no transpose for any time dim) and runs its reverse-time
// recurrence as a plain loop, the running value of each of the `inner`
// columns in one double array. A loop of per-step tensor ops would cost T
// dispatches of several ops each (about 100x slower at T = 2048).
#include "tensordict/returns.h"

#include <ATen/ATen.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <string>
#include <utility>
#include <vector>

#include "core/internal.h"

// The columns of a step are independent and the outputs never alias the
// inputs or the running values (all allocated here): GCC may vectorize the
// loop without checking.
#if defined(__GNUC__) && !defined(__clang__)
#define TENSORDICT_IVDEP _Pragma("GCC ivdep")
#else
#define TENSORDICT_IVDEP
#endif

namespace tensordict {

namespace {

using detail::dtype_name;
using detail::shape_str;

// An estimator's inputs: checked against a reference tensor (the one whose
// shape every input must have) and read as contiguous CPU memory in the
// compute dtype.
class Inputs {
 public:
  Inputs(const char* fn, const at::Tensor& ref, const char* ref_name,
         int64_t time_dim)
      : fn_(fn), ref_name_(ref_name) {
    TORCH_CHECK(ref.defined(), fn, ": ", ref_name, " is an undefined tensor");
    TORCH_CHECK_TYPE(at::isFloatingType(ref.scalar_type()), fn, ": ", ref_name,
                     " must be a floating-point tensor, got ",
                     dtype_name(ref.scalar_type()));
    const int64_t nd = ref.dim();
    TORCH_CHECK(nd >= 1, fn, ": ", ref_name,
                " must have a time dim, got shape [] (a 0-dim tensor)");
    TORCH_CHECK_INDEX(time_dim >= -nd && time_dim < nd, fn, ": time_dim ",
                      time_dim, " is out of range for ", ref_name, " of shape ",
                      shape_str(ref.sizes()), " (expected a dim in [", -nd,
                      ", ", nd - 1, "])");
    const int64_t dim = time_dim < 0 ? time_dim + nd : time_dim;
    sizes_ = ref.sizes().vec();
    steps_ = sizes_[static_cast<size_t>(dim)];
    for (int64_t i = 0; i < dim; ++i) outer_ *= sizes_[static_cast<size_t>(i)];
    for (int64_t i = dim + 1; i < nd; ++i) {
      inner_ *= sizes_[static_cast<size_t>(i)];
    }
    out_dtype_ = ref.scalar_type();
    dtype_ = out_dtype_ == at::kDouble ? at::kDouble : at::kFloat;
    out_device_ = ref.device();
  }

  // A real-valued input: defined, shaped like the reference, floating point.
  at::Tensor real(const at::Tensor& t, const char* name) const {
    check_shape(t, name);
    TORCH_CHECK_TYPE(at::isFloatingType(t.scalar_type()), fn_, ": ", name,
                     " must be a floating-point tensor, got ",
                     dtype_name(t.scalar_type()));
    return readable(t, dtype_);
  }

  // A flag: a bool tensor shaped like the reference (any dtype, non-zero
  // true, when `numeric` is set).
  at::Tensor flag(const at::Tensor& t, const char* name,
                  bool numeric = false) const {
    check_shape(t, name);
    TORCH_CHECK_TYPE(numeric || t.scalar_type() == at::kBool, fn_, ": ", name,
                     " must be a bool tensor, got ",
                     dtype_name(t.scalar_type()));
    return readable(t, at::kBool);
  }

  // A per-step parameter (a tensor `gamma` or `lambda`): real, and a 0-dim
  // tensor or one that broadcasts to the reference's shape (TorchRL's
  // `expand`); read expanded to that shape, as contiguous CPU memory.
  at::Tensor param(const at::Tensor& t, const char* name) const {
    TORCH_CHECK(t.defined(), fn_, ": ", name, " is an undefined tensor");
    TORCH_CHECK_TYPE(at::isFloatingType(t.scalar_type()) ||
                         at::isIntegralType(t.scalar_type(),
                                            /*includeBool=*/false),
                     fn_, ": ", name, " must be a real tensor, got ",
                     dtype_name(t.scalar_type()));
    TORCH_CHECK(at::is_expandable_to(t.sizes(), sizes_), fn_, ": ", name,
                " of shape ", shape_str(t.sizes()), " does not broadcast to ",
                ref_name_, "'s shape ", shape_str(sizes_));
    return readable(t.expand(sizes_), dtype_);
  }

  // A new result of the reference's shape, in the compute dtype.
  at::Tensor result() const {
    return at::empty(sizes_, at::TensorOptions().dtype(dtype_));
  }
  // The dtype the inputs are read in: double for double references, float
  // for the others (half and bfloat16 are widened); the arithmetic is in
  // double either way.
  at::ScalarType dtype() const { return dtype_; }
  // `r` in the reference's dtype and device.
  at::Tensor out(const at::Tensor& r) const {
    if (r.scalar_type() == out_dtype_ && out_device_.is_cpu()) return r;
    return r.to(out_device_, out_dtype_);
  }

  int64_t outer() const { return outer_; }
  int64_t steps() const { return steps_; }
  int64_t inner() const { return inner_; }

 private:
  // `t` as contiguous CPU memory of `dtype`: `t` itself when it is that
  // already (only read, so its autograd state does not matter), else a copy.
  static at::Tensor readable(const at::Tensor& t, at::ScalarType dtype) {
    if (t.is_cpu() && t.scalar_type() == dtype && t.is_contiguous()) return t;
    return t.detach().to(at::kCPU, dtype).contiguous();
  }

  void check_shape(const at::Tensor& t, const char* name) const {
    TORCH_CHECK(t.defined(), fn_, ": ", name, " is an undefined tensor");
    TORCH_CHECK(t.sizes() == c10::IntArrayRef(sizes_), fn_, ": ", name,
                " has shape ", shape_str(t.sizes()), ", expected ", ref_name_,
                "'s shape ", shape_str(sizes_));
  }

  const char* fn_;
  const char* ref_name_;
  std::vector<int64_t> sizes_;
  int64_t outer_ = 1;
  int64_t steps_ = 0;
  int64_t inner_ = 1;
  at::ScalarType out_dtype_;
  at::ScalarType dtype_;
  at::Device out_device_ = at::kCPU;
};

// 1 for false, 0 for true: TorchRL's `(~flag).int()`, as a factor (the
// loops multiply by flags as TorchRL does, which also lets them vectorize).
template <typename T>
T not_flag(bool b) {
  return b ? T(0) : T(1);
}

template <typename T>
const T* ptr(const at::Tensor& t) {
  return t.data_ptr<T>();
}
template <typename T>
T* out_ptr(at::Tensor& t) {
  return t.data_ptr<T>();
}

// A discount or lambda: one value (`Fixed`) or one per element of the
// inputs (`PerStep`, a tensor parameter), read as `p[i]`.
template <typename T>
struct Fixed {
  T value;
  T operator[](int64_t /*i*/) const { return value; }
};
template <typename T>
struct PerStep {
  const T* values;
  T operator[](int64_t i) const { return values[i]; }
};
// `1 - p`, as the same kind of parameter (computed once for `Fixed`).
template <typename T>
struct OneMinus {
  const T* values;
  T operator[](int64_t i) const { return T(1) - values[i]; }
};
template <typename T>
Fixed<T> one_minus(Fixed<T> p) {
  return {T(1) - p.value};
}
template <typename T>
OneMinus<T> one_minus(PerStep<T> p) {
  return {p.values};
}

// Calls `step(t, off)` for t = T-1 .. 0 of every outer slice, `off` the
// offset of (o, t, 0); `start(off)` first, at the start of each slice, with
// the offset of its last step.
template <typename Start, typename Step>
void reverse_scan(const Inputs& in, Start start, Step step) {
  const int64_t steps = in.steps();
  const int64_t inner = in.inner();
  if (steps == 0) return;
  for (int64_t o = 0; o < in.outer(); ++o) {
    const int64_t base = o * steps * inner;
    start(base + (steps - 1) * inner);
    for (int64_t t = steps - 1; t >= 0; --t) step(t, base + t * inner);
  }
}

// One step of GAE over the `inner` columns at `off`, `acc` the running
// advantages: the columns across SIMD lanes, with TorchRL's arithmetic (flags
// as factors). The pointers never overlap (`__restrict`) and the flags are
// read as bytes: without both, GCC does not vectorize the loop.
template <typename T>
void gae_step(int64_t off, int64_t inner, const T* __restrict rp,
              const T* __restrict vp, const T* __restrict nvp,
              const uint8_t* __restrict dp, const uint8_t* __restrict tp,
              T* __restrict ap, T* __restrict gp, T* __restrict acc, T gamma,
              T gl) {
  TENSORDICT_IVDEP
  for (int64_t j = 0; j < inner; ++j) {
    const int64_t i = off + j;
    const T vi = vp[i];
    // TorchRL's `(~flag).int()` as a factor, 0 for any nonzero byte (`min`
    // vectorizes where a compare or a select does not).
    const T not_t = static_cast<T>(1 - std::min<int>(tp[i], 1));
    const T not_d = static_cast<T>(1 - std::min<int>(dp[i], 1));
    const T delta = rp[i] + gamma * not_t * nvp[i] - vi;
    const T a = delta + acc[j] * (gl * not_d);
    acc[j] = a;
    ap[i] = a;
    gp[i] = a + vi;
  }
}

// GAE over one column (a time dim with nothing after it): a chain of
// dependent multiply-adds, which only an episode end breaks (a done step's
// advantage does not read the next one). `run` cuts the steps of a slice
// at up to three episode ends near its quarters and runs the four pieces
// interleaved, so that their chains overlap in the CPU; each piece is
// computed exactly as the one chain would, so the values are the same. A
// branch on the rare episode end is cheaper than a multiply here.
template <typename T>
struct GaeColumn {
  const T *rp, *vp, *nvp;
  const bool *dp, *tp;
  T *ap, *gp;
  T gamma, gl;

  // The advantage at `i` from `next`, the advantage of the step after it.
  T step(int64_t i, T next) const {
    const T vi = vp[i];
    const T boot = tp[i] ? T(0) : nvp[i];
    const T delta = rp[i] + gamma * boot - vi;
    const T a = dp[i] ? delta : delta + gl * next;
    ap[i] = a;
    gp[i] = a + vi;
    return a;
  }

  // The `steps` steps at `base`.
  void run(int64_t base, int64_t steps) const {
    constexpr int kPieces = 4;
    // Piece c: steps bottom[c] .. top[c], run from the top down. Every top
    // but the last is an episode end, so no piece reads another's result.
    std::array<int64_t, kPieces> bottom{}, top{};
    int m = 0;
    int64_t lo = 0;
    for (int c = 1; c < kPieces; ++c) {
      int64_t s = std::max(lo, steps * c / kPieces);
      while (s < steps - 1 && !dp[base + s]) ++s;
      if (s >= steps - 1) break;
      bottom[m] = lo;
      top[m++] = s;
      lo = s + 1;
    }
    bottom[m] = lo;
    top[m++] = steps - 1;
    std::array<T, kPieces> acc{};
    int64_t len = 0;
    if (m == kPieces) {
      len = top[0] - bottom[0] + 1;
      for (int c = 1; c < kPieces; ++c)
        len = std::min(len, top[c] - bottom[c] + 1);
      T a0 = 0, a1 = 0, a2 = 0, a3 = 0;
      for (int64_t k = 0; k < len; ++k) {
        a0 = step(base + top[0] - k, a0);
        a1 = step(base + top[1] - k, a1);
        a2 = step(base + top[2] - k, a2);
        a3 = step(base + top[3] - k, a3);
      }
      acc = {a0, a1, a2, a3};
    }
    for (int c = 0; c < m; ++c) {
      T a = acc[static_cast<size_t>(c)];
      for (int64_t t = top[c] - len; t >= bottom[c]; --t) a = step(base + t, a);
    }
  }
};

}  // namespace

AdvantageEstimate gae(const at::Tensor& reward, const at::Tensor& value,
                      const at::Tensor& next_value, const at::Tensor& done,
                      const at::Tensor& terminated, double gamma, double lambda,
                      int64_t time_dim) {
  const Inputs in("gae", value, "value", time_dim);
  const at::Tensor r = in.real(reward, "reward");
  const at::Tensor v = in.real(value, "value");
  const at::Tensor nv = in.real(next_value, "next_value");
  const at::Tensor d = in.flag(done, "done", /*numeric=*/true);
  const at::Tensor term = in.flag(terminated, "terminated", /*numeric=*/true);
  at::Tensor adv = in.result();
  at::Tensor tgt = in.result();
  AT_DISPATCH_FLOATING_TYPES(in.dtype(), "gae", [&] {
    const auto gamma_t = static_cast<scalar_t>(gamma);
    const scalar_t *rp = ptr<scalar_t>(r), *vp = ptr<scalar_t>(v),
                   *nvp = ptr<scalar_t>(nv);
    scalar_t *ap = out_ptr<scalar_t>(adv), *gp = out_ptr<scalar_t>(tgt);
    const int64_t inner = in.inner();
    const auto gl = static_cast<scalar_t>(gamma * lambda);
    if (inner == 1) {
      const GaeColumn<scalar_t> column{
          rp, vp, nvp, ptr<bool>(d), ptr<bool>(term), ap, gp, gamma_t, gl};
      for (int64_t o = 0; o < in.outer(); ++o) {
        column.run(o * in.steps(), in.steps());
      }
      return;
    }
    const auto* d8 = static_cast<const uint8_t*>(d.data_ptr());
    const auto* t8 = static_cast<const uint8_t*>(term.data_ptr());
    std::vector<scalar_t> acc_v(static_cast<size_t>(inner));
    scalar_t* const acc = acc_v.data();
    reverse_scan(
        in, [&](int64_t) { std::fill(acc, acc + inner, scalar_t(0)); },
        [=](int64_t, int64_t off) {
          gae_step(off, inner, rp, vp, nvp, d8, t8, ap, gp, acc, gamma_t, gl);
        });
  });
  return {in.out(adv), in.out(tgt)};
}

namespace {

// A `gamma` or `lambda` argument: a number, or a tensor that broadcasts to
// the inputs (TorchRL's `float | Tensor`, one value per step).
struct Param {
  // NOLINTNEXTLINE(google-explicit-constructor)
  Param(double v) : value(v) {}
  // NOLINTNEXTLINE(google-explicit-constructor)
  Param(const at::Tensor& t) : tensor(t), is_tensor(true) {}
  double value = 0.0;
  at::Tensor tensor;
  bool is_tensor = false;  // a tensor parameter (`tensor` may be undefined)
};

// Calls `f(p)` with `p` the parameter as `Fixed`, or as `PerStep` over
// `read` (`param.tensor` read by `Inputs::param`).
template <typename T, typename F>
void with_param(const Param& param, const at::Tensor& read, F f) {
  if (read.defined()) {
    f(PerStep<T>{ptr<T>(read)});
  } else {
    f(Fixed<T>{static_cast<T>(param.value)});
  }
}

// `Inputs::param` of a tensor parameter; undefined for a number.
at::Tensor read_param(const Inputs& in, const Param& p, const char* name) {
  return p.is_tensor ? in.param(p.tensor, name) : at::Tensor();
}

at::Tensor td0(const Param& gamma, const at::Tensor& next_value,
               const at::Tensor& reward, const at::Tensor& terminated) {
  const Inputs in("td0_return", next_value, "next_value", -1);
  const at::Tensor nv = in.real(next_value, "next_value");
  const at::Tensor r = in.real(reward, "reward");
  const at::Tensor term = in.flag(terminated, "terminated");
  const at::Tensor gm = read_param(in, gamma, "gamma");
  at::Tensor ret = in.result();
  AT_DISPATCH_FLOATING_TYPES(in.dtype(), "td0_return", [&] {
    const scalar_t *nvp = ptr<scalar_t>(nv), *rp = ptr<scalar_t>(r);
    const bool* tp = ptr<bool>(term);
    scalar_t* gp = out_ptr<scalar_t>(ret);
    const int64_t n = ret.numel();
    with_param<scalar_t>(gamma, gm, [&](auto g) {
      for (int64_t i = 0; i < n; ++i) {
        gp[i] = rp[i] + (tp[i] ? scalar_t(0) : g[i] * nvp[i]);
      }
    });
  });
  return in.out(ret);
}

// One step of TD(lambda) over the `inner` columns at `off`, `g` the running
// returns. The pointers never overlap (`__restrict`), so GCC can put the
// columns across SIMD lanes, the selects included.
template <typename T, typename G, typename L, typename K>
void lambda_step(int64_t off, int64_t inner, const T* __restrict rp,
                 const T* __restrict nvp, const uint8_t* __restrict dp,
                 const uint8_t* __restrict tp, T* __restrict gp,
                 T* __restrict g, G gam, L lam, K keep) {
  TENSORDICT_IVDEP
  for (int64_t j = 0; j < inner; ++j) {
    const int64_t i = off + j;
    const T nvi = nvp[i];
    const T acc = g[j];
    const T boot = tp[i] != 0 ? T(0) : nvi;
    const T next = dp[i] != 0 ? boot : acc;
    const T x = rp[i] + gam[i] * (keep[i] * boot + lam[i] * next);
    g[j] = x;
    gp[i] = x;
  }
}

// TD(lambda), and TD(1) as its lambda = 1 case: the two agree wherever a
// terminated step is also done, and TD(1) (`td1`) counts a terminated step
// as done, as TorchRL's td1_return_estimate does.
at::Tensor lambda_return(const char* fn, const Param& gamma,
                         const Param& lambda, const at::Tensor& next_value,
                         const at::Tensor& reward, const at::Tensor& done,
                         const at::Tensor& terminated, int64_t time_dim,
                         bool td1) {
  const Inputs in(fn, next_value, "next_value", time_dim);
  const at::Tensor nv = in.real(next_value, "next_value");
  const at::Tensor r = in.real(reward, "reward");
  at::Tensor d = in.flag(done, "done");
  const at::Tensor term =
      terminated.defined() ? in.flag(terminated, "terminated") : d;
  const at::Tensor gm = read_param(in, gamma, "gamma");
  const at::Tensor lm = read_param(in, lambda, "lambda");
  if (td1 && terminated.defined()) d = d.logical_or(term);
  at::Tensor ret = in.result();
  AT_DISPATCH_FLOATING_TYPES(in.dtype(), "lambda_return", [&] {
    const scalar_t *nvp = ptr<scalar_t>(nv), *rp = ptr<scalar_t>(r);
    // The flags as bytes (bool loads keep GCC from vectorizing).
    const auto* d8 = static_cast<const uint8_t*>(d.data_ptr());
    const auto* t8 = static_cast<const uint8_t*>(term.data_ptr());
    scalar_t* gp = out_ptr<scalar_t>(ret);
    const int64_t inner = in.inner();
    std::vector<scalar_t> g_v(static_cast<size_t>(inner));
    scalar_t* const g = g_v.data();
    with_param<scalar_t>(gamma, gm, [&](auto gam) {
      with_param<scalar_t>(lambda, lm, [&](auto lam) {
        const auto keep = one_minus(lam);
        reverse_scan(
            in,
            [&](int64_t last) {
              for (int64_t j = 0; j < inner; ++j) {
                g[j] = nvp[last + j] * not_flag<scalar_t>(t8[last + j] != 0);
              }
            },
            [=](int64_t, int64_t off) {
              lambda_step(off, inner, rp, nvp, d8, t8, gp, g, gam, lam, keep);
            });
      });
    });
  });
  return in.out(ret);
}

}  // namespace

at::Tensor td0_return(double gamma, const at::Tensor& next_value,
                      const at::Tensor& reward, const at::Tensor& terminated) {
  return td0(gamma, next_value, reward, terminated);
}

at::Tensor td0_return(const at::Tensor& gamma, const at::Tensor& next_value,
                      const at::Tensor& reward, const at::Tensor& terminated) {
  return td0(gamma, next_value, reward, terminated);
}

at::Tensor td1_return(double gamma, const at::Tensor& next_value,
                      const at::Tensor& reward, const at::Tensor& done,
                      const at::Tensor& terminated, int64_t time_dim) {
  return lambda_return("td1_return", gamma, 1.0, next_value, reward, done,
                       terminated, time_dim, /*td1=*/true);
}

at::Tensor td1_return(const at::Tensor& gamma, const at::Tensor& next_value,
                      const at::Tensor& reward, const at::Tensor& done,
                      const at::Tensor& terminated, int64_t time_dim) {
  return lambda_return("td1_return", gamma, 1.0, next_value, reward, done,
                       terminated, time_dim, /*td1=*/true);
}

at::Tensor td_lambda_return(double gamma, double lambda,
                            const at::Tensor& next_value,
                            const at::Tensor& reward, const at::Tensor& done,
                            const at::Tensor& terminated, int64_t time_dim) {
  return lambda_return("td_lambda_return", gamma, lambda, next_value, reward,
                       done, terminated, time_dim, /*td1=*/false);
}

at::Tensor td_lambda_return(const at::Tensor& gamma, const at::Tensor& lambda,
                            const at::Tensor& next_value,
                            const at::Tensor& reward, const at::Tensor& done,
                            const at::Tensor& terminated, int64_t time_dim) {
  return lambda_return("td_lambda_return", gamma, lambda, next_value, reward,
                       done, terminated, time_dim, /*td1=*/false);
}

AdvantageEstimate vtrace(double gamma, const at::Tensor& log_pi,
                         const at::Tensor& log_mu, const at::Tensor& value,
                         const at::Tensor& next_value, const at::Tensor& reward,
                         const at::Tensor& done, const at::Tensor& terminated,
                         double rho_thresh, double c_thresh, int64_t time_dim) {
  const Inputs in("vtrace", value, "value", time_dim);
  const at::Tensor lpi = in.real(log_pi, "log_pi");
  const at::Tensor lmu = in.real(log_mu, "log_mu");
  const at::Tensor v = in.real(value, "value");
  const at::Tensor nv = in.real(next_value, "next_value");
  const at::Tensor r = in.real(reward, "reward");
  const at::Tensor d = in.flag(done, "done");
  const at::Tensor term =
      terminated.defined() ? in.flag(terminated, "terminated") : d;
  // The importance weights in one vectorized pass (LibTorch's exp uses the
  // CPU's widest SIMD; a scalar exp per step would cost most of the loop).
  const at::Tensor ratio = at::sub(lpi, lmu).exp_();
  at::Tensor adv = in.result();
  at::Tensor vs = in.result();
  AT_DISPATCH_FLOATING_TYPES(in.dtype(), "vtrace", [&] {
    const auto gamma_t = static_cast<scalar_t>(gamma);
    const auto rho_t = static_cast<scalar_t>(rho_thresh);
    const auto c_t = static_cast<scalar_t>(c_thresh);
    const scalar_t *rhop = ptr<scalar_t>(ratio), *vp = ptr<scalar_t>(v),
                   *nvp = ptr<scalar_t>(nv), *rp = ptr<scalar_t>(r);
    const bool *dp = ptr<bool>(d), *tp = ptr<bool>(term);
    scalar_t *ap = out_ptr<scalar_t>(adv), *sp = out_ptr<scalar_t>(vs);
    const int64_t inner = in.inner();
    const int64_t steps = in.steps();
    // acc: v_{t+1} - value_{t+1}; vnext: v_{t+1}.
    std::vector<scalar_t> acc_v(static_cast<size_t>(inner));
    scalar_t* const acc = acc_v.data();
    std::vector<scalar_t> vnext_v(static_cast<size_t>(inner));
    scalar_t* const vnext = vnext_v.data();
    reverse_scan(
        in,
        [&](int64_t) {
          std::fill(acc, acc + inner, scalar_t(0));
          std::fill(vnext, vnext + inner, scalar_t(0));
        },
        [=](int64_t t, int64_t off) {
          const bool last = t == steps - 1;
          for (int64_t j = 0; j < inner; ++j) {
            const int64_t i = off + j;
            const scalar_t vi = vp[i];
            const scalar_t nvi = nvp[i];
            const scalar_t ri = rp[i];
            const scalar_t rho = rhop[i];
            const scalar_t crho = std::min(rho, rho_t);
            const scalar_t cc = std::min(rho, c_t);
            const scalar_t disc = gamma_t * not_flag<scalar_t>(tp[i]);
            const scalar_t delta = crho * (ri + disc * nvi - vi);
            const scalar_t a =
                delta + gamma_t * not_flag<scalar_t>(dp[i]) * cc * acc[j];
            const scalar_t vn = vnext[j];
            const scalar_t boot = dp[i] || last ? nvi : vn;
            ap[i] = crho * (ri + disc * boot - vi);
            acc[j] = a;
            const scalar_t vsi = a + vi;
            vnext[j] = vsi;
            sp[i] = vsi;
          }
        });
  });
  return {in.out(adv), in.out(vs)};
}

at::Tensor reward_to_go(const at::Tensor& reward, const at::Tensor& done,
                        double gamma, int64_t time_dim) {
  const Inputs in("reward_to_go", reward, "reward", time_dim);
  const at::Tensor r = in.real(reward, "reward");
  const at::Tensor d = in.flag(done, "done");
  at::Tensor ret = in.result();
  AT_DISPATCH_FLOATING_TYPES(in.dtype(), "reward_to_go", [&] {
    const auto gamma_t = static_cast<scalar_t>(gamma);
    const scalar_t* rp = ptr<scalar_t>(r);
    const bool* dp = ptr<bool>(d);
    scalar_t* gp = out_ptr<scalar_t>(ret);
    const int64_t inner = in.inner();
    std::vector<scalar_t> g_v(static_cast<size_t>(inner));
    scalar_t* const g = g_v.data();
    reverse_scan(
        in, [&](int64_t) { std::fill(g, g + inner, scalar_t(0)); },
        [=](int64_t, int64_t off) {
          for (int64_t j = 0; j < inner; ++j) {
            const int64_t i = off + j;
            const scalar_t x =
                rp[i] + gamma_t * not_flag<scalar_t>(dp[i]) * g[j];
            g[j] = x;
            gp[i] = x;
          }
        });
  });
  return in.out(ret);
}

}  // namespace tensordict
