// y = x @ w.T for bf16 weights on an x86 CPU with AVX2 and FMA but no native bf16 dot product, and the
// lean forward's other steps around it (RMSNorm, silu(gate) * up, rotary, few-query attention) fused for bf16.
// (specviz/models/bf16linear.py builds and loads this file with bf16_layers.cpp; its docstring says why they exist.)
//
// Each weight is widened to fp32 in registers (a bf16 is the top half of an fp32) and multiplied in
// fp32, so the weights cross the memory bus at 2 bytes and are never written back widened. Every
// output y[m, n] is ONE 8-lane fp32 accumulator run over k in order, then the same horizontal sum: the
// result of a row does not depend on how many other rows share the call (batch invariant), whichever
// register block computes it.
#include "bf16_ops.h"

#include <torch/extension.h>
#include <ATen/Parallel.h>
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <tuple>
#include <vector>

namespace {

inline float hsum(__m256 v) {  // one fixed order for every output
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

constexpr int64_t PREFETCH = 4096;  // elements ahead a one-row pass over a packed block fetches (8 KB)

// MB rows of x (fp32, K each) against NB rows of w (bf16, K each) -> out[m * NB + n], fp32. PACKED: w points
// into a packed block (below: row n's k-th 8 columns at w + k * 8 + n * 8), else at the first of NB plain rows
// (row n at w + n * K). Kept out of line: inlined into block's bf16-output instantiation, gcc compiled this loop
// at half the speed of the fp32 one (46 against 85 GFLOP/s for 13-40 rows on a 2-core AVX2 EPYC).
template <int MB, int NB, bool PACKED>
__attribute__((noinline)) void dots(const float* x, const at::BFloat16* w, float* out, int64_t K, bool ahead) {
  const int64_t sn = PACKED ? 8 : K, sk = PACKED ? 8 : 1;
  __m256 acc[MB][NB];
  for (int m = 0; m < MB; ++m)
    for (int n = 0; n < NB; ++n) acc[m][n] = _mm256_setzero_ps();
  for (int64_t k = 0; k < K; k += 8) {
    if (MB == 1 && PACKED) {  // one contiguous run: fetch PREFETCH elements ahead
      _mm_prefetch(reinterpret_cast<const char*>(w + k * sk + PREFETCH), _MM_HINT_T0);
      _mm_prefetch(reinterpret_cast<const char*>(w + k * sk + PREFETCH + 32), _MM_HINT_T0);
    } else if (!PACKED && ahead && (k & 31) == 0) {  // NB plain rows: fetch the next block's weights
      for (int n = 0; n < NB; ++n) _mm_prefetch(reinterpret_cast<const char*>(w + (NB + n) * K + k), _MM_HINT_T0);
    }
    __m256 wv[NB];
    for (int n = 0; n < NB; ++n) wv[n] = widen(w + n * sn + k * sk);
    for (int m = 0; m < MB; ++m) {
      __m256 xv = _mm256_loadu_ps(x + m * K + k);
      for (int n = 0; n < NB; ++n) acc[m][n] = _mm256_fmadd_ps(xv, wv[n], acc[m][n]);
    }
  }
  for (int m = 0; m < MB; ++m)
    for (int n = 0; n < NB; ++n) out[m * NB + n] = hsum(acc[m][n]);
}

// The block's products into y[m * ldy + n], rounded to Y (fp32, or bf16 to nearest even as torch rounds); plus
// res[m * ldy + n] when given, rounded again (what `res + y` computes on the rounded y).
template <int MB, int NB, bool PACKED, typename Y>
inline void block(const float* x, const at::BFloat16* w, Y* y, const Y* res, int64_t K, int64_t ldy,
                  bool ahead = false) {
  float out[MB * NB];
  dots<MB, NB, PACKED>(x, w, out, K, ahead);
  for (int m = 0; m < MB; ++m)
    for (int n = 0; n < NB; ++n) {
      const Y v = static_cast<Y>(out[m * NB + n]);
      y[m * ldy + n] = res ? static_cast<Y>(static_cast<float>(res[m * ldy + n]) + static_cast<float>(v)) : v;
    }
}

// NB weight rows against every row of x: with 3 weight rows, groups of 4 rows (12 accumulators + 3 weights + x:
// all 16 ymm), then one group of 3 where 3 or 5 rows are left (4 + 1 taken as 3 + 2: a 1 x 3 block keeps only 3
// FMA chains in flight, too few to hide their latency; 3 rows as 2 + 1 ran 1.2x slower than 4 rows), then pairs,
// then the odd one. The first pass over the weights also fetches the next block's.
template <int NB, typename Y>
inline void rows(const float* x, const at::BFloat16* w, Y* y, const Y* res, int64_t M, int64_t K, int64_t N) {
  int64_t m = 0;
  if constexpr (NB == 3) {
    const int64_t fours = M >= 5 && M % 4 == 1 ? M / 4 - 1 : M / 4;
    for (; m < 4 * fours; m += 4)
      block<4, NB, false>(x + m * K, w, y + m * N, res ? res + m * N : nullptr, K, N, m == 0);
    if (M - m >= 3) {
      block<3, NB, false>(x + m * K, w, y + m * N, res ? res + m * N : nullptr, K, N, m == 0);
      m += 3;
    }
  }
  for (; m + 2 <= M; m += 2) block<2, NB, false>(x + m * K, w, y + m * N, res ? res + m * N : nullptr, K, N, m == 0);
  if (m < M) block<1, NB, false>(x + m * K, w, y + m * N, res ? res + m * N : nullptr, K, N, m == 0);
}

// Weight rows in blocks of NB over the threads; the last N % NB rows one by one.
template <int NB, typename Y>
void all_rows(const float* x, const at::BFloat16* w, Y* y, const Y* res, int64_t M, int64_t K, int64_t N) {
  const int64_t blocks = N / NB;
  at::parallel_for(0, blocks, 64 / NB, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) rows<NB>(x, w + b * NB * K, y + b * NB, res ? res + b * NB : nullptr, M, K, N);
  });
  for (int64_t n = blocks * NB; n < N; ++n) rows<1>(x, w + n * K, y + n, res ? res + n : nullptr, M, K, N);
}

