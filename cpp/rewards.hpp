// Batched trajectory rewards for many configs at once (parasim/rewards.py documents the formulas).
// The batch is walked in cache-sized blocks and every config is scored on a block while it is hot, so a
// grid of C configs reads the batch once and the cost is dominated by writing the C x N output.
#pragma once

#include <cstdint>
#include <cstring>
#if defined(__SSE2__)
#include <emmintrin.h>  // _mm_stream_pd, _mm_sfence
#endif

#include "common.hpp"

// An AVX2 clone beside the baseline, chosen at load time (an ifunc: x86-64 ELF only; elsewhere the one baseline).
#if defined(__x86_64__) && defined(__ELF__)
#define PARASIM_AVX2_CLONE __attribute__((target_clones("avx2", "default")))
#else
#define PARASIM_AVX2_CLONE
#endif

namespace parasim {

// The reward core's layouts, each written once as an X-macro table that generates both the C++ constants and the
// names bindings.cpp exports (reward_param_names, reward_formulas, reward_components), which parasim's Python side
// reads instead of keeping lists of its own.
// One config row: the fixed parameters, then one tool preference per tool of the batch (the tool spec's count T, read
// from tool_counts' width), so a row has kNumFixedParams + T columns.
#define PARASIM_REWARD_PARAMS(X)                                                                                  \
  X(kFormula, "formula") X(kCorrectThreshold, "correct_threshold") X(kWOutcome, "w_outcome")                     \
  X(kWProtocol, "w_protocol") X(kFormatPenalty, "format_penalty") X(kNoFinalPenalty, "no_final_penalty")         \
  X(kWDiversity, "w_diversity") X(kThetaPar, "theta_par") X(kThetaTool, "theta_tool") X(kParShare, "par_share")  \
  X(kDiversityNeedsCorrect, "diversity_needs_correct") X(kWLength, "w_length") X(kLTar, "l_tar")                 \
  X(kWCost, "w_cost") X(kCTar, "c_tar") X(kBudgetMaxFactor, "budget_max_factor") X(kPrefOutcome, "pref_outcome") \
  X(kPrefCost, "pref_cost") X(kPrefLatency, "pref_latency") X(kUsdScale, "usd_scale")                            \
  X(kMaxCostPenalty, "max_cost_penalty") X(kAlphaCost, "alpha_cost") X(kFormatReward, "format_reward")           \
  X(kCostLo, "cost_lo") X(kCostHi, "cost_hi")
// The formula families, in code order (a row's kFormula column).
#define PARASIM_REWARD_FORMULAS(X) \
  X(kParamanager, "paramanager") X(kToolorchestra, "toolorchestra") X(kXrouter, "xrouter") X(kRouterR1, "router_r1")
// The reward components, in the order of the comps output's rows; the total is their sum.
#define PARASIM_REWARD_COMPONENTS(X)                                                                         \
  X(kCompOutcome, "outcome") X(kCompProtocol, "protocol") X(kCompDiversity, "diversity")                    \
  X(kCompLength, "length") X(kCompCost, "cost") X(kCompLatency, "latency") X(kCompTools, "tools")

#define PARASIM_ENUM_ENTRY(id, name) id,
#define PARASIM_NAME_ENTRY(id, name) name,
enum RewardParam : int { PARASIM_REWARD_PARAMS(PARASIM_ENUM_ENTRY) kNumFixedParams, kPrefTool0 = kNumFixedParams };
enum Formula : int { PARASIM_REWARD_FORMULAS(PARASIM_ENUM_ENTRY) kNumFormulas };
enum Component : int { PARASIM_REWARD_COMPONENTS(PARASIM_ENUM_ENTRY) kNumComponents };
inline constexpr const char* kRewardParamNames[] = {PARASIM_REWARD_PARAMS(PARASIM_NAME_ENTRY)};
inline constexpr const char* kFormulaNames[] = {PARASIM_REWARD_FORMULAS(PARASIM_NAME_ENTRY)};
inline constexpr const char* kComponentNames[] = {PARASIM_REWARD_COMPONENTS(PARASIM_NAME_ENTRY)};
#undef PARASIM_ENUM_ENTRY
#undef PARASIM_NAME_ENTRY

// Capacity of the per-trajectory feature buffers, not the tool count: a batch has 1..kMaxTools tools.
constexpr int kMaxTools = 64;
constexpr int kMaxFeatures = kMaxTools + 3;  // toolorchestra: tool counts, outcome, -usd, -latency

inline int64_t param_width(int num_tools) { return kNumFixedParams + num_tools; }

struct BatchView {
  int64_t n = 0;
  int num_tools = 0;  // T: the columns of tool_counts
  const double* outcome = nullptr;
  const int32_t* format_violations = nullptr;
  const uint8_t* ended_with_final = nullptr;
  const int32_t* rounds = nullptr;
  const int32_t* tool_calls = nullptr;
  const int32_t* distinct_tools = nullptr;
  const int32_t* tool_counts = nullptr;  // [n, num_tools]
  const double* tokens = nullptr;
  const double* cost_units = nullptr;
  const double* usd = nullptr;
  const double* latency_s = nullptr;
  const int64_t* group_id = nullptr;
  const double* preference = nullptr;  // [n, num_tools + 3]: a row's own toolorchestra vector where flagged
  const uint8_t* has_preference = nullptr;  // 1: the row's own vector applies; 0: none, the config's
  int num_features() const { return num_tools + 3; }
};

// The trajectory fields the core reads, in the trajectory schema's order (parasim/trajectory_schema.py): name,
// buffer and dimensions. The binding fills a BatchView through this list and exports it
// (_core.trajectory_fields()), and a test checks the export against the Python schema.
template <class Visit>
void visit_fields(BatchView& b, Visit&& v) {
  v("outcome", b.outcome, 1);
  v("format_violations", b.format_violations, 1);
  v("ended_with_final", b.ended_with_final, 1);
  v("rounds", b.rounds, 1);
  v("tool_calls", b.tool_calls, 1);
  v("distinct_tools", b.distinct_tools, 1);
  v("tool_counts", b.tool_counts, 2);
  v("tokens", b.tokens, 1);
  v("cost_units", b.cost_units, 1);
  v("usd", b.usd, 1);
  v("latency_s", b.latency_s, 1);
  v("group_id", b.group_id, 1);
  v("preference", b.preference, 2);
  v("has_preference", b.has_preference, 1);
}

// Whether any row of the batch carries its own preference vector: only toolorchestra reads the vectors, and only
// when some row has one does it take the per-row path. A pass over the flags (one byte a row), stopping at the
// first set one.
inline bool any_row_preference(const BatchView& b) {
  for (int64_t i = 0; i < b.n; ++i)
    if (b.has_preference[i] != 0) return true;
  return false;
}

inline double feature(const BatchView& b, int64_t i, int f) {
  const int t = b.num_tools;
  if (f < t) return static_cast<double>(b.tool_counts[i * t + f]);
  if (f == t) return b.outcome[i];
  if (f == t + 1) return -b.usd[i];
  return -b.latency_s[i];
}

// Branch-free min / max: with -fno-trapping-math (CMakeLists.txt) GCC turns these into minpd / maxpd and
// vectorizes the scoring loops; a mispredicted branch per trajectory would cost more than the formula.
inline double fmin1(double a, double b) { return a < b ? a : b; }
inline double fmax1(double a, double b) { return a > b ? a : b; }
inline double clamp01(double x) { return fmin1(fmax1(x, 0.0), 1.0); }
// Per-group min and max of every toolorchestra feature: [group][feature] pairs.
struct GroupRange {
  std::vector<int64_t> group;
  std::vector<double> lo, hi;
};

inline GroupRange group_ranges(const BatchView& b) {
  GroupRange gr;
  gr.group.resize(b.n);
  const int64_t k = dense_ids(b.group_id, b.n, gr.group.data());
  const int nf = b.num_features();
  gr.lo.assign(k * nf, INFINITY);
  gr.hi.assign(k * nf, -INFINITY);
  for (int64_t i = 0; i < b.n; ++i) {
    double* lo = &gr.lo[gr.group[i] * nf];
    double* hi = &gr.hi[gr.group[i] * nf];
    for (int f = 0; f < nf; ++f) {
      const double v = feature(b, i, f);
      lo[f] = fmin1(lo[f], v);
      hi[f] = fmax1(hi[f], v);
    }
  }
  return gr;
}

// Trajectories per block: the block's inputs and shared sums (about 10 doubles a row, 320 KB) stay in L2 while every
// config is scored, and each config writes 32 KB of its output row in one run. 256 rows (2 KB runs, 64 output
// streams switching every 2 KB) cost 1.5x the CPU time of 2,048-8,192 (measured, 64 configs x 1e6).
constexpr int64_t kRewardBlock = 4096;

// Per-block values shared by every config: toolorchestra's normalized features, calls per round, sqrt(usd), and the
// integer fields the formulas read, converted to double once per block instead of once per config.
// The paramanager total is summed left to right, ((((outcome + protocol) + diversity) + length) + cost), so configs
// that agree on the parameters of the first three terms share their sum, and those that also agree on the length
// term's share the sum of four: a budget grid (C_tar x L_tar x w_cost) computes the first three once per block, the
// length term once per L_tar and only the cost term per config, with the same floats as summing each config alone.
// `prefix3` / `prefix4` hold those sums for the block's last config whose parameters are in `key3` / `key4`.
constexpr int kPrefix3Params[] = {kCorrectThreshold, kWOutcome, kWProtocol, kFormatPenalty, kNoFinalPenalty,
                                  kWDiversity, kThetaPar, kThetaTool, kParShare, kDiversityNeedsCorrect};
constexpr int kLengthParams[] = {kWLength, kLTar, kBudgetMaxFactor};
constexpr int kNumPrefix3 = sizeof(kPrefix3Params) / sizeof(int);
constexpr int kNumLength = sizeof(kLengthParams) / sizeof(int);

struct RewardScratch {
  std::vector<double> norm, par, sqrt_usd, fmt, no_final, distinct, prefix3, prefix4, stage;
  double key3[kNumPrefix3], key4[kNumLength];
  bool has3 = false, has4 = false;  // whether prefix3 / prefix4 hold this block's sums (reset per block)
  RewardScratch(bool ranges, int num_features)
      : norm(ranges ? num_features * kRewardBlock : 0), par(kRewardBlock), sqrt_usd(kRewardBlock),
        fmt(kRewardBlock), no_final(kRewardBlock), distinct(kRewardBlock), prefix3(kRewardBlock),
        prefix4(kRewardBlock), stage(kRewardBlock) {}
};

// The paramanager terms of one config, each per trajectory; score_config (with components) and
// score_paramanager_totals (shared prefix sums) both read them, so the formula is written once.
struct Paramanager {
  double thr, w_o, w_p, fp, nf, w_d, inv_tp, inv_tt, ps, gate, w_l, lt, inv_l, w_c, ct, inv_c;
  explicit Paramanager(const double* p)
      : thr(p[kCorrectThreshold]), w_o(p[kWOutcome]), w_p(p[kWProtocol]), fp(p[kFormatPenalty]),
        nf(p[kNoFinalPenalty]), w_d(p[kWDiversity]), inv_tp(1.0 / p[kThetaPar]), inv_tt(1.0 / p[kThetaTool]),
        ps(p[kParShare]), gate(p[kDiversityNeedsCorrect] != 0.0 ? 1.0 : 0.0), w_l(p[kWLength]), lt(p[kLTar]),
        inv_l(1.0 / ((p[kBudgetMaxFactor] - 1.0) * p[kLTar])), w_c(p[kWCost]), ct(p[kCTar]),
        inv_c(1.0 / ((p[kBudgetMaxFactor] - 1.0) * p[kCTar])) {}
  double outcome(double o) const { return w_o * o; }
  double protocol(double fmt, double no_final) const { return -w_p * fmin1(fp * fmt + nf * no_final, 1.0); }
  double diversity(double o, double par, double distinct) const {
    const double correct = static_cast<double>(o >= thr);
    const double div = ps * fmin1(par * inv_tp, 1.0) + (1.0 - ps) * fmin1(distinct * inv_tt, 1.0);
    return w_d * div * (gate * correct + (1.0 - gate));
  }
  double length(double tokens) const { return w_l * -clamp01((tokens - lt) * inv_l); }
  double cost(double cost_units) const { return w_c * -clamp01((cost_units - ct) * inv_c); }
};

// Whether `key` holds the parameters `ids` of row `p`; stores them when not.
template <int K>
inline bool same_params(double* key, const double* p, const int (&ids)[K]) {
  bool same = true;
  for (int k = 0; k < K; ++k) same &= key[k] == p[ids[k]];
  for (int k = 0; k < K; ++k) key[k] = p[ids[k]];
  return same;
}

// The paramanager totals of one config over a block's m trajectories without components: the shared prefix sums
// (RewardScratch) recomputed only when the config's parameters of them differ from the last config's.
// Cloned for AVX2 (4 doubles a vector instead of SSE2's 2; chosen at load time): with the sums shared, the per-config
// loop is short enough for the width to show (0.093 -> 0.061 CPU s for 64 x 1e6). -ffp-contract=off (CMakeLists.txt)
// keeps FMA out of either clone, so the floats are those of the components path.
PARASIM_AVX2_CLONE inline void score_paramanager_totals(
    const BatchView& b, const double* p, int64_t b0, int64_t m, RewardScratch& sc, double* __restrict out) {
  const Paramanager f(p);
  double* __restrict s3 = sc.prefix3.data();
  double* __restrict s4 = sc.prefix4.data();
  const bool keep3 = same_params(sc.key3, p, kPrefix3Params) && sc.has3;
  if (!keep3) {
    const double* __restrict o = b.outcome + b0;
    const double* __restrict fv = sc.fmt.data();
    const double* __restrict nef = sc.no_final.data();
    const double* __restrict dt = sc.distinct.data();
    const double* __restrict par = sc.par.data();
    for (int64_t j = 0; j < m; ++j)
      s3[j] = f.outcome(o[j]) + f.protocol(fv[j], nef[j]) + f.diversity(o[j], par[j], dt[j]);
    sc.has3 = true;
  }
  const bool keep4 = same_params(sc.key4, p, kLengthParams) && keep3 && sc.has4;
  if (!keep4) {
    const double* __restrict tok = b.tokens + b0;
    for (int64_t j = 0; j < m; ++j) s4[j] = s3[j] + f.length(tok[j]);
    sc.has4 = true;
  }
  const double* __restrict cu = b.cost_units + b0;
  for (int64_t j = 0; j < m; ++j) out[j] = s4[j] + f.cost(cu[j]);
}

// One formula over trajectories [b0, b0 + m). Every parameter is read into a local first and the outputs
// are restrict: otherwise each store to `out` could alias the parameter row and forbid vectorization.
// Components are summed in the order of parasim.reference.COMPONENTS, so totals match it bit for bit.
// kRowPref: some row of the batch has its own preference vector (toolorchestra reads it instead of the config's;
// the other formulas ignore the field).
template <bool kComps, bool kRowPref>
inline void score_config(const BatchView& b, const double* p, int64_t b0, int64_t m, const RewardScratch& sc,
                         double* __restrict out, double* __restrict comps) {
  const int formula = static_cast<int>(p[kFormula]);
  const double thr = p[kCorrectThreshold];
  const int64_t n = b.n;
  const double* __restrict o = b.outcome + b0;
  auto put = [&](int64_t j, int k, double v) {
    if constexpr (kComps) comps[k * n + b0 + j] = v;
  };
  if (formula == kParamanager) {
    const Paramanager f(p);
    const double* __restrict fv = sc.fmt.data();
    const double* __restrict nef = sc.no_final.data();
    const double* __restrict dt = sc.distinct.data();
    const double* __restrict tok = b.tokens + b0;
    const double* __restrict cu = b.cost_units + b0;
    const double* __restrict par = sc.par.data();
    for (int64_t j = 0; j < m; ++j) {
      const double c0 = f.outcome(o[j]), c1 = f.protocol(fv[j], nef[j]), c2 = f.diversity(o[j], par[j], dt[j]);
      const double c3 = f.length(tok[j]), c4 = f.cost(cu[j]);
      out[j] = c0 + c1 + c2 + c3 + c4;
      put(j, 0, c0), put(j, 1, c1), put(j, 2, c2), put(j, 3, c3), put(j, 4, c4), put(j, 5, 0.0), put(j, 6, 0.0);
    }
  } else if (formula == kToolorchestra) {
    const int nt = b.num_tools;
    double pref[kMaxFeatures];
    for (int f = 0; f < nt; ++f) pref[f] = p[kPrefTool0 + f];
    pref[nt] = p[kPrefOutcome], pref[nt + 1] = p[kPrefCost], pref[nt + 2] = p[kPrefLatency];
    const double* __restrict norm = sc.norm.data();
    const int nf = b.num_features();
    for (int64_t j = 0; j < m; ++j) {
      const double* __restrict w = pref;  // the config's vector, or the row's own where it has one
      if constexpr (kRowPref) {
        if (b.has_preference[b0 + j] != 0) w = b.preference + (b0 + j) * nf;
      }
      const double correct = static_cast<double>(o[j] >= thr);
      double tools = 0.0;
      for (int f = 0; f < nt; ++f) tools += norm[f * kRewardBlock + j] * correct * w[f];
      const double c0 = w[nt] * (norm[nt * kRewardBlock + j] * correct);
      const double c4 = w[nt + 1] * (norm[(nt + 1) * kRewardBlock + j] * correct);
      const double c5 = w[nt + 2] * (norm[(nt + 2) * kRewardBlock + j] * correct);
      out[j] = c0 + c4 + c5 + tools;
      put(j, 0, c0), put(j, 1, 0.0), put(j, 2, 0.0), put(j, 3, 0.0), put(j, 4, c4), put(j, 5, c5), put(j, 6, tools);
    }
  } else if (formula == kXrouter) {
    const double scale = p[kUsdScale], cap = p[kMaxCostPenalty];
    const double* __restrict usd = b.usd + b0;
    for (int64_t j = 0; j < m; ++j) {
      const double c4 = -o[j] * fmin1(scale * usd[j], cap);
      out[j] = o[j] + c4;
      put(j, 0, o[j]), put(j, 1, 0.0), put(j, 2, 0.0), put(j, 3, 0.0), put(j, 4, c4), put(j, 5, 0.0), put(j, 6, 0.0);
    }
  } else {  // router_r1
    const double lo = p[kCostLo], hi = p[kCostHi], alpha = p[kAlphaCost], fr = p[kFormatReward];
    const double inv_span = hi > lo ? 1.0 / (hi - lo) : 0.0;
    const double* __restrict fv = sc.fmt.data();
    const double* __restrict nef = sc.no_final.data();
    const double* __restrict su = sc.sqrt_usd.data();
    for (int64_t j = 0; j < m; ++j) {
      const double good = (fv[j] <= 0.0) & (nef[j] == 0.0) ? 1.0 : 0.0;
      const double correct = static_cast<double>(o[j] >= thr);
      const double scaled = clamp01((su[j] - lo) * inv_span);  // inv_span = 0 when hi <= lo: scaled = 0
      const double c0 = good * ((1.0 - alpha) * o[j]);
      const double c1 = (1.0 - good) * fr;
      const double c4 = good * (alpha * correct * (1.0 - scaled));
      out[j] = c0 + c1 + c4;
      put(j, 0, c0), put(j, 1, c1), put(j, 2, 0.0), put(j, 3, 0.0), put(j, 4, c4), put(j, 5, 0.0), put(j, 6, 0.0);
    }
  }
}

// Groups stored as sorted runs of at most kMaxRun rows (G rollouts of a task side by side) are
// min-max normalized on the fly: the features are read in the same pass that scores them.
constexpr int64_t kMaxRun = 4096;

inline bool short_sorted_runs(const int64_t* ids, int64_t n) {
  int64_t run = 1;
  for (int64_t i = 1; i < n; ++i) {
    if (ids[i] < ids[i - 1]) return false;
    run = ids[i] == ids[i - 1] ? run + 1 : 1;
    if (run > kMaxRun) return false;
  }
  return true;
}

// Normalized features of rows [b0, b1) from the runs that cover them (a run may start before b0 or end
// after b1: its full extent is read, at most kMaxRun rows).
inline void normalize_runs(const BatchView& b, int64_t b0, int64_t b1, double* norm) {
  int64_t i = b0;
  while (i < b1) {
    const int64_t id = b.group_id[i];
    int64_t s = i, e = i + 1;
    while (s > 0 && b.group_id[s - 1] == id) --s;
    while (e < b.n && b.group_id[e] == id) ++e;
    const int nf = b.num_features();
    double lo[kMaxFeatures], hi[kMaxFeatures];
    for (int f = 0; f < nf; ++f) lo[f] = INFINITY, hi[f] = -INFINITY;
    for (int64_t r = s; r < e; ++r)
      for (int f = 0; f < nf; ++f) {
        const double v = feature(b, r, f);
        lo[f] = fmin1(lo[f], v);
        hi[f] = fmax1(hi[f], v);
      }
    const int64_t stop = std::min(e, b1);
    for (int64_t r = i; r < stop; ++r)
      for (int f = 0; f < nf; ++f) {
        const double span = hi[f] - lo[f];
        norm[f * kRewardBlock + (r - b0)] = span > 0 ? (feature(b, r, f) - lo[f]) / span : 0.0;
      }
    i = stop;
  }
}

// Output grids larger than this are written with non-temporal stores: a 64 x 1e6 grid (512 MB) is never read back
// from cache, and a plain store first reads each line it writes (read-for-ownership), so streaming the rows halves
// the traffic of the grid's one unavoidable cost. Smaller outputs (an env step's rewards, read back at once) keep
// plain stores, which leave them in cache.
constexpr int64_t kStreamBytes = int64_t{32} << 20;

// dst[0, m) = src[0, m) with non-temporal stores (16-byte aligned runs; the unaligned head and tail plainly); a plain
// copy where the CPU has no SSE2.
inline void stream_copy(double* __restrict dst, const double* __restrict src, int64_t m) {
#if defined(__SSE2__)
  int64_t j = 0;
  for (; j < m && (reinterpret_cast<uintptr_t>(dst + j) & 15) != 0; ++j) dst[j] = src[j];
  for (; j + 2 <= m; j += 2) _mm_stream_pd(dst + j, _mm_loadu_pd(src + j));
  for (; j < m; ++j) dst[j] = src[j];
#else
  std::memcpy(dst, src, static_cast<size_t>(m) * sizeof(double));
#endif
}

// Orders this thread's non-temporal stores before what follows (the join that hands the output to the caller).
inline void stream_fence() {
#if defined(__SSE2__)
  _mm_sfence();
#endif
}

// Score trajectories [b0, b1) under every config. totals: [C, n]; comps: [kNumComponents, n] or null
// (only with C == 1). Toolorchestra needs `runs` (sorted short groups) or the group range table `gr`.
inline void score_block(const BatchView& b, const double* params, int64_t C, bool runs, const GroupRange* gr,
                        bool row_pref, bool stream, int64_t b0, int64_t b1, double* totals, double* comps,
                        RewardScratch& sc) {
  const int64_t m = b1 - b0;
  if (runs) normalize_runs(b, b0, b1, sc.norm.data());
  if (gr != nullptr) {
    const int nf = b.num_features();
    for (int64_t j = 0; j < m; ++j) {
      const int64_t i = b0 + j;
      const double* lo = &gr->lo[gr->group[i] * nf];
      const double* hi = &gr->hi[gr->group[i] * nf];
      for (int f = 0; f < nf; ++f) {
        const double span = hi[f] - lo[f];
        sc.norm[f * kRewardBlock + j] = span > 0 ? (feature(b, i, f) - lo[f]) / span : 0.0;
      }
    }
  }
  for (int64_t j = 0; j < m; ++j) {
    sc.par[j] = static_cast<double>(b.tool_calls[b0 + j]) / std::max(b.rounds[b0 + j], 1);
    sc.sqrt_usd[j] = std::sqrt(b.usd[b0 + j]);
    sc.fmt[j] = static_cast<double>(b.format_violations[b0 + j]);
    sc.no_final[j] = 1.0 - static_cast<double>(b.ended_with_final[b0 + j]);
    sc.distinct[j] = static_cast<double>(b.distinct_tools[b0 + j]);
  }
  const int64_t width = param_width(b.num_tools);
  sc.has3 = sc.has4 = false;  // a new block: no shared sums yet
  for (int64_t c = 0; c < C; ++c) {
    const double* p = params + c * width;
    double* row = totals + c * b.n + b0;
    double* t = stream ? sc.stage.data() : row;  // streamed: scored in cache, then copied out past it
    if (comps == nullptr && static_cast<int>(p[kFormula]) == kParamanager) {
      score_paramanager_totals(b, p, b0, m, sc, t);
    } else if (row_pref) {
      if (comps != nullptr) score_config<true, true>(b, p, b0, m, sc, t, comps);
      else score_config<false, true>(b, p, b0, m, sc, t, nullptr);
    } else {
      if (comps != nullptr) score_config<true, false>(b, p, b0, m, sc, t, comps);
      else score_config<false, false>(b, p, b0, m, sc, t, nullptr);
    }
    if (stream) stream_copy(row, t, m);
  }
}

// params: [C, kNumFixedParams + T] (already validated in Python); totals: [C, n]; comps as in score_block.
inline void score_rewards(const BatchView& b, const double* params, int64_t C, double* totals, double* comps) {
  bool need_ranges = false;
  const int64_t width = param_width(b.num_tools);
  for (int64_t c = 0; c < C; ++c) need_ranges |= static_cast<int>(params[c * width]) == kToolorchestra;
  const bool rows = need_ranges && any_row_preference(b);  // toolorchestra's per-row vectors, where some row has one
  const bool runs = need_ranges && short_sorted_runs(b.group_id, b.n);
  GroupRange gr;
  if (need_ranges && !runs) gr = group_ranges(b);  // any other layout: one pass for the table first
  const GroupRange* table = need_ranges && !runs ? &gr : nullptr;
  const int64_t nblocks = (b.n + kRewardBlock - 1) / kRewardBlock;
  const bool stream = comps == nullptr && C * b.n * static_cast<int64_t>(sizeof(double)) >= kStreamBytes;
  parallel_for(nblocks, 16, [&](int, int64_t lo, int64_t hi) {
    RewardScratch sc(need_ranges, b.num_features());
    for (int64_t blk = lo; blk < hi; ++blk)
      score_block(b, params, C, runs, table, rows, stream, blk * kRewardBlock,
                  std::min(b.n, (blk + 1) * kRewardBlock), totals, comps, sc);
    if (stream) stream_fence();  // this thread's streamed rows are visible before the caller reads them
  });
}

}  // namespace parasim
