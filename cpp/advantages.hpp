// Group-relative advantages (GRPO, Dr. GRPO, RLOO, per-role) over a flat batch of rewards.
// Float64 accumulation, two-pass variance. Two paths: contiguous equal-size groups with increasing ids
// (the usual GRPO layout: G rollouts of a task side by side) stream block by block, in parallel, near
// memory speed; any other layout goes through dense group indexing. Both give the same numbers.
#pragma once

#include <climits>

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

inline double group_std(double m2, int64_t count, bool unbiased) {
  const int64_t dof = unbiased ? count - 1 : count;
  return dof > 0 ? std::sqrt(m2 / static_cast<double>(dof)) : 0.0;
}

// Multiplier applied to (r - mean) for one statistics unit of size `count` and std `sd`.
inline double centered_multiplier(const AdvParams& p, int64_t count, double sd, double batch_div) {
  if (count <= 1) return 0.0;  // a group of one has nothing to compare against
  double m = (p.method == AdvMethod::kRloo) ? static_cast<double>(count) / static_cast<double>(count - 1) : 1.0;
  if (p.scale == AdvScale::kGroup) m = (sd + p.eps) > 0.0 ? m / (sd + p.eps) : 0.0;
  if (p.scale == AdvScale::kBatch) m *= batch_div;
  return m;
}

inline double clip_value(const AdvParams& p, double a) {
  return p.has_clip ? std::min(std::max(a, -p.clip), p.clip) : a;
}

template <class T>
Status find_nonfinite(const T* r, int64_t b, int64_t e) {
  for (int64_t i = b; i < e; ++i)
    if (!std::isfinite(static_cast<double>(r[i]))) return {Status::kNonFinite, i};
  return Status::ok();
}