// Rows of x per pass over the weights: every block of weight rows re-reads all the x rows of its pass, so a pass's
// x must stay in cache. The down projection (in = 1536) over 3840 rows in one pass (23.6 MB of x) ran at 49-64
// GFLOP/s against 101-136 over 256 rows on a 2-core AVX2 EPYC, and at 73-127 in passes of X_PASS_BYTES of x
// (bench/prefill.py, BENCHMARKS.md).
constexpr int64_t X_PASS_BYTES = 1 << 21;

template <typename Y>
void run(const float* x, const at::BFloat16* w, Y* y, const Y* res, int64_t M, int64_t K, int64_t N) {
  const int64_t pass = std::max<int64_t>(16, X_PASS_BYTES / (4 * K) / 4 * 4);  // a multiple of the 4-row groups
  if (M > pass) {  // the same bits: each output is its own accumulator whichever pass and block computes it
    for (int64_t m = 0; m < M; m += pass)
      run(x + m * K, w, y + m * N, res ? res + m * N : nullptr, std::min(pass, M - m), K, N);
    return;
  }
  if (M == 1) {
    all_rows<8>(x, w, y, res, M, K, N);  // one row of x: more weight streams in flight (8 accumulators)
  } else {  // 4 x 3 blocks: 12 accumulators, each weight load used 4 times; 2 rows as 2 x 3 (three weight streams
    // ran 1.03-1.2x faster than four, 2 x 4, single-threaded over 35 MB of weights)
    all_rows<3>(x, w, y, res, M, K, N);
  }
}

