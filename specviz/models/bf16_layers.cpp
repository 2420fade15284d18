// The lean forward's decoder layers for a few query slots per row, chained here instead of from Python: the
// ops of bf16_linear.cpp in the order fastllama calls them, so the same bits, and one Python call for all the
// layers of a forward instead of a dozen per layer (on a 2-core EPYC, B = 1: ~4 ms of a ~17 ms step was
// Python between the kernels). Each weight is plain [N, K] or its pack (the caller picks, as for linear).
#include "bf16_ops.h"

#include <torch/extension.h>

#include <optional>
#include <tuple>
#include <vector>

namespace {

// h [..., D] -> (the first n heads of qkv rotated [R, n, d], qkv [R, heads, d]), R = h's rows: the attention's
// input norm, the fused q|k|v projection and the rotary embedding.
std::tuple<torch::Tensor, torch::Tensor> attn_in(torch::Tensor h, torch::Tensor norm_w, double eps, torch::Tensor qkv_w,
                                                 bool qkv_packed, torch::Tensor cos, torch::Tensor sin, int64_t heads,
                                                 int64_t n) {
  auto x = rms_norm(h.reshape({-1, h.size(-1)}), norm_w, eps);  // [R, D]
  auto qkv = linear(x, qkv_w, std::nullopt, std::nullopt, qkv_packed);  // [R, heads * d]
  qkv = qkv.view({qkv.size(0), heads, -1});  // [R, heads, d]
  return {rope(qkv, cos, sin, n), qkv};
}

// h + o_proj(attention(q, k, v)): [B, T, D].
torch::Tensor attn_out(torch::Tensor q, torch::Tensor k, torch::Tensor v, torch::Tensor allowed, double scale,
                       torch::Tensor h, torch::Tensor o_w, bool o_packed) {
  auto a = attention(q, k, v, allowed, scale);  // [B, T, H * d]
  const int64_t B = a.size(0), T = a.size(1);
  return linear(a.view({B * T, -1}), o_w, std::nullopt, h.reshape({B * T, -1}), o_packed).view(h.sizes());
}

// h + down(silu(gate) * up) of the post-attention norm of h: [..., D].
torch::Tensor mlp(torch::Tensor h, torch::Tensor norm_w, double eps, torch::Tensor gu_w, bool gu_packed,
                  torch::Tensor down_w, bool down_packed) {
  auto rows = h.reshape({-1, h.size(-1)});  // [R, D]
  auto gu = linear(rms_norm(rows, norm_w, eps), gu_w, std::nullopt, std::nullopt, gu_packed);  // [R, 2I]
  return linear(silu_mul(gu), down_w, std::nullopt, rows, down_packed).view(h.sizes());
}

}  // namespace

// Every decoder layer over h [B, T, D]: per layer attn_in, the new keys and values into the cache, attn_out, mlp.
// weights: 6 per layer (input norm, q|k|v, o, post-attention norm, gate|up, down), each flagged in packed; eps:
// each layer's two norm epsilons. allowed [B, T, S]: which cache slots each query sees. keys/values: per layer,
// the cache before this call. With cols [T] (a static cache) they are the layer's buffers [B, Hkv, C, d] and the
// new slots are written at those columns in place (S = C); without, the new slots are appended to them (an
// empty tensor: a layer with no slots yet) and the grown tensors returned (S = L + T).
// -> (h after the last layer, keys, values).
std::tuple<torch::Tensor, std::vector<torch::Tensor>, std::vector<torch::Tensor>> decoder(
    torch::Tensor h, std::vector<torch::Tensor> weights, std::vector<bool> packed, std::vector<double> eps,
    torch::Tensor cos, torch::Tensor sin, torch::Tensor allowed, std::vector<torch::Tensor> keys,
    std::vector<torch::Tensor> values, std::optional<torch::Tensor> cols, int64_t H, int64_t Hkv, double scale) {
  const int64_t layers = static_cast<int64_t>(keys.size());
  TORCH_CHECK(h.dim() == 3 && values.size() == keys.size() && weights.size() == 6 * keys.size() &&
              packed.size() == weights.size() && eps.size() == 2 * keys.size(),
              "decoder: h [B, T, D]; 6 weights, 6 flags and 2 epsilons per layer; keys and values per layer");
  const int64_t B = h.size(0), T = h.size(1), d = cos.size(-1);
  for (int64_t i = 0; i < layers; ++i) {
    const torch::Tensor* w = weights.data() + 6 * i;
    const auto p = packed.begin() + 6 * i;
    auto [qk, qkv] = attn_in(h, w[0], eps[2 * i], w[1], p[1], cos, sin, H + 2 * Hkv, H + Hkv);
    qk = qk.view({B, T, H + Hkv, d});
    qkv = qkv.view({B, T, H + 2 * Hkv, d});
    auto q = qk.narrow(2, 0, H).transpose(1, 2);  // [B, H, T, d]
    auto k = qk.narrow(2, H, Hkv).transpose(1, 2).contiguous();  // [B, Hkv, T, d]
    auto v = qkv.narrow(2, H + Hkv, Hkv).transpose(1, 2).contiguous();
    if (cols) {
      keys[i].index_copy_(2, *cols, k);  // [B, Hkv, C, d]
      values[i].index_copy_(2, *cols, v);
    } else {
      keys[i] = keys[i].numel() ? torch::cat({keys[i], k}, 2) : k;  // [B, Hkv, L + T, d]
      values[i] = values[i].numel() ? torch::cat({values[i], v}, 2) : v;
    }
    h = attn_out(q, keys[i], values[i], allowed, scale, h, w[2], p[2]);
    h = mlp(h, w[3], eps[2 * i + 1], w[4], p[4], w[5], p[5]);
  }
  return {h, keys, values};
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("linear", &linear, "x @ w.T, bf16 weights widened in registers", py::arg("x"), py::arg("w"),
        py::arg("out") = py::none(), py::arg("res") = py::none(), py::arg("packed") = false);
  m.def("pack", &pack, "w [N, K] -> [N / 8, K / 8, 8, 8] for linear(..., packed=True)", py::arg("w"));
  m.def("rms_norm", &rms_norm, "LlamaRMSNorm on bf16 rows", py::arg("x"), py::arg("w"), py::arg("eps"));
  m.def("silu_mul", &silu_mul, "silu(gate) * up on bf16 rows", py::arg("gu"));
  m.def("attention", &attention, "a few query slots per row over the cache", py::arg("q"), py::arg("k"),
        py::arg("v"), py::arg("allowed"), py::arg("scale"));
  m.def("rope", &rope, "rotary embedding of the first n heads", py::arg("qkv"), py::arg("cos"), py::arg("sin"),
        py::arg("n"));
  m.def("argmax_rows", &argmax_rows, "each bf16 row's first maximum (NaN as the maximum)", py::arg("x"));
  m.def("decoder", &decoder, "every decoder layer for a few query slots per row", py::arg("h"), py::arg("weights"),
        py::arg("packed"), py::arg("eps"), py::arg("cos"), py::arg("sin"), py::arg("allowed"), py::arg("keys"),
        py::arg("values"), py::arg("cols"), py::arg("H"), py::arg("Hkv"), py::arg("scale"));
}
