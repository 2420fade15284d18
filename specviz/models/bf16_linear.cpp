// y = x @ w.T for bf16 weights on an x86 CPU with AVX2 and FMA but no native bf16 dot product.
// (specviz/models/bf16linear.py builds and loads this file; its docstring says why it exists.)
//
// Each weight is widened to fp32 in registers (a bf16 is the top half of an fp32) and multiplied in
// fp32, so the weights cross the memory bus at 2 bytes and are never written back widened. Every
// output y[m, n] is ONE 8-lane fp32 accumulator run over k in order, then the same horizontal sum: the
// result of a row does not depend on how many other rows share the call (batch invariant), whichever
// register block computes it.
#include <torch/extension.h>
#include <ATen/Parallel.h>
#include <immintrin.h>

#include <vector>

namespace {

inline __m256 widen(const at::BFloat16* p) {  // 8 bf16 -> 8 fp32
  __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

inline float hsum(__m256 v) {  // one fixed order for every output
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// MB rows of x (fp32, K each) against NB rows of w (bf16, K each): y[m * ldy + n] for the block, rounded
// to Y (fp32, or bf16 to nearest even as torch rounds).
template <int MB, int NB, typename Y>
inline void block(const float* x, const at::BFloat16* w, Y* y, int64_t K, int64_t ldy) {
  __m256 acc[MB][NB];
  for (int m = 0; m < MB; ++m)
    for (int n = 0; n < NB; ++n) acc[m][n] = _mm256_setzero_ps();
  for (int64_t k = 0; k < K; k += 8) {
    if (MB == 1 && (k & 31) == 0)  // one row of x: fetch the next block's weights a block ahead
      for (int n = 0; n < NB; ++n) _mm_prefetch(reinterpret_cast<const char*>(w + (NB + n) * K + k), _MM_HINT_T0);
    __m256 wv[NB];
    for (int n = 0; n < NB; ++n) wv[n] = widen(w + n * K + k);
    for (int m = 0; m < MB; ++m) {
      __m256 xv = _mm256_loadu_ps(x + m * K + k);
      for (int n = 0; n < NB; ++n) acc[m][n] = _mm256_fmadd_ps(xv, wv[n], acc[m][n]);
    }
  }
  for (int m = 0; m < MB; ++m)
    for (int n = 0; n < NB; ++n) y[m * ldy + n] = static_cast<Y>(hsum(acc[m][n]));
}

// NB weight rows against every row of x (pairs of rows, then the odd one).
template <int NB, typename Y>
inline void rows(const float* x, const at::BFloat16* w, Y* y, int64_t M, int64_t K, int64_t N) {
  int64_t m = 0;
  for (; m + 2 <= M; m += 2) block<2, NB>(x + m * K, w, y + m * N, K, N);
  if (m < M) block<1, NB>(x + m * K, w, y + m * N, K, N);
}

// Weight rows in blocks of NB over the threads; the last N % NB rows one by one.
template <int NB, typename Y>
void all_rows(const float* x, const at::BFloat16* w, Y* y, int64_t M, int64_t K, int64_t N) {
  const int64_t blocks = N / NB;
  at::parallel_for(0, blocks, 64 / NB, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) rows<NB>(x, w + b * NB * K, y + b * NB, M, K, N);
  });
  for (int64_t n = blocks * NB; n < N; ++n) rows<1>(x, w + n * K, y + n, M, K, N);
}

template <typename Y>
void run(const float* x, const at::BFloat16* w, Y* y, int64_t M, int64_t K, int64_t N) {
  if (M == 1) {
    all_rows<8>(x, w, y, M, K, N);  // one row of x: more weight streams in flight (8 accumulators)
  } else {
    all_rows<4>(x, w, y, M, K, N);  // 4 x 2 accumulators + 4 weights + x: 13 of 16 ymm
  }
}

}  // namespace

// x [M, K] (bf16 or fp32), w [N, K] bf16, both contiguous, K % 8 == 0 -> y [M, N] in x's dtype, written
// into out when given (contiguous, that shape and dtype: a caller's reused buffer).
torch::Tensor linear(torch::Tensor x, torch::Tensor w, std::optional<torch::Tensor> out) {
  TORCH_CHECK(x.dim() == 2 && w.dim() == 2 && x.size(1) == w.size(1), "bf16_linear: x [M, K], w [N, K]");
  TORCH_CHECK(w.scalar_type() == at::kBFloat16 && w.is_contiguous(), "bf16_linear: w must be contiguous bf16");
  TORCH_CHECK(x.scalar_type() == at::kBFloat16 || x.scalar_type() == at::kFloat, "bf16_linear: x bf16 or fp32");
  const int64_t M = x.size(0), K = x.size(1), N = w.size(0);
  TORCH_CHECK(K % 8 == 0, "bf16_linear: K must be a multiple of 8");
  x = x.contiguous();
  if (out) {
    TORCH_CHECK(out->is_contiguous() && out->scalar_type() == x.scalar_type() && out->numel() == M * N,
                "bf16_linear: out must be a contiguous [M, N] tensor of x's dtype");
  }
  auto y = out ? *out : torch::empty({M, N}, x.options());  // [M, N] in x's dtype
  const at::BFloat16* wp = w.data_ptr<at::BFloat16>();
  if (x.scalar_type() == at::kFloat) {
    run(x.data_ptr<float>(), wp, y.data_ptr<float>(), M, K, N);
    return y;
  }
  static thread_local std::vector<float> xf;  // [M, K] x widened once: small next to w
  xf.resize(M * K);
  const at::BFloat16* xb = x.data_ptr<at::BFloat16>();
  for (int64_t i = 0; i < M * K; i += 8) _mm256_storeu_ps(xf.data() + i, widen(xb + i));
  run(xf.data(), wp, y.data_ptr<at::BFloat16>(), M, K, N);
  return y;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("linear", &linear, "x @ w.T, bf16 weights widened in registers", py::arg("x"), py::arg("w"),
        py::arg("out") = py::none());
}