// ---- the same product over a packed copy of w ------------------------------------------------------------
// w [N, K] repacked once as [N / 8, K / 8, 8, 8]: each block of 8 rows is one contiguous run, its k-th 8 columns
// of all 8 rows side by side (128 bytes), so a thread streams one address range instead of 8 rows at once and
// a prefetch PREFETCH elements ahead keeps it in flight (one row of x: 18-19 GB/s against 12.5-13.5 for the
// plain layout on a 2-core AVX2 EPYC). Each output is still one 8-lane accumulator over k in order: the same
// bits as the plain layout, at any row count.

template <typename Y>
void run_packed(const float* x, const at::BFloat16* wp, Y* y, const Y* res, int64_t M, int64_t K, int64_t N) {
  at::parallel_for(0, N / 8, 8, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {
      const at::BFloat16* wb = wp + b * 8 * K;
      Y* yb = y + b * 8;
      const Y* rb = res ? res + b * 8 : nullptr;
      if (M == 1) {
        block<1, 8, true>(x, wb, yb, rb, K, N);
        continue;
      }
      for (int h = 0; h < 8; h += 4) {  // half a block at a time: 2 x 4 accumulators, as the plain layout's
        int64_t m = 0;
        for (; m + 2 <= M; m += 2)
          block<2, 4, true>(x + m * K, wb + h * 8, yb + m * N + h, rb ? rb + m * N + h : nullptr, K, N);
        if (m < M) block<1, 4, true>(x + m * K, wb + h * 8, yb + m * N + h, rb ? rb + m * N + h : nullptr, K, N);
      }
    }
  });
}

// ---- the lean forward's elementwise steps, fused, for bf16 rows on the same CPUs ---------------------------
// Each rounds to bf16 where the eager torch ops it replaces round (the same bits wherever the arithmetic is
// exact: products of two bf16, sums of two, negation), so the lean forward's bf16 output moves only by the
// fp32 reductions and exp below. Rows are independent and each is computed in one fixed order (batch
// invariant). Rows go to torch's threads in chunks large enough that one decode step's few rows stay on one.

inline __m128i round_bf16(__m256 v) {  // 8 fp32 -> 8 bf16, to nearest even (finite values, as c10 rounds)
  __m256i b = _mm256_castps_si256(v);
  __m256i odd = _mm256_and_si256(_mm256_srli_epi32(b, 16), _mm256_set1_epi32(1));
  b = _mm256_srli_epi32(_mm256_add_epi32(b, _mm256_add_epi32(odd, _mm256_set1_epi32(0x7FFF))), 16);
  return _mm_packus_epi32(_mm256_castsi256_si128(b), _mm256_extracti128_si256(b, 1));
}

inline __m256 bf16_round(__m256 v) {  // v rounded to bf16 and widened back: what a bf16 tensor holds
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(round_bf16(v)), 16));
}

inline void store_bf16(at::BFloat16* p, __m256 v) {
  _mm_storeu_si128(reinterpret_cast<__m128i*>(p), round_bf16(v));
}

// e^x for 8 floats: x = n ln2 + r, |r| <= ln2 / 2, e^r by its degree-6 Taylor polynomial (relative error
// under 2e-7, below a bf16's half ulp of 2e-3), 2^n put in the exponent. Clamped to +-87 (fp32's range).
inline __m256 exp8(__m256 x) {
  x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(-87.0f)), _mm256_set1_ps(87.0f));
  __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504f)), _MM_FROUND_TO_NEAREST_INT);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);  // ln2 in two parts (Cephes' split)
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
  __m256 p = _mm256_set1_ps(1.0f / 720);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 120));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 24));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 6));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
}

constexpr int64_t ROW_GRAIN = 16;  // rows per thread chunk: a decode step's rows run on the calling thread

}  // namespace

