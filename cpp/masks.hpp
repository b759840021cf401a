// Token loss masks from span tables, per-turn indices, broadcasting of per-sequence (or per-turn) values
// to tokens, and per-row token counts. Rows are independent, so they are split across threads; each row
// (a few KiB) is written while it sits in L1, which keeps the kernel at memset speed.
#pragma once

#include <cstring>

#include "common.hpp"

namespace parasim {

// Rows per thread so that each thread gets at least PARASIM_THREAD_MIN_BYTES of output (default 64 MiB):
// a mask that fits the last-level cache is written at cache speed by one core, and a second thread there
// only adds start-up and, on a busy machine, waiting for the slower thread (docs/performance.md).
inline int64_t rows_per_thread(int64_t row_bytes) {
  static const int64_t min_bytes = [] {
    const char* env = std::getenv("PARASIM_THREAD_MIN_BYTES");
    const long long v = env != nullptr ? std::atoll(env) : 0;
    return v > 0 ? static_cast<int64_t>(v) : (int64_t{64} << 20);
  }();
  return std::max<int64_t>(1, min_bytes / std::max<int64_t>(row_bytes, 1));
}

struct SpanTable {
  int64_t rows = 0;                   // B
  int64_t spans = 0;                  // S
  const int64_t* offsets = nullptr;   // [B + 1]: row b owns spans offsets[b] .. offsets[b + 1]
  const int64_t* starts = nullptr;    // [S]
  const int64_t* ends = nullptr;      // [S], exclusive; may pass seq_len (truncated)
  const uint8_t* trainable = nullptr; // [S]
};

// Field codes for error messages: 0 offsets, 1 starts, 2 ends.
struct SpanError {
  int field = -1;
  int64_t index = -1;
};

inline SpanError validate_spans(const SpanTable& t) {
  if (t.offsets[0] != 0) return {0, 0};
  for (int64_t b = 0; b < t.rows; ++b)
    if (t.offsets[b + 1] < t.offsets[b] || t.offsets[b + 1] > t.spans) return {0, b + 1};
  if (t.offsets[t.rows] != t.spans) return {0, t.rows};
  for (int64_t s = 0; s < t.spans; ++s) {
    if (t.starts[s] < 0) return {1, s};
    if (t.ends[s] < t.starts[s]) return {2, s};
  }
  return {};
}

// mask [B, T] uint8; turn [B, T] int32 or null; counts [B] int64 (trainable tokens per row).
inline void build_loss_mask(const SpanTable& t, int64_t seq_len, const uint8_t* truncated, bool mask_truncated,
                            uint8_t* mask, int32_t* turn, int64_t* counts) {
  const int64_t row_bytes = seq_len * static_cast<int64_t>(turn != nullptr ? 1 + sizeof(int32_t) : 1);
  parallel_for(t.rows, rows_per_thread(row_bytes), [&](int, int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {
      uint8_t* row = mask + b * seq_len;
      int32_t* trow = turn != nullptr ? turn + b * seq_len : nullptr;
      const int64_t s0 = t.offsets[b], s1 = t.offsets[b + 1];
      bool over = truncated != nullptr && truncated[b] != 0;
      for (int64_t s = s0; s < s1 && !over; ++s) over = t.ends[s] > seq_len;
      counts[b] = 0;
      if (mask_truncated && over) {
        std::memset(row, 0, static_cast<size_t>(seq_len));
        if (trow != nullptr) std::fill(trow, trow + seq_len, -1);
        continue;
      }
      bool sorted = true;  // sorted, non-overlapping spans: write every byte once, gaps and spans in order
      for (int64_t s = s0 + 1; s < s1 && sorted; ++s) sorted = t.starts[s] >= t.ends[s - 1];
      int32_t k = 0;
      int64_t count = 0;
      if (sorted) {
        int64_t pos = 0;
        for (int64_t s = s0; s < s1; ++s) {
          const int64_t lo = std::min(t.starts[s], seq_len), hi = std::min(t.ends[s], seq_len);
          std::memset(row + pos, 0, static_cast<size_t>(lo - pos));
          std::memset(row + lo, t.trainable[s] ? 1 : 0, static_cast<size_t>(hi - lo));
          if (trow != nullptr) {
            std::fill(trow + pos, trow + lo, -1);
            std::fill(trow + lo, trow + hi, t.trainable[s] ? k : -1);
          }
          if (t.trainable[s]) {
            count += hi - lo;
            ++k;
          }
          pos = hi;
        }
        std::memset(row + pos, 0, static_cast<size_t>(seq_len - pos));
        if (trow != nullptr) std::fill(trow + pos, trow + seq_len, -1);
      } else {
        std::memset(row, 0, static_cast<size_t>(seq_len));
        if (trow != nullptr) std::fill(trow, trow + seq_len, -1);
        for (int64_t s = s0; s < s1; ++s) {
          if (!t.trainable[s]) continue;
          const int64_t lo = std::min(t.starts[s], seq_len), hi = std::min(t.ends[s], seq_len);
          std::memset(row + lo, 1, static_cast<size_t>(hi - lo));
          if (trow != nullptr) std::fill(trow + lo, trow + hi, k);
          ++k;
        }
        for (int64_t s = s0; s < s1; ++s) {
          if (t.trainable[s]) continue;
          const int64_t lo = std::min(t.starts[s], seq_len), hi = std::min(t.ends[s], seq_len);
          std::memset(row + lo, 0, static_cast<size_t>(hi - lo));
          if (trow != nullptr) std::fill(trow + lo, trow + hi, -1);
        }
        for (int64_t j = 0; j < seq_len; ++j) count += row[j];
      }
      counts[b] = count;
    }
  });
}

// out[b, t] = values[b * stride + (turn ? turn[b, t] : 0)] where mask[b, t] != 0 (and turn >= 0), else 0.
// Turn indices at or past `width` are a caller error and reported through bad_index (first one found).
template <class T>
int64_t broadcast_to_tokens(const T* values, int64_t width, const uint8_t* mask, const int32_t* turn, int64_t rows,
                            int64_t seq_len, T* out) {
  std::vector<int64_t> bad(num_threads(), -1);
  parallel_for(rows, rows_per_thread(seq_len * static_cast<int64_t>(sizeof(T))), [&](int k, int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {
      const uint8_t* m = mask + b * seq_len;
      T* o = out + b * seq_len;
      if (turn == nullptr) {
        const T v = values[b];
        for (int64_t j = 0; j < seq_len; ++j) o[j] = m[j] ? v : T(0);
        continue;
      }
      const int32_t* tr = turn + b * seq_len;
      for (int64_t j = 0; j < seq_len; ++j) {
        const int32_t q = tr[j];
        if (m[j] && q >= 0) {
          if (q >= width) {
            if (bad[k] < 0) bad[k] = b * seq_len + j;
            o[j] = T(0);
          } else {
            o[j] = values[b * width + q];
          }
        } else {
          o[j] = T(0);
        }
      }
    }
  });
  int64_t first = -1;
  for (int64_t v : bad)
    if (v >= 0 && (first < 0 || v < first)) first = v;
  return first;
}

inline void mask_row_counts(const uint8_t* mask, int64_t rows, int64_t seq_len, int64_t* counts) {
  parallel_for(rows, rows_per_thread(seq_len), [&](int, int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {
      const uint8_t* m = mask + b * seq_len;
      int64_t c = 0;
      for (int64_t j = 0; j < seq_len; ++j) c += (m[j] != 0);
      counts[b] = c;
    }
  });
}

}  // namespace parasim
