// The argmax of bf16 logits on an x86 CPU with AVX2: the greedy pick of every verified slot, which torch's
// argmax runs ~12x slower than one pass over the row.
// (specviz/models/bf16linear.py builds this file with the others; specviz/engine/sampling.argmax_last calls it.)
#include "bf16_ops.h"

#include <ATen/Parallel.h>

#include <cmath>
#include <limits>

namespace {

inline float hmax(__m256 v) {
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  return _mm_cvtss_f32(_mm_max_ss(m, _mm_movehdup_ps(m)));
}

// The first index of the row's maximum, a NaN counting as the maximum (torch.argmax's answer): one pass for
// the maximum (and whether a NaN is there), a second to its first occurrence.
int64_t row_argmax(const at::BFloat16* p, int64_t V) {
  const int64_t V8 = V / 8 * 8;
  __m256 top = _mm256_set1_ps(-std::numeric_limits<float>::infinity()), nan = _mm256_setzero_ps();
  for (int64_t i = 0; i < V8; i += 8) {
    const __m256 v = widen(p + i);
    nan = _mm256_or_ps(nan, _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
    top = _mm256_max_ps(top, v);
  }
  float best = hmax(top);
  bool has_nan = _mm256_movemask_ps(nan) != 0;
  for (int64_t i = V8; i < V; ++i) {
    const float v = static_cast<float>(p[i]);
    has_nan |= std::isnan(v);
    best = v > best ? v : best;
  }
  if (has_nan) {
    for (int64_t i = 0; i < V; ++i)
      if (std::isnan(static_cast<float>(p[i]))) return i;
  }
  const __m256 b = _mm256_set1_ps(best);
  for (int64_t i = 0; i < V8; i += 8) {
    const int hit = _mm256_movemask_ps(_mm256_cmp_ps(widen(p + i), b, _CMP_EQ_OQ));
    if (hit) return i + __builtin_ctz(hit);
  }
  for (int64_t i = V8; i < V; ++i)
    if (static_cast<float>(p[i]) == best) return i;
  return 0;
}

}  // namespace

// x [N, V] bf16 -> [N] int64: each row's argmax (row_argmax). Rows go to torch's threads a few at a time.
torch::Tensor argmax_rows(torch::Tensor x) {
  TORCH_CHECK(x.dim() == 2 && x.scalar_type() == at::kBFloat16 && x.size(1) > 0, "argmax_rows: bf16 x [N, V > 0]");
  x = x.contiguous();
  const int64_t N = x.size(0), V = x.size(1);
  auto out = torch::empty({N}, x.options().dtype(torch::kLong));
  const at::BFloat16* xp = x.data_ptr<at::BFloat16>();
  int64_t* op = out.data_ptr<int64_t>();
  at::parallel_for(0, N, 4, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) op[r] = row_argmax(xp + r * V, V);
  });
  return out;
}