// x [M, K] bf16, w [K] bf16 -> bf16(w * bf16(x * rsqrt(mean(x^2) + eps))) per row: transformers'
// LlamaRMSNorm (norm in fp32, cast, then scale) in one pass.
torch::Tensor rms_norm(torch::Tensor x, torch::Tensor w, double eps) {
  const int64_t K = x.size(-1);
  TORCH_CHECK(x.scalar_type() == at::kBFloat16 && w.scalar_type() == at::kBFloat16 && w.numel() == K && K % 8 == 0,
              "rms_norm: bf16 x [..., K], bf16 w [K], K % 8 == 0");
  x = x.contiguous();
  w = w.contiguous();
  auto y = torch::empty_like(x);  // [..., K]
  const at::BFloat16 *xp = x.data_ptr<at::BFloat16>(), *wp = w.data_ptr<at::BFloat16>();
  at::BFloat16* yp = y.data_ptr<at::BFloat16>();
  at::parallel_for(0, x.numel() / K, ROW_GRAIN, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const at::BFloat16* xr = xp + r * K;
      __m256 acc = _mm256_setzero_ps();
      for (int64_t k = 0; k < K; k += 8) {
        __m256 v = widen(xr + k);
        acc = _mm256_fmadd_ps(v, v, acc);
      }
      const __m256 inv = _mm256_set1_ps(1.0f / std::sqrt(hsum(acc) / K + static_cast<float>(eps)));
      for (int64_t k = 0; k < K; k += 8)
        store_bf16(yp + r * K + k, _mm256_mul_ps(widen(wp + k), bf16_round(_mm256_mul_ps(widen(xr + k), inv))));
    }
  });
  return y;
}

// gu [..., 2N] bf16 (gate | up) -> [..., N] bf16(bf16(silu(gate)) * up): the MLP's F.silu(gate) * up.
torch::Tensor silu_mul(torch::Tensor gu) {
  const int64_t N2 = gu.size(-1), N = N2 / 2;
  TORCH_CHECK(gu.scalar_type() == at::kBFloat16 && N2 % 16 == 0, "silu_mul: bf16 [..., 2N], N % 8 == 0");
  gu = gu.contiguous();
  auto sizes = gu.sizes().vec();
  sizes.back() = N;
  auto y = torch::empty(sizes, gu.options());  // [..., N]
  const at::BFloat16* gp = gu.data_ptr<at::BFloat16>();
  at::BFloat16* yp = y.data_ptr<at::BFloat16>();
  const __m256 one = _mm256_set1_ps(1.0f);
  at::parallel_for(0, gu.numel() / N2, ROW_GRAIN, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r)
      for (int64_t n = 0; n < N; n += 8) {
        __m256 g = widen(gp + r * N2 + n), u = widen(gp + r * N2 + N + n);
        __m256 s = bf16_round(_mm256_div_ps(g, _mm256_add_ps(one, exp8(_mm256_sub_ps(_mm256_setzero_ps(), g)))));
        store_bf16(yp + r * N + n, _mm256_mul_ps(s, u));
      }
  });
  return y;
}

