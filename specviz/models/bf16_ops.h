// The bf16 ops of bf16_linear.cpp that bf16_layers.cpp chains, and bf16_argmax.cpp's (each documented where it
// is defined).
#pragma once

#include <torch/extension.h>
#include <immintrin.h>

#include <optional>

inline __m256 widen(const at::BFloat16* p) {  // 8 bf16 -> 8 fp32 (a bf16 is the top half of an fp32)
  __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

torch::Tensor linear(torch::Tensor x, torch::Tensor w, std::optional<torch::Tensor> out,
                     std::optional<torch::Tensor> res, bool packed);
torch::Tensor pack(torch::Tensor w);
torch::Tensor rms_norm(torch::Tensor x, torch::Tensor w, double eps);
torch::Tensor silu_mul(torch::Tensor gu);
torch::Tensor rope(torch::Tensor qkv, torch::Tensor cos, torch::Tensor sin, int64_t n);
torch::Tensor attention(torch::Tensor q, torch::Tensor k, torch::Tensor v, torch::Tensor allowed, double scale);
torch::Tensor argmax_rows(torch::Tensor x);
