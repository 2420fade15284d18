// The bf16 ops of bf16_linear.cpp that bf16_layers.cpp chains (each documented where it is defined).
#pragma once

#include <torch/extension.h>

#include <optional>

torch::Tensor linear(torch::Tensor x, torch::Tensor w, std::optional<torch::Tensor> out,
                     std::optional<torch::Tensor> res, bool packed);
torch::Tensor pack(torch::Tensor w);
torch::Tensor rms_norm(torch::Tensor x, torch::Tensor w, double eps);
torch::Tensor silu_mul(torch::Tensor gu);
torch::Tensor rope(torch::Tensor qkv, torch::Tensor cos, torch::Tensor sin, int64_t n);
torch::Tensor attention(torch::Tensor q, torch::Tensor k, torch::Tensor v, torch::Tensor allowed, double scale);