// qkv [R, heads, d] bf16, cos/sin [R, d] bf16 -> the first n heads rotated, [R, n, d] bf16:
// bf16(bf16(x * cos) + bf16(rotate_half(x) * sin)), as the eager _rotate rounds.
torch::Tensor rope(torch::Tensor qkv, torch::Tensor cos, torch::Tensor sin, int64_t n) {
  TORCH_CHECK(qkv.dim() == 3 && qkv.scalar_type() == at::kBFloat16 && cos.scalar_type() == at::kBFloat16 &&
              sin.scalar_type() == at::kBFloat16, "rope: bf16 qkv [R, heads, d], bf16 cos/sin [R, d]");
  const int64_t R = qkv.size(0), heads = qkv.size(1), d = qkv.size(2), half = d / 2;
  TORCH_CHECK(n <= heads && half % 8 == 0 && cos.numel() == R * d && sin.numel() == R * d, "rope: shapes");
  qkv = qkv.contiguous();
  cos = cos.contiguous();
  sin = sin.contiguous();
  auto y = torch::empty({R, n, d}, qkv.options());  // [R, n, d]
  const at::BFloat16 *xp = qkv.data_ptr<at::BFloat16>(), *cp = cos.data_ptr<at::BFloat16>(),
                     *sp = sin.data_ptr<at::BFloat16>();
  at::BFloat16* yp = y.data_ptr<at::BFloat16>();
  const __m256 sign = _mm256_set1_ps(-0.0f);
  at::parallel_for(0, R, ROW_GRAIN, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r)
      for (int64_t h = 0; h < n; ++h) {
        const at::BFloat16* x = xp + (r * heads + h) * d;
        at::BFloat16* out = yp + (r * n + h) * d;
        for (int64_t i = 0; i < half; i += 8) {
          __m256 lo = widen(x + i), hi = widen(x + half + i);
          __m256 c0 = widen(cp + r * d + i), c1 = widen(cp + r * d + half + i);
          __m256 s0 = widen(sp + r * d + i), s1 = widen(sp + r * d + half + i);
          // first half: x * cos + (-x_hi) * sin; second half: x * cos + x_lo * sin
          store_bf16(out + i, _mm256_add_ps(bf16_round(_mm256_mul_ps(lo, c0)),
                                            bf16_round(_mm256_mul_ps(_mm256_xor_ps(hi, sign), s0))));
          store_bf16(out + half + i, _mm256_add_ps(bf16_round(_mm256_mul_ps(hi, c1)),
                                                   bf16_round(_mm256_mul_ps(lo, s1))));
        }
      }
  });
  return y;
}

// Attention of a few new query slots per row over the cache: q [B, H, T, d], k/v [B, Hkv, L, d] (bf16, any
// strides), allowed [B, T, L] bool -> [B, T, H * d] bf16. Query head h reads kv head h / (H / Hkv). In fp32:
// scores q.k * scale over the allowed slots, softmax, the probabilities' weighted sum of v, rounded once
// (what the eager path's fp32 matmuls and softmax compute, with its sums in another order). Each key row is
// widened once for all T queries of a head; exp runs 8 slots at a time (exp8); D: the head size when it is
// known at compile time (the registers hold a whole row), 0 for any other multiple of 8 up to MAX_D.
constexpr int64_t MAX_D = 256;