// 1 / (std of all rewards + eps), for scale = batch; also rejects non-finite rewards.
template <class T>
Status batch_divisor(const T* r, int64_t n, const AdvParams& p, double* out) {
  int t = num_threads();
  std::vector<double> sums(t, 0.0), m2s(t, 0.0);
  std::vector<Status> st(t);
  parallel_for(n, 1 << 16, [&](int k, int64_t b, int64_t e) {
    double s = 0.0;
    for (int64_t i = b; i < e; ++i) s += r[i];
    sums[k] = s;
    if (!std::isfinite(s)) st[k] = find_nonfinite(r, b, e);
  });
  Status bad = first_failure(st);
  if (!bad.is_ok()) return bad;
  double total = 0.0;
  for (double s : sums) total += s;
  const double mean = n > 0 ? total / static_cast<double>(n) : 0.0;
  parallel_for(n, 1 << 16, [&](int k, int64_t b, int64_t e) {
    double m2 = 0.0;
    for (int64_t i = b; i < e; ++i) {
      double d = r[i] - mean;
      m2 += d * d;
    }
    m2s[k] = m2;
  });
  double m2 = 0.0;
  for (double v : m2s) m2 += v;
  const double denom = group_std(m2, n, p.unbiased) + p.eps;
  *out = denom > 0.0 ? 1.0 / denom : 0.0;
  return Status::ok();
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

// Blocks [b, e) of KG rewards each (KG compile-time, or g at run time when KG == 0), one group id per
// block and increasing across blocks. Parameters are copied to locals and pointers are restrict, so the
// compiler keeps them in registers across the output stores (a uint8 store may alias anything otherwise).
template <int KG, bool kClip, class T, class I>
Status contiguous_blocks(const T* __restrict r, const I* __restrict gid, int64_t b, int64_t e, int64_t g,
                         const AdvParams p, double batch_div, T* __restrict adv, uint8_t* __restrict keep) {
  const int64_t G = KG > 0 ? KG : g;
  const double inv_g = 1.0 / static_cast<double>(G);
  const int64_t dof = p.unbiased ? G - 1 : G;
  const double inv_dof = dof > 0 ? 1.0 / static_cast<double>(dof) : 0.0;
  const bool has_min = p.has_min_std;
  const double min_std = p.min_std, eps = p.eps, lo = -p.clip, hi = p.clip;
  double base_mult = (G <= 1) ? 0.0 : (p.method == AdvMethod::kRloo ? static_cast<double>(G) / (G - 1) : 1.0);
  if (p.scale == AdvScale::kBatch) base_mult *= batch_div;
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
    if (!std::isfinite(s)) {
      Status bad = find_nonfinite(r, base, base + G);
      if (!bad.is_ok()) return bad;
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
    const double sd = std::sqrt(m2 * inv_dof);
    const bool kp = !has_min || !(sd < min_std);
    double mult = kp ? base_mult : 0.0;
    if (by_group) mult = (sd + eps) > 0.0 ? mult / (sd + eps) : 0.0;  // eps = 0 and identical rewards
    T* __restrict a = adv + base;
    uint8_t* __restrict k = keep + base;
    for (int64_t j = 0; j < G; ++j) {
      double v = (static_cast<double>(x[j]) - mean) * mult;
      if constexpr (kClip) v = std::min(std::max(v, lo), hi);
      a[j] = static_cast<T>(v);
      k[j] = kp;
    }
  }
  return Status::ok();
}

template <int KG, class T, class I>
Status contiguous_run(const T* r, const I* gid, int64_t n, int64_t g, const AdvParams& p, double batch_div,
                      T* adv, uint8_t* keep) {
  const int64_t blocks = n / g;
  std::vector<Status> st(num_threads());
  parallel_for(blocks, 8192, [&](int k, int64_t b, int64_t e) {
    st[k] = p.has_clip ? contiguous_blocks<KG, true>(r, gid, b, e, g, p, batch_div, adv, keep)
                       : contiguous_blocks<KG, false>(r, gid, b, e, g, p, batch_div, adv, keep);
  });
  return first_failure(st);
}

// Fast path; returns kFallback when the layout is not contiguous equal-size groups with increasing ids.
template <class T, class I>
Status advantages_contiguous(const T* r, const I* gid, int64_t n, const AdvParams& p, double batch_div, T* adv,
                             uint8_t* keep) {
  if (n == 0 || p.method == AdvMethod::kPerRole) return {Status::kFallback, 0};
  int64_t g = 1;
  while (g < n && gid[g] == gid[0]) ++g;
  if (n % g != 0) return {Status::kFallback, 0};
  switch (g) {
    case 2: return contiguous_run<2>(r, gid, n, g, p, batch_div, adv, keep);
    case 4: return contiguous_run<4>(r, gid, n, g, p, batch_div, adv, keep);
    case 8: return contiguous_run<8>(r, gid, n, g, p, batch_div, adv, keep);
    case 16: return contiguous_run<16>(r, gid, n, g, p, batch_div, adv, keep);
    case 32: return contiguous_run<32>(r, gid, n, g, p, batch_div, adv, keep);
    default: return contiguous_run<0>(r, gid, n, g, p, batch_div, adv, keep);
  }
}

// General path: any id order and group sizes; per_role statistics per (group, role) pair, while the
// min_std filter always looks at the whole group (a homogeneous task is dropped for every role).
template <class T, class I>
Status advantages_general(const T* r, const I* gid, const int32_t* role, int64_t n, const AdvParams& p,
                          double batch_div, T* adv, uint8_t* keep) {
  std::vector<int64_t> group(n), unit;
  const int64_t ngroups = dense_ids(gid, n, group.data());
  int64_t nunits = ngroups;
  const bool per_role = p.method == AdvMethod::kPerRole;
  if (per_role) {
    int32_t max_role = 0;
    for (int64_t i = 0; i < n; ++i) max_role = std::max(max_role, role[i]);
    if (ngroups > 0 && static_cast<int64_t>(max_role) + 1 > INT64_MAX / ngroups) return {Status::kBadValue, 0};
    std::vector<int64_t> key(n);
    for (int64_t i = 0; i < n; ++i) key[i] = group[i] * (static_cast<int64_t>(max_role) + 1) + role[i];
    unit.resize(n);
    nunits = dense_ids(key.data(), n, unit.data());
  }
  const int64_t* u = per_role ? unit.data() : group.data();
  std::vector<double> sum(nunits, 0.0), m2(nunits, 0.0), mean(nunits), mult(nunits);
  std::vector<int64_t> cnt(nunits, 0);
  for (int64_t i = 0; i < n; ++i) {
    const double x = static_cast<double>(r[i]);
    if (!std::isfinite(x)) return {Status::kNonFinite, i};
    sum[u[i]] += x;
    cnt[u[i]] += 1;
  }
  for (int64_t k = 0; k < nunits; ++k) mean[k] = sum[k] / static_cast<double>(cnt[k]);
  for (int64_t i = 0; i < n; ++i) {
    const double d = static_cast<double>(r[i]) - mean[u[i]];
    m2[u[i]] += d * d;
  }
  for (int64_t k = 0; k < nunits; ++k)
    mult[k] = centered_multiplier(p, cnt[k], group_std(m2[k], cnt[k], p.unbiased), batch_div);
  std::vector<uint8_t> gkeep(ngroups, 1);
  if (p.has_min_std) {
    std::vector<double> gsum(ngroups, 0.0), gm2(ngroups, 0.0);
    std::vector<int64_t> gcnt(ngroups, 0);
    for (int64_t i = 0; i < n; ++i) {
      gsum[group[i]] += r[i];
      gcnt[group[i]] += 1;
    }
    for (int64_t k = 0; k < ngroups; ++k) gsum[k] /= static_cast<double>(gcnt[k]);
    for (int64_t i = 0; i < n; ++i) {
      const double d = static_cast<double>(r[i]) - gsum[group[i]];
      gm2[group[i]] += d * d;
    }
    for (int64_t k = 0; k < ngroups; ++k) gkeep[k] = !(group_std(gm2[k], gcnt[k], p.unbiased) < p.min_std);
  }
  for (int64_t i = 0; i < n; ++i) {
    const bool kp = gkeep[group[i]];
    const double a = kp ? (static_cast<double>(r[i]) - mean[u[i]]) * mult[u[i]] : 0.0;
    adv[i] = static_cast<T>(clip_value(p, a));
    keep[i] = kp;
  }
  return Status::ok();
}

template <class T, class I>
Status group_advantages(const T* r, const I* gid, const int32_t* role, int64_t n, const AdvParams& p, T* adv,
                        uint8_t* keep) {
  double batch_div = 1.0;
  if (p.scale == AdvScale::kBatch) {
    Status s = batch_divisor(r, n, p, &batch_div);
    if (!s.is_ok()) return s;
  }
  Status s = advantages_contiguous(r, gid, n, p, batch_div, adv, keep);
  if (s.code != Status::kFallback) return s;
  return advantages_general(r, gid, role, n, p, batch_div, adv, keep);
}

}  // namespace parasim
