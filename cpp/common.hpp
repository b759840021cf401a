// Shared pieces of the parasim core: kernel status, a small thread pool-less parallel_for, and dense
// group indexing. Header-only, no Python: kernels see raw pointers and lengths only.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <thread>
#include <vector>

namespace parasim {

// What a kernel reports instead of throwing (it runs without the GIL): a code and the offending index.
// kOverflow: a finite input whose result does not fit the output dtype (an error, never a silent inf).
struct Status {
  enum Code : int { kOk = 0, kNonFinite = 1, kFallback = 2, kBadValue = 3, kOverflow = 4 };
  int code = kOk;
  int64_t index = -1;
  static Status ok() { return {}; }
  bool is_ok() const { return code == kOk; }
};

// Keep the failure with the smallest index so that error messages do not depend on thread timing.
inline Status first_failure(const std::vector<Status>& all) {
  Status best;
  for (const Status& s : all) {
    if (s.is_ok()) continue;
    if (best.is_ok() || s.index < best.index) best = s;
  }
  return best;
}

// Threads used by kernels: PARASIM_NUM_THREADS, else the hardware concurrency. Read once per process:
// hardware_concurrency() reads /sys on Linux, tens of microseconds that small batches would pay per call.
inline int num_threads() {
  static const int count = [] {
    if (const char* env = std::getenv("PARASIM_NUM_THREADS")) {
      int v = std::atoi(env);
      if (v > 0) return v;
    }
    unsigned hw = std::thread::hardware_concurrency();
    return hw == 0 ? 1 : static_cast<int>(hw);
  }();
  return count;
}

// Split [0, n) into one contiguous range per thread and run fn(thread, begin, end); small n runs inline,
// since starting a thread costs tens of microseconds.
template <class Fn>
void parallel_for(int64_t n, int64_t min_per_thread, Fn&& fn) {
  int t = num_threads();
  if (min_per_thread > 0) t = static_cast<int>(std::min<int64_t>(t, std::max<int64_t>(1, n / min_per_thread)));
  if (t <= 1) {
    fn(0, int64_t{0}, n);
    return;
  }
  std::vector<std::thread> pool;
  pool.reserve(t - 1);
  const int64_t chunk = (n + t - 1) / t;
  for (int i = 1; i < t; ++i) {
    int64_t b = std::min(n, i * chunk), e = std::min(n, (i + 1) * chunk);
    pool.emplace_back([&fn, i, b, e] { fn(i, b, e); });
  }
  fn(0, int64_t{0}, std::min(n, chunk));
  for (auto& th : pool) th.join();
}

inline uint64_t mix64(uint64_t x) {  // splitmix64 finalizer: spreads clustered ids over the hash table
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// Map arbitrary integer ids to dense indices 0..k-1 (in order of first appearance); returns k.
// Sorted ids take one pass, a compact id range a direct table, anything else an open-addressing hash.
template <class I>
int64_t dense_ids(const I* ids, int64_t n, int64_t* out) {
  if (n == 0) return 0;
  bool sorted = true;
  I lo = ids[0], hi = ids[0];
  for (int64_t i = 1; i < n; ++i) {
    sorted &= !(ids[i] < ids[i - 1]);
    lo = std::min(lo, ids[i]);
    hi = std::max(hi, ids[i]);
  }
  int64_t k = 0;
  if (sorted) {
    out[0] = 0;
    for (int64_t i = 1; i < n; ++i) out[i] = (ids[i] != ids[i - 1]) ? ++k : k;
    return k + 1;
  }
  const uint64_t range = static_cast<uint64_t>(hi) - static_cast<uint64_t>(lo);
  if (range < static_cast<uint64_t>(2 * n + 1024)) {
    std::vector<int64_t> table(range + 1, -1);
    for (int64_t i = 0; i < n; ++i) {
      int64_t& slot = table[static_cast<uint64_t>(ids[i]) - static_cast<uint64_t>(lo)];
      if (slot < 0) slot = k++;
      out[i] = slot;
    }
    return k;
  }
  uint64_t cap = 1;
  while (cap < static_cast<uint64_t>(2 * n)) cap <<= 1;
  std::vector<I> keys(cap);
  std::vector<int64_t> vals(cap, -1);
  for (int64_t i = 0; i < n; ++i) {
    uint64_t h = mix64(static_cast<uint64_t>(ids[i])) & (cap - 1);
    while (vals[h] >= 0 && keys[h] != ids[i]) h = (h + 1) & (cap - 1);
    if (vals[h] < 0) {
      keys[h] = ids[i];
      vals[h] = k++;
    }
    out[i] = vals[h];
  }
  return k;
}

}  // namespace parasim