template <int D>
void attend(const at::BFloat16* qh, const at::BFloat16* kh, const at::BFloat16* vh, const bool* seen,
            at::BFloat16* out, int64_t T, int64_t L, int64_t d, int64_t out_stride, float scale,
            std::vector<float>& qf, std::vector<float>& p) {
  const int64_t dd = D ? D : d, J = dd / 8, Lp = (L + 7) / 8 * 8;  // p rows padded to whole 8-slot groups
  qf.resize(T * dd);
  p.assign(T * Lp, -INFINITY);
  for (int64_t i = 0; i < T * dd; i += 8) _mm256_storeu_ps(qf.data() + i, widen(qh + i));
  __m256 r[D ? D / 8 : MAX_D / 8];
  for (int64_t l = 0; l < L; ++l) {  // scores: one key row in registers against every query that sees it
    bool any = false;
    for (int64_t t = 0; t < T; ++t) any |= seen[t * L + l];
    if (!any) continue;
    for (int64_t j = 0; j < J; ++j) r[j] = widen(kh + l * dd + j * 8);
    for (int64_t t = 0; t < T; ++t) {
      if (!seen[t * L + l]) continue;
      __m256 s = _mm256_setzero_ps();
      for (int64_t j = 0; j < J; ++j) s = _mm256_fmadd_ps(_mm256_loadu_ps(qf.data() + t * dd + j * 8), r[j], s);
      p[t * Lp + l] = hsum(s) * scale;
    }
  }
  const __m256 none = _mm256_set1_ps(-INFINITY);
  for (int64_t t = 0; t < T; ++t) {
    float* pt = p.data() + t * Lp;
    __m256 top = none;
    for (int64_t l = 0; l < Lp; l += 8) top = _mm256_max_ps(top, _mm256_loadu_ps(pt + l));
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(top), _mm256_extractf128_ps(top, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_movehdup_ps(m));
    const __m256 tv = _mm256_set1_ps(_mm_cvtss_f32(m));
    for (int64_t l = 0; l < Lp; l += 8) {  // e^(p - top), 0 where masked
      const __m256 pv = _mm256_loadu_ps(pt + l);
      _mm256_storeu_ps(pt + l, _mm256_and_ps(exp8(_mm256_sub_ps(pv, tv)), _mm256_cmp_ps(pv, none, _CMP_NEQ_OQ)));
    }
    // summed one slot after another: a masked slot adds an exact 0, so the sum, like the weighted sum below,
    // does not depend on where the masked slots are (a row whose cache has holes gets the bits of one without;
    // 8 lanes by slot position would not)
    float total = 0.0f;
    for (int64_t l = 0; l < L; ++l) total += pt[l];
    for (int64_t j = 0; j < J; ++j) r[j] = _mm256_setzero_ps();
    for (int64_t l = 0; l < L; ++l) {  // the probabilities' weighted sum of v, in registers
      if (!seen[t * L + l]) continue;
      const __m256 ev = _mm256_set1_ps(pt[l]);
      for (int64_t j = 0; j < J; ++j) r[j] = _mm256_fmadd_ps(ev, widen(vh + l * dd + j * 8), r[j]);
    }
    const __m256 inv = _mm256_set1_ps(1.0f / total);
    for (int64_t j = 0; j < J; ++j) store_bf16(out + t * out_stride + j * 8, _mm256_mul_ps(r[j], inv));
  }
}

torch::Tensor attention(torch::Tensor q, torch::Tensor k, torch::Tensor v, torch::Tensor allowed, double scale) {
  TORCH_CHECK(q.dim() == 4 && k.dim() == 4 && v.dim() == 4 && q.scalar_type() == at::kBFloat16 &&
              k.scalar_type() == at::kBFloat16 && v.scalar_type() == at::kBFloat16 &&
              allowed.scalar_type() == at::kBool, "attention: bf16 q [B, H, T, d], k/v [B, Hkv, L, d], bool mask");
  q = q.contiguous();
  k = k.contiguous();
  v = v.contiguous();
  allowed = allowed.contiguous();
  const int64_t B = q.size(0), H = q.size(1), T = q.size(2), d = q.size(3), Hkv = k.size(1), L = k.size(2);
  TORCH_CHECK(d % 8 == 0 && d <= MAX_D && H % Hkv == 0 && allowed.numel() == B * T * L, "attention: shapes");
  auto y = torch::empty({B, T, H * d}, q.options());  // [B, T, H * d]
  const at::BFloat16 *qp = q.data_ptr<at::BFloat16>(), *kp = k.data_ptr<at::BFloat16>(),
                     *vp = v.data_ptr<at::BFloat16>();
  const bool* mp = allowed.data_ptr<bool>();
  at::BFloat16* yp = y.data_ptr<at::BFloat16>();
  const int64_t G = H / Hkv, grain = std::max<int64_t>(1, (1 << 16) / std::max<int64_t>(1, T * L * d));
  at::parallel_for(0, B * H, grain, [&](int64_t i0, int64_t i1) {
    std::vector<float> qf, p;
    for (int64_t i = i0; i < i1; ++i) {
      const int64_t b = i / H, h = i % H, kvh = h / G;
      const at::BFloat16 *qh = qp + (b * H + h) * T * d, *kh = kp + (b * Hkv + kvh) * L * d,
                         *vh = vp + (b * Hkv + kvh) * L * d;
      at::BFloat16* out = yp + b * T * H * d + h * d;
      const float sc = static_cast<float>(scale);
      if (d == 64) {
        attend<64>(qh, kh, vh, mp + b * T * L, out, T, L, d, H * d, sc, qf, p);
      } else {
        attend<0>(qh, kh, vh, mp + b * T * L, out, T, L, d, H * d, sc, qf, p);
      }
    }
  });
  return y;
}

