// Group-relative advantages (GRPO, Dr. GRPO, RLOO, per-role) over a flat batch of rewards.
// Float64 accumulation, two-pass variance. Two paths: contiguous equal-size groups with increasing ids
// (the usual GRPO layout: G rollouts of a task side by side) stream block by block, in parallel, near
// memory speed; any other layout goes through dense group indexing. Both give the same numbers.
//
// Range: every finite reward is valid, subnormals to the float64 maximum. Both paths run the plain
// formulas and redo a group whose sum of squares is not finite (or, with eps ~ 0, too small to trust) on
// r * 2^-e, e the exponent of its largest |r|, where no sum or square overflows or underflows to 0.
// Scaling by a power of two is exact, so ordinary rewards get the plain formulas' results bit for bit.
// An advantage that does not fit the output dtype (dr_grpo of rewards near the float64 maximum, or
// float32 output) is a kOverflow error unless clip bounds it.
#pragma once

#include <climits>
#include <cstring>
#include <limits>
#include <type_traits>

#include "common.hpp"

namespace parasim {

enum class AdvMethod : int { kGrpo = 0, kDrGrpo = 1, kRloo = 2, kPerRole = 3 };
enum class AdvScale : int { kGroup = 0, kBatch = 1, kNone = 2 };

struct AdvParams {
  AdvMethod method = AdvMethod::kGrpo;
  AdvScale scale = AdvScale::kGroup;
  bool unbiased = true;
  double eps = 1e-6;
  bool has_clip = false;
  double clip = 0.0;
  bool has_min_std = false;
  double min_std = 0.0;
};

// 2^e for -1022 <= e <= 1023, from its bits: std::ldexp is a libm call, paid per unit on the general path.
inline double pow2(int e) {
  const uint64_t bits = static_cast<uint64_t>(e + 1023) << 52;
  double v;
  std::memcpy(&v, &bits, sizeof v);
  return v;
}

// Multiplication by 2^e as two products by powers of two that are doubles: exact (or, for a subnormal
// result, correctly rounded) for |e| <= 1022, where the second factor is 1; the callers' exponents stay
// within [-2048, 2046], where the split is still exact up to the subnormal range.
struct Pow2 {
  double lo = 1.0, hi = 1.0;
  Pow2() = default;
  explicit Pow2(int e) {
    const int a = std::min(std::max(e, -1022), 1023);
    lo = pow2(a);
    hi = e == a ? 1.0 : std::ldexp(1.0, e - a);
  }
  double operator()(double x) const { return x * lo * hi; }
};

// Exponent e with max |r| < 2^e (-1022 at least, so that 2^-e is a double): r * 2^-e lies in (-1, 1) and is
// either 0 or at least 2^-52 in magnitude, so no square of a deviation overflows or underflows to 0.
inline int scale_exponent(double amax) {
  int e = 0;
  std::frexp(amax, &e);
  return std::max(e, -1022);
}

// 2^-e for a scale_exponent e (2^-1024 and 2^-1023 are subnormal: not from pow2's bits).
inline double inv_pow2(int e) { return e <= 1022 ? pow2(-e) : std::ldexp(1.0, -e); }

inline double group_std(double m2, int64_t count, bool unbiased) {
  const int64_t dof = unbiased ? count - 1 : count;
  return dof > 0 ? std::sqrt(m2 / static_cast<double>(dof)) : 0.0;
}

// One statistics unit (a group, or a (group, role) pair): count, e, and the mean and std of r * 2^-e.
struct UnitStats {
  int64_t count = 0;
  double mean = 0.0;
  double sd = 0.0;
  int e = 0;
};

// 1 / (std of all rewards + eps) = mult * 2^e for scale = batch, split so that neither part over- or underflows.
struct BatchScale {
  double mult = 1.0;
  int e = 0;
};

// A unit's advantage from its scaled deviation r * 2^-e - mean: times mult, then times 2^k (up).
struct UnitCoef {
  double mult = 0.0;
  Pow2 up;
};

inline UnitCoef unit_coef(const AdvParams& p, const UnitStats& s, const BatchScale& bs) {
  if (s.count <= 1) return {};  // a group of one has nothing to compare against
  double m = p.method == AdvMethod::kRloo ? static_cast<double>(s.count) / static_cast<double>(s.count - 1) : 1.0;
  if (p.scale == AdvScale::kBatch) {  // fold 2^k into mult where it stays a normal double: one product less
    const int k = s.e + bs.e;
    return k >= -1000 && k <= 450 ? UnitCoef{m * bs.mult * pow2(k), Pow2(0)} : UnitCoef{m * bs.mult, Pow2(k)};
  }
  if (p.scale == AdvScale::kNone) return {m, Pow2(s.e)};
  const double denom = s.sd + p.eps * inv_pow2(s.e);  // std + eps in the unit's scale, which cancels
  m = denom > 0.0 ? m / denom : 0.0;                    // eps = 0 and identical rewards: 0, not nan
  return {std::isfinite(m) ? m : 0.0, Pow2(0)};  // inf only when sd = 0 (every deviation 0) and eps underflowed
}

inline bool unit_kept(const AdvParams& p, const UnitStats& s) {
  return !p.has_min_std || !(Pow2(s.e)(s.sd) < p.min_std);  // a std past the float64 maximum is inf: kept
}

// Clip, then store in the output dtype; false when the value does not fit there (no silent inf).
template <class T>
inline bool store(const AdvParams& p, double a, T* out) {
  if (p.has_clip) a = std::min(std::max(a, -p.clip), p.clip);
  if (!(std::fabs(a) <= static_cast<double>(std::numeric_limits<T>::max()))) return false;
  *out = static_cast<T>(a);
  return true;
}

template <class T>
Status find_nonfinite(const T* r, int64_t b, int64_t e) {
  for (int64_t i = b; i < e; ++i)
    if (!std::isfinite(static_cast<double>(r[i]))) return {Status::kNonFinite, i};
  return Status::ok();
}

// The scale of the batch (std of all rewards, for scale = batch); also rejects non-finite rewards. The sum
// is taken unscaled (scaling it afterwards is exact) and again scaled only if it overflowed.
template <class T>
Status batch_scale(const T* r, int64_t n, const AdvParams& p, BatchScale* out) {
  const int t = num_threads();
  std::vector<double> sums(t, 0.0), maxs(t, 0.0);
  std::vector<Status> st(t);
  parallel_for(n, 1 << 16, [&](int k, int64_t b, int64_t e) {
    double s = 0.0, amax = 0.0;
    for (int64_t i = b; i < e; ++i) {
      s += static_cast<double>(r[i]);  // inf or nan anywhere makes the sum non-finite
      amax = std::max(amax, std::fabs(static_cast<double>(r[i])));
    }
    sums[k] = s;
    maxs[k] = amax;
    if (!std::isfinite(s)) st[k] = find_nonfinite(r, b, e);
  });
  Status bad = first_failure(st);
  if (!bad.is_ok()) return bad;
  double amax = 0.0, total = 0.0;
  for (int k = 0; k < t; ++k) amax = std::max(amax, maxs[k]), total += sums[k];
  const int eb = scale_exponent(amax);
  const double down = inv_pow2(eb);
  if (!std::isfinite(total)) {  // huge rewards: sum them scaled
    std::fill(sums.begin(), sums.end(), 0.0);
    parallel_for(n, 1 << 16, [&](int k, int64_t b, int64_t e) {
      double s = 0.0;
      for (int64_t i = b; i < e; ++i) s += static_cast<double>(r[i]) * down;
      sums[k] = s;
    });
    total = 0.0;
    for (double v : sums) total += v;
  } else {
    total *= down;
  }
  const double mean = n > 0 ? total / static_cast<double>(n) : 0.0;  // of r * 2^-eb
  std::fill(sums.begin(), sums.end(), 0.0);
  parallel_for(n, 1 << 16, [&](int k, int64_t b, int64_t e) {
    double m2 = 0.0;
    for (int64_t i = b; i < e; ++i) {
      const double d = static_cast<double>(r[i]) * down - mean;
      m2 += d * d;
    }
    sums[k] = m2;
  });
  double m2 = 0.0;
  for (double v : sums) m2 += v;
  const double sd = group_std(m2, n, p.unbiased);  // of r * 2^-eb: at most sqrt(2)
  int ee = 0;
  std::frexp(p.eps, &ee);
  const int ed = p.eps > 0.0 ? std::max(eb, ee) : eb;  // std + eps in units of 2^ed: neither term overflows
  const double denom = Pow2(eb - ed)(sd) + std::ldexp(p.eps, -ed);
  if (!(denom > 0.0)) {
    *out = {0.0, 0};  // identical rewards and eps = 0: advantages 0, not nan
    return Status::ok();
  }
  int k = 0;
  const double f = std::frexp(denom, &k);
  *out = {1.0 / f, -(k + ed)};
  return Status::ok();
}

// Below 2^-900 a sum of squares may have lost terms to underflow, and the mean rounding on the subnormal
// grid; that changes the result only when it is divided by something below 2^-450 (eps, the batch std) or
// compared with it (min_std), so only then are such units (blocks) rescaled. Otherwise every m2 >= 0 passes.
inline double m2_floor(const AdvParams& p, const BatchScale& bs) {
  const bool tiny = (p.scale == AdvScale::kGroup && p.eps < 0x1p-450) || (p.scale == AdvScale::kBatch && bs.e > 450) ||
                    (p.has_min_std && p.min_std > 0.0 && p.min_std < 0x1p-450);
  return tiny ? 0x1p-900 : 0.0;
}

// Pairwise sums for compile-time block sizes: a tree has log2(K) dependent adds instead of K, which is
// what bounds the per-block latency (and so the throughput) of the fast path.
template <int K, class T>
inline double tree_sum(const T* x) {
  if constexpr (K == 1) return static_cast<double>(x[0]);
  else return tree_sum<K / 2>(x) + tree_sum<K - K / 2>(x + K / 2);
}
template <int K, class T>
inline double tree_sq_dev(const T* x, double mean) {
  if constexpr (K == 1) {
    const double d = static_cast<double>(x[0]) - mean;
    return d * d;
  } else {
    return tree_sq_dev<K / 2>(x, mean) + tree_sq_dev<K - K / 2>(x + K / 2, mean);
  }
}

// Statistics of one contiguous run of g rewards in units of 2^e (e of its largest |r|).
template <class T>
Status run_stats(const T* x, int64_t g, int64_t base, bool unbiased, UnitStats* out) {
  double amax = 0.0;
  for (int64_t j = 0; j < g; ++j) {
    const double v = static_cast<double>(x[j]);
    if (!std::isfinite(v)) return {Status::kNonFinite, base + j};
    amax = std::max(amax, std::fabs(v));
  }
  UnitStats& s = *out;
  s.count = g;
  s.e = scale_exponent(amax);
  const double down = inv_pow2(s.e);
  double acc = 0.0;
  for (int64_t j = 0; j < g; ++j) acc += static_cast<double>(x[j]) * down;
  s.mean = acc / static_cast<double>(g);
  acc = 0.0;
  for (int64_t j = 0; j < g; ++j) {
    const double d = static_cast<double>(x[j]) * down - s.mean;
    acc += d * d;
  }
  s.sd = group_std(acc, g, unbiased);
  return Status::ok();
}

// A block of the fast path whose plain sum of squares is not finite (or not to be trusted), redone scaled.
template <class T>
[[gnu::noinline]] Status scaled_block(const T* x, int64_t g, int64_t base, const AdvParams& p, const BatchScale& bs,
                                      T* adv, uint8_t* keep) {
  UnitStats s;
  Status st = run_stats(x, g, base, p.unbiased, &s);
  if (!st.is_ok()) return st;
  const bool kp = unit_kept(p, s);
  const UnitCoef c = unit_coef(p, s, bs);
  const double down = inv_pow2(s.e);
  for (int64_t j = 0; j < g; ++j) {
    const double a = kp ? c.up((static_cast<double>(x[j]) * down - s.mean) * c.mult) : 0.0;
    if (!store(p, a, adv + j)) return {Status::kOverflow, base + j};
    keep[j] = kp;
  }
  return Status::ok();
}

// Blocks [b, e) of KG rewards each (KG compile-time, or g at run time when KG == 0), one group id per
// block and increasing across blocks. Parameters are copied to locals and pointers are restrict, so the
// compiler keeps them in registers across the output stores (a uint8 store may alias anything otherwise).
// A block whose sum of squares is not finite (non-finite or huge rewards) or below m2_min goes through
// scaled_block; float32 results past the float32 maximum are a kOverflow error.
template <int KG, bool kClip, class T, class I>
Status contiguous_blocks(const T* __restrict r, const I* __restrict gid, int64_t b, int64_t e, int64_t g,
                         const AdvParams p, const BatchScale bs, double m2_min, T* __restrict adv,
                         uint8_t* __restrict keep) {
  constexpr double kMaxT = static_cast<double>(std::numeric_limits<T>::max());
  const int64_t G = KG > 0 ? KG : g;
  const double inv_g = 1.0 / static_cast<double>(G);
  const int64_t dof = p.unbiased ? G - 1 : G;
  const double inv_dof = dof > 0 ? 1.0 / static_cast<double>(dof) : 0.0;
  const bool has_min = p.has_min_std;
  const double min_std = p.min_std, eps = p.eps, lo = -p.clip, hi = p.clip;
  double base_mult = (G <= 1) ? 0.0 : (p.method == AdvMethod::kRloo ? static_cast<double>(G) / (G - 1) : 1.0);
  if (p.scale == AdvScale::kBatch) base_mult *= std::ldexp(bs.mult, bs.e);
  const bool by_group = p.scale == AdvScale::kGroup;
  for (int64_t blk = b; blk < e; ++blk) {
    const int64_t base = blk * G;
    const T* __restrict x = r + base;
    const I* __restrict ids = gid + base;
    const I id = ids[0];
    if (base > 0 && !(gid[base - 1] < id)) return {Status::kFallback, base};
    bool same = true;
    for (int64_t j = 0; j < G; ++j) same &= (ids[j] == id);
    if (!same) return {Status::kFallback, base};
    double s = 0.0;
    if constexpr (KG > 0) {
      s = tree_sum<KG>(x);
    } else {
      for (int64_t j = 0; j < G; ++j) s += static_cast<double>(x[j]);
    }
    const double mean = s * inv_g;
    double m2 = 0.0;
    if constexpr (KG > 0) {
      m2 = tree_sq_dev<KG>(x, mean);
    } else {
      for (int64_t j = 0; j < G; ++j) {
        const double d = static_cast<double>(x[j]) - mean;
        m2 += d * d;
      }
    }
    if (__builtin_expect(!(m2 >= m2_min && m2 <= std::numeric_limits<double>::max()), 0)) {  // nan, inf, underflow
      Status st = scaled_block(x, G, base, p, bs, adv + base, keep + base);
      if (!st.is_ok()) return st;
      continue;
    }
    const double sd = std::sqrt(m2 * inv_dof);
    const bool kp = !has_min || !(sd < min_std);
    double mult = kp ? base_mult : 0.0;
    if (by_group) mult = (sd + eps) > 0.0 ? mult / (sd + eps) : 0.0;  // eps = 0 and identical rewards
    T* __restrict a = adv + base;
    uint8_t* __restrict k = keep + base;
    auto value = [&](int64_t j) {
      double v = (static_cast<double>(x[j]) - mean) * mult;
      if constexpr (kClip) v = std::min(std::max(v, lo), hi);
      return v;
    };
    // Every |r - mean| <= sqrt(m2) < 2^512 here, so a float64 result cannot overflow; a float32 one only
    // when m2 * mult^2 passes the float32 maximum squared (never with scale = group), checked then.
    if (std::is_same_v<T, double> || by_group || m2 * mult * mult <= kMaxT * kMaxT) {
      for (int64_t j = 0; j < G; ++j) {
        a[j] = static_cast<T>(value(j));
        k[j] = kp;
      }
    } else {
      int over = 0;  // an integer or-reduction, which vectorizes (a max of doubles would not)
      for (int64_t j = 0; j < G; ++j) {
        const double v = value(j);
        over |= std::fabs(v) > kMaxT;
        a[j] = static_cast<T>(std::min(std::max(v, -kMaxT), kMaxT));
        k[j] = kp;
      }
      if (over)
        for (int64_t j = 0; j < G; ++j)
          if (!(std::fabs(value(j)) <= kMaxT)) return {Status::kOverflow, base + j};
    }
  }
  return Status::ok();
}

template <int KG, class T, class I>
Status contiguous_run(const T* r, const I* gid, int64_t n, int64_t g, const AdvParams& p, const BatchScale& bs,
                      T* adv, uint8_t* keep) {
  const double m2_min = g > 1 ? m2_floor(p, bs) : 0.0;  // a group of one gets 0 whatever its m2
  const int64_t blocks = n / g;
  std::vector<Status> st(num_threads());
  parallel_for(blocks, 8192, [&](int k, int64_t b, int64_t e) {
    st[k] = p.has_clip ? contiguous_blocks<KG, true>(r, gid, b, e, g, p, bs, m2_min, adv, keep)
                       : contiguous_blocks<KG, false>(r, gid, b, e, g, p, bs, m2_min, adv, keep);
  });
  return first_failure(st);
}

// Fast path; returns kFallback when the layout is not contiguous equal-size groups with increasing ids, or
// when the batch scale is too far from 1 (below 2^-1000 or above 2^450) to be applied as one factor.
template <class T, class I>
Status advantages_contiguous(const T* r, const I* gid, int64_t n, const AdvParams& p, const BatchScale& bs, T* adv,
                             uint8_t* keep) {
  if (n == 0 || p.method == AdvMethod::kPerRole) return {Status::kFallback, 0};
  if (p.scale == AdvScale::kBatch && !(bs.e >= -1000 && bs.e <= 450)) return {Status::kFallback, 0};
  int64_t g = 1;
  while (g < n && gid[g] == gid[0]) ++g;
  if (n % g != 0) return {Status::kFallback, 0};
  switch (g) {
    case 2: return contiguous_run<2>(r, gid, n, g, p, bs, adv, keep);
    case 4: return contiguous_run<4>(r, gid, n, g, p, bs, adv, keep);
    case 8: return contiguous_run<8>(r, gid, n, g, p, bs, adv, keep);
    case 16: return contiguous_run<16>(r, gid, n, g, p, bs, adv, keep);
    case 32: return contiguous_run<32>(r, gid, n, g, p, bs, adv, keep);
    default: return contiguous_run<0>(r, gid, n, g, p, bs, adv, keep);
  }
}

// Statistics of every unit u[i] in [0, k), as the plain formulas give them, in arrays of 8-byte values (the
// ids come in any order, so each pass is a random access per reward into these). A unit whose sum of
// squares is not finite, or under m2_min, is redone in units of 2^e: e[u] = 0 for every other unit.
struct UnitTable {
  std::vector<int64_t> count;
  std::vector<double> mean, sd;  // of r * 2^-e
  std::vector<int> e;
  bool rescaled = false;
  UnitStats operator[](int64_t j) const { return {count[j], mean[j], sd[j], e[j]}; }
};

template <class T>
Status unit_stats(const T* r, const int64_t* u, int64_t n, int64_t k, bool unbiased, double m2_min,
                  UnitTable* out) {
  UnitTable& t = *out;
  t.count.assign(k, 0);
  t.mean.assign(k, 0.0);
  t.sd.assign(k, 0.0);
  t.e.assign(k, 0);
  for (int64_t i = 0; i < n; ++i) {
    const double x = static_cast<double>(r[i]);
    if (!std::isfinite(x)) return {Status::kNonFinite, i};
    t.mean[u[i]] += x;
    t.count[u[i]] += 1;
  }
  for (int64_t j = 0; j < k; ++j) t.mean[j] /= static_cast<double>(t.count[j]);
  std::vector<double>& m2 = t.sd;
  for (int64_t i = 0; i < n; ++i) {
    const double d = static_cast<double>(r[i]) - t.mean[u[i]];
    m2[u[i]] += d * d;
  }
  std::vector<uint8_t> redo(k);
  for (int64_t j = 0; j < k; ++j) {
    redo[j] = !(m2[j] >= m2_min && m2[j] <= std::numeric_limits<double>::max());
    t.rescaled |= redo[j] != 0;
  }
  if (t.rescaled) {  // huge (or, with eps ~ 0, tiny) rewards: those units again, in units of 2^e
    std::vector<double> amax(k, 0.0), down(k, 1.0);
    for (int64_t i = 0; i < n; ++i)
      if (redo[u[i]]) amax[u[i]] = std::max(amax[u[i]], std::fabs(static_cast<double>(r[i])));
    for (int64_t j = 0; j < k; ++j) {
      if (!redo[j]) continue;
      t.e[j] = scale_exponent(amax[j]);
      down[j] = inv_pow2(t.e[j]);
      t.mean[j] = m2[j] = 0.0;
    }
    for (int64_t i = 0; i < n; ++i)
      if (redo[u[i]]) t.mean[u[i]] += static_cast<double>(r[i]) * down[u[i]];
    for (int64_t j = 0; j < k; ++j)
      if (redo[j]) t.mean[j] /= static_cast<double>(t.count[j]);
    for (int64_t i = 0; i < n; ++i) {
      if (!redo[u[i]]) continue;
      const double d = static_cast<double>(r[i]) * down[u[i]] - t.mean[u[i]];
      m2[u[i]] += d * d;
    }
  }
  for (int64_t j = 0; j < k; ++j) t.sd[j] = group_std(m2[j], t.count[j], unbiased);
  return Status::ok();
}

// General path: any id order and group sizes; per_role statistics per (group, role) pair, while the
// min_std filter always looks at the whole group (a homogeneous task is dropped for every role).
template <class T, class I>
Status advantages_general(const T* r, const I* gid, const int32_t* role, int64_t n, const AdvParams& p,
                          const BatchScale& bs, T* adv, uint8_t* keep) {
  std::vector<int64_t> group(n), unit;
  const int64_t ngroups = dense_ids(gid, n, group.data());
  int64_t nunits = ngroups;
  const bool per_role = p.method == AdvMethod::kPerRole;
  if (per_role) {  // (group, role) pairs as group x (role range) + (role - smallest role): no two collide
    int64_t lo = 0, hi = 0;
    for (int64_t i = 0; i < n; ++i) {
      lo = std::min<int64_t>(lo, role[i]);
      hi = std::max<int64_t>(hi, role[i]);
    }
    const int64_t span = hi - lo + 1;
    if (ngroups > 0 && span > INT64_MAX / ngroups) return {Status::kBadValue, 0};
    std::vector<int64_t> key(n);
    for (int64_t i = 0; i < n; ++i) key[i] = group[i] * span + (role[i] - lo);
    unit.resize(n);
    nunits = dense_ids(key.data(), n, unit.data());
  }
  const int64_t* u = per_role ? unit.data() : group.data();
  const double m2_min = m2_floor(p, bs);
  UnitTable us, gs;
  Status s = unit_stats(r, u, n, nunits, p.unbiased, m2_min, &us);
  if (!s.is_ok()) return s;
  std::vector<uint8_t> gkeep(ngroups, 1);
  if (p.has_min_std) {
    if (per_role) unit_stats(r, group.data(), n, ngroups, p.unbiased, m2_min, &gs);  // rewards already checked
    const UnitTable& whole = per_role ? gs : us;
    for (int64_t k = 0; k < ngroups; ++k) gkeep[k] = unit_kept(p, whole[k]);
  }
  std::vector<double> mult(nunits);
  bool scaled = us.rescaled;
  for (int64_t k = 0; k < nunits; ++k) {
    const UnitCoef c = unit_coef(p, us[k], bs);
    mult[k] = c.mult;
    scaled |= c.up.lo != 1.0 || c.up.hi != 1.0;
  }
  if (!scaled) {  // every unit plain: (r - mean) * mult, the formula itself (float64: cannot overflow here)
    for (int64_t i = 0; i < n; ++i) {
      const bool kp = gkeep[group[i]];
      const double a = kp ? (static_cast<double>(r[i]) - us.mean[u[i]]) * mult[u[i]] : 0.0;
      if constexpr (std::is_same_v<T, double>) {
        adv[i] = p.has_clip ? std::min(std::max(a, -p.clip), p.clip) : a;
      } else if (!store(p, a, adv + i)) {
        return {Status::kOverflow, i};
      }
      keep[i] = kp;
    }
    return Status::ok();
  }
  std::vector<Pow2> up(nunits);
  std::vector<double> down(nunits);
  for (int64_t k = 0; k < nunits; ++k) {
    up[k] = unit_coef(p, us[k], bs).up;
    down[k] = inv_pow2(us.e[k]);
  }
  for (int64_t i = 0; i < n; ++i) {
    const bool kp = gkeep[group[i]];
    const double a = kp ? up[u[i]]((static_cast<double>(r[i]) * down[u[i]] - us.mean[u[i]]) * mult[u[i]]) : 0.0;
    if (!store(p, a, adv + i)) return {Status::kOverflow, i};
    keep[i] = kp;
  }
  return Status::ok();
}

template <class T, class I>
Status group_advantages(const T* r, const I* gid, const int32_t* role, int64_t n, const AdvParams& p, T* adv,
                        uint8_t* keep) {
  BatchScale bs;
  if (p.scale == AdvScale::kBatch) {
    Status s = batch_scale(r, n, p, &bs);
    if (!s.is_ok()) return s;
  }
  Status s = advantages_contiguous(r, gid, n, p, bs, adv, keep);
  if (s.code != Status::kFallback) return s;
  return advantages_general(r, gid, role, n, p, bs, adv, keep);
}

}  // namespace parasim
