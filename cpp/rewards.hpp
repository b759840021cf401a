// Batched trajectory rewards for many configs at once (parasim/rewards.py documents the formulas).
// The batch is walked in cache-sized blocks and every config is scored on a block while it is hot, so a
// grid of C configs reads the batch once and the cost is dominated by writing the C x N output.
#pragma once

#include <array>

#include "common.hpp"

namespace parasim {

// Layout of one config row; reward_param_names() in bindings.cpp exports it to Python by name.
enum RewardParam : int {
  kFormula, kCorrectThreshold, kWOutcome, kWProtocol, kFormatPenalty, kNoFinalPenalty, kWDiversity, kThetaPar,
  kThetaTool, kParShare, kDiversityNeedsCorrect, kWLength, kLTar, kWCost, kCTar, kBudgetMaxFactor,
  kPrefTool0, kPrefOutcome = kPrefTool0 + 7, kPrefCost, kPrefLatency, kUsdScale, kMaxCostPenalty, kAlphaCost,
  kFormatReward, kCostLo, kCostHi, kNumRewardParams
};
enum Formula : int { kParamanager = 0, kToolorchestra = 1, kXrouter = 2, kRouterR1 = 3 };
constexpr int kNumTools = 7;
constexpr int kNumFeatures = kNumTools + 3;  // toolorchestra: tool counts, outcome, -usd, -latency
constexpr int kNumComponents = 7;           // outcome, protocol, diversity, length, cost, latency, tools

struct BatchView {
  int64_t n = 0;
  const double* outcome = nullptr;
  const int32_t* format_violations = nullptr;
  const uint8_t* ended_with_final = nullptr;
  const int32_t* rounds = nullptr;
  const int32_t* tool_calls = nullptr;
  const int32_t* distinct_tools = nullptr;
  const int32_t* tool_counts = nullptr;  // [n, kNumTools]
  const double* tokens = nullptr;
  const double* cost_units = nullptr;
  const double* usd = nullptr;
  const double* latency_s = nullptr;
  const int64_t* group_id = nullptr;
};

inline double feature(const BatchView& b, int64_t i, int f) {
  if (f < kNumTools) return static_cast<double>(b.tool_counts[i * kNumTools + f]);
  if (f == kNumTools) return b.outcome[i];
  if (f == kNumTools + 1) return -b.usd[i];
  return -b.latency_s[i];
}

// Per-group min and max of every toolorchestra feature: [group][feature] pairs.
struct GroupRange {
  std::vector<int64_t> group;
  std::vector<double> lo, hi;
};

inline GroupRange group_ranges(const BatchView& b) {
  GroupRange gr;
  gr.group.resize(b.n);
  const int64_t k = dense_ids(b.group_id, b.n, gr.group.data());
  gr.lo.assign(k * kNumFeatures, INFINITY);
  gr.hi.assign(k * kNumFeatures, -INFINITY);
  for (int64_t i = 0; i < b.n; ++i) {
    double* lo = &gr.lo[gr.group[i] * kNumFeatures];
    double* hi = &gr.hi[gr.group[i] * kNumFeatures];
    for (int f = 0; f < kNumFeatures; ++f) {
      const double v = feature(b, i, f);
      lo[f] = std::min(lo[f], v);
      hi[f] = std::max(hi[f], v);
    }
  }
  return gr;
}

inline double soft_budget(double x, double target, double max_factor) {
  return -std::min(1.0, std::max(0.0, (x - target) / ((max_factor - 1.0) * target)));
}

constexpr int64_t kRewardBlock = 256;

// Score trajectories [b0, b1) under every config. totals: [C, n]; comps: [kNumComponents, n] or null
// (only with C == 1). norm: scratch of kNumFeatures * kRewardBlock doubles.
inline void score_block(const BatchView& b, const double* params, int64_t C, const GroupRange* gr, int64_t b0,
                        int64_t b1, double* totals, double* comps, double* norm) {
  const int64_t m = b1 - b0;
  if (gr != nullptr) {
    for (int64_t j = 0; j < m; ++j) {
      const int64_t i = b0 + j;
      const double* lo = &gr->lo[gr->group[i] * kNumFeatures];
      const double* hi = &gr->hi[gr->group[i] * kNumFeatures];
      for (int f = 0; f < kNumFeatures; ++f) {
        const double span = hi[f] - lo[f];
        norm[f * kRewardBlock + j] = span > 0 ? (feature(b, i, f) - lo[f]) / span : 0.0;
      }
    }
  }
  for (int64_t c = 0; c < C; ++c) {
    const double* p = params + c * kNumRewardParams;
    const int formula = static_cast<int>(p[kFormula]);
    const double thr = p[kCorrectThreshold];
    double* out = totals + c * b.n;
    for (int64_t j = 0; j < m; ++j) {
      const int64_t i = b0 + j;
      const double o = b.outcome[i];
      const double correct = o >= thr ? 1.0 : 0.0;
      double cv[kNumComponents] = {0, 0, 0, 0, 0, 0, 0};
      if (formula == kParamanager) {
        cv[0] = p[kWOutcome] * o;
        const double pen = p[kFormatPenalty] * b.format_violations[i] + p[kNoFinalPenalty] * (1.0 - b.ended_with_final[i]);
        cv[1] = -p[kWProtocol] * std::min(1.0, pen);
        const double par = static_cast<double>(b.tool_calls[i]) / std::max(b.rounds[i], 1);
        const double div = p[kParShare] * std::min(1.0, par / p[kThetaPar]) +
                           (1.0 - p[kParShare]) * std::min(1.0, b.distinct_tools[i] / p[kThetaTool]);
        cv[2] = p[kWDiversity] * div * (p[kDiversityNeedsCorrect] != 0.0 ? correct : 1.0);
        cv[3] = p[kWLength] * soft_budget(b.tokens[i], p[kLTar], p[kBudgetMaxFactor]);
        cv[4] = p[kWCost] * soft_budget(b.cost_units[i], p[kCTar], p[kBudgetMaxFactor]);
      } else if (formula == kToolorchestra) {
        double tools = 0.0;
        for (int f = 0; f < kNumTools; ++f) tools += norm[f * kRewardBlock + j] * correct * p[kPrefTool0 + f];
        cv[6] = tools;
        cv[0] = p[kPrefOutcome] * (norm[kNumTools * kRewardBlock + j] * correct);
        cv[4] = p[kPrefCost] * (norm[(kNumTools + 1) * kRewardBlock + j] * correct);
        cv[5] = p[kPrefLatency] * (norm[(kNumTools + 2) * kRewardBlock + j] * correct);
      } else if (formula == kXrouter) {
        cv[0] = o;
        cv[4] = -o * std::min(p[kUsdScale] * b.usd[i], p[kMaxCostPenalty]);
      } else {  // router_r1
        const bool bad = b.format_violations[i] > 0 || b.ended_with_final[i] == 0;
        const double lo = p[kCostLo], hi = p[kCostHi];
        const double scaled =
            hi > lo ? std::min(1.0, std::max(0.0, (std::sqrt(b.usd[i]) - lo) / (hi - lo))) : 0.0;
        cv[1] = bad ? p[kFormatReward] : 0.0;
        cv[0] = bad ? 0.0 : (1.0 - p[kAlphaCost]) * o;
        cv[4] = bad ? 0.0 : p[kAlphaCost] * correct * (1.0 - scaled);
      }
      double total = 0.0;
      for (int k = 0; k < kNumComponents; ++k) total += cv[k];
      out[i] = total;
      if (comps != nullptr)
        for (int k = 0; k < kNumComponents; ++k) comps[k * b.n + i] = cv[k];
    }
  }
}

// params: [C, kNumRewardParams] (already validated in Python); totals: [C, n]; comps as in score_block.
inline void score_rewards(const BatchView& b, const double* params, int64_t C, double* totals, double* comps) {
  bool need_ranges = false;
  for (int64_t c = 0; c < C; ++c) need_ranges |= static_cast<int>(params[c * kNumRewardParams]) == kToolorchestra;
  GroupRange gr;
  if (need_ranges) gr = group_ranges(b);
  const int64_t nblocks = (b.n + kRewardBlock - 1) / kRewardBlock;
  parallel_for(nblocks, 16, [&](int, int64_t lo, int64_t hi) {
    std::vector<double> norm(need_ranges ? kNumFeatures * kRewardBlock : 0);
    for (int64_t blk = lo; blk < hi; ++blk)
      score_block(b, params, C, need_ranges ? &gr : nullptr, blk * kRewardBlock,
                  std::min(b.n, (blk + 1) * kRewardBlock), totals, comps, norm.data());
  });
}

}  // namespace parasim