torch::Tensor pack(torch::Tensor w) {  // w [N, K] bf16, N % 8 == 0, K % 8 == 0 -> [N / 8, K / 8, 8, 8]
  TORCH_CHECK(w.dim() == 2 && w.size(0) % 8 == 0 && w.size(1) % 8 == 0 && w.scalar_type() == at::kBFloat16,
              "bf16_linear.pack: bf16 [N, K] with N and K multiples of 8");
  return w.view({w.size(0) / 8, 8, w.size(1) / 8, 8}).permute({0, 2, 1, 3}).contiguous();
}

// x [M, K] (bf16 or fp32), w [N, K] bf16 (or, with packed, its pack(): N = 8 x packed's first size), both
// contiguous, K % 8 == 0 -> y [M, N] in x's dtype, written into out when given (contiguous, that shape and dtype:
// a caller's reused buffer); res + y when res (a residual of y's shape and dtype) is given.
torch::Tensor linear(torch::Tensor x, torch::Tensor w, std::optional<torch::Tensor> out,
                     std::optional<torch::Tensor> res, bool packed) {
  TORCH_CHECK(w.scalar_type() == at::kBFloat16 && w.is_contiguous(), "bf16_linear: w must be contiguous bf16");
  TORCH_CHECK(x.scalar_type() == at::kBFloat16 || x.scalar_type() == at::kFloat, "bf16_linear: x bf16 or fp32");
  const bool shapes = packed ? w.dim() == 4 && x.size(1) == w.size(1) * 8 : w.dim() == 2 && x.size(1) == w.size(1);
  TORCH_CHECK(x.dim() == 2 && shapes, "bf16_linear: x [M, K], w [N, K] (or its pack)");
  const int64_t M = x.size(0), K = x.size(1), N = packed ? w.size(0) * 8 : w.size(0);
  TORCH_CHECK(K % 8 == 0, "bf16_linear: K must be a multiple of 8");
  x = x.contiguous();
  if (out) {
    TORCH_CHECK(out->is_contiguous() && out->scalar_type() == x.scalar_type() && out->numel() == M * N,
                "bf16_linear: out must be a contiguous [M, N] tensor of x's dtype");
  }
  torch::Tensor r;  // [M, N] in x's dtype, or undefined
  if (res) {
    TORCH_CHECK(res->scalar_type() == x.scalar_type() && res->numel() == M * N, "bf16_linear: res must be [M, N]");
    r = res->contiguous();
  }
  auto y = out ? *out : torch::empty({M, N}, x.options());  // [M, N] in x's dtype
  const at::BFloat16* wp = w.data_ptr<at::BFloat16>();
  auto go = [&](const float* xs, auto* yp, const auto* rp) {
    if (packed) {
      run_packed(xs, wp, yp, rp, M, K, N);
    } else {
      run(xs, wp, yp, rp, M, K, N);
    }
  };
  if (x.scalar_type() == at::kFloat) {
    go(x.data_ptr<float>(), y.data_ptr<float>(), r.defined() ? r.data_ptr<float>() : nullptr);
    return y;
  }
  static thread_local std::vector<float> xf;  // [M, K] x widened once: small next to w
  xf.resize(M * K);
  const at::BFloat16* xb = x.data_ptr<at::BFloat16>();
  for (int64_t i = 0; i < M * K; i += 8) _mm256_storeu_ps(xf.data() + i, widen(xb + i));
  go(xf.data(), y.data_ptr<at::BFloat16>(), r.defined() ? r.data_ptr<at::BFloat16>() : nullptr);
  return y;
}
