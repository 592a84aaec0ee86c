// Batch-invariant linear layer for decoding on CPU (kvspec.decoding.packed).
//
// y = x W^T (+ b) for x of M rows, W of N x K packed once into panels of 16 outputs:
// P[p][k][l] = W[16p + l][k] (zero padded). Each output y[m][n] is one fixed chain of float32
// fused multiply-adds over k (blocks of KB summed in order), whatever M and whatever tile the
// row lands in, so a row's result never depends on the other rows: a one-token decoding step
// and a q-token verification compute the same numbers. Weights are float32 or bfloat16
// (widened to float32 in registers); activations and sums stay float32.
#include <torch/extension.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <cstdint>
#include <cmath>
#include <cstring>

namespace {

typedef float v16 __attribute__((vector_size(64)));
typedef uint16_t h16 __attribute__((vector_size(32)));
typedef uint32_t u16 __attribute__((vector_size(64)));

constexpr int64_t KB = 64;  // k block: partial sums of KB terms, added to the output in order

inline v16 load(const float* p) { v16 v; std::memcpy(&v, p, 64); return v; }
inline v16 load(const uint16_t* p) {  // bfloat16 -> float32: the 16 high bits
  h16 h; std::memcpy(&h, p, 32);
  u16 u = __builtin_convertvector(h, u16) << 16;
  v16 v; std::memcpy(&v, &u, 64); return v;
}
inline void add_to(float* p, v16 v) { v16 o = load(p); o += v; std::memcpy(p, &o, 64); }

// Rows m0..m0+MB-1 of x against panels p0..p0+NB-1, into out (M x NP*16, zeroed).
template <int NB, int MB, typename W>
inline void tile(const float* x, int64_t K, const W* w, float* out, int64_t NP, int64_t m0,
                 int64_t p0) {
  for (int64_t k0 = 0; k0 < K; k0 += KB) {
    const int64_t k1 = std::min(K, k0 + KB);
    v16 acc[MB][NB];
    for (int j = 0; j < MB; ++j) for (int i = 0; i < NB; ++i) acc[j][i] = v16{};
    for (int64_t k = k0; k < k1; ++k) {
      v16 wv[NB];
      for (int i = 0; i < NB; ++i) wv[i] = load(w + ((p0 + i) * K + k) * 16);
      for (int j = 0; j < MB; ++j) {
        const float xs = x[(m0 + j) * K + k];
        for (int i = 0; i < NB; ++i) acc[j][i] += wv[i] * xs;
      }
    }
    for (int j = 0; j < MB; ++j)
      for (int i = 0; i < NB; ++i) add_to(out + ((m0 + j) * NP + p0 + i) * 16, acc[j][i]);
  }
}

#ifdef __AVX512F__
constexpr int NB = 4, MB = 6;  // 24 accumulators + 4 weight vectors of AVX-512's 32 registers
#else
constexpr int NB = 2, MB = 3;  // AVX2: a 16-float vector takes two of its 16 registers
#endif

// The last `left` (< MB) rows from m0, as one tile of exactly that many rows.
template <int N_B, int R, typename W>
inline void rest(const float* x, int64_t left, int64_t K, const W* w, float* out, int64_t NP,
                 int64_t m0, int64_t p0) {
  if constexpr (R > 0) {
    if (left == R) {
      tile<N_B, R>(x, K, w, out, NP, m0, p0);
    } else {
      rest<N_B, R - 1>(x, left, K, w, out, NP, m0, p0);
    }
  }
}

// Every row of x against panels p0..p0+N_B-1: tiles of MB rows, then the rest in one tile
// (the panels' weights stream from memory once, then from cache).
template <int N_B, typename W>
inline void rows(const float* x, int64_t M, int64_t K, const W* w, float* out, int64_t NP,
                 int64_t p0) {
  int64_t m0 = 0;
  for (; m0 + MB <= M; m0 += MB) tile<N_B, MB>(x, K, w, out, NP, m0, p0);
  rest<N_B, MB - 1>(x, M - m0, K, w, out, NP, m0, p0);
}

template <typename W>
void panels(const float* x, int64_t M, int64_t K, const W* w, float* out, int64_t NP,
            int64_t a, int64_t b) {
  int64_t p = a;
  for (; p + NB <= b; p += NB) rows<NB>(x, M, K, w, out, NP, p);
  for (; p < b; ++p) rows<1>(x, M, K, w, out, NP, p);
}

}  // namespace

torch::Tensor pack(const torch::Tensor& weight) {
  TORCH_CHECK(weight.dim() == 2, "pack: a 2-D weight, got ", weight.dim(), " dims");
  TORCH_CHECK(weight.scalar_type() == torch::kFloat || weight.scalar_type() == torch::kBFloat16,
              "pack: float32 or bfloat16 weights, got ", weight.scalar_type());
  const int64_t N = weight.size(0), K = weight.size(1), NP = (N + 15) / 16;
  auto padded = torch::zeros({NP * 16, K}, weight.options().device(torch::kCPU));
  padded.narrow(0, 0, N).copy_(weight);
  return padded.view({NP, 16, K}).transpose(1, 2).contiguous();
}

torch::Tensor linear(const torch::Tensor& x, const torch::Tensor& packed, int64_t N) {
  TORCH_CHECK(x.scalar_type() == torch::kFloat && x.device().is_cpu(),
              "packed linear: float32 CPU inputs, got ", x.scalar_type(), " on ", x.device());
  TORCH_CHECK(packed.dim() == 3 && packed.size(2) == 16 && packed.is_contiguous(),
              "packed linear: a weight made by pack()");
  const int64_t K = packed.size(1), NP = packed.size(0);
  TORCH_CHECK(x.size(-1) == K, "packed linear: input width ", x.size(-1), " != ", K);
  auto x2 = x.reshape({-1, K}).contiguous();
  const int64_t M = x2.size(0);
  auto out = torch::zeros({M, NP * 16}, x2.options());
  const float* xp = x2.data_ptr<float>();
  float* op = out.data_ptr<float>();
  if (packed.scalar_type() == torch::kFloat) {
    const float* wp = packed.data_ptr<float>();
    at::parallel_for(0, NP, 4, [&](int64_t a, int64_t b) { panels(xp, M, K, wp, op, NP, a, b); });
  } else {
    const auto* wp = reinterpret_cast<const uint16_t*>(packed.data_ptr<at::BFloat16>());
    at::parallel_for(0, NP, 4, [&](int64_t a, int64_t b) { panels(xp, M, K, wp, op, NP, a, b); });
  }
  auto shape = x.sizes().vec();
  shape.back() = N;
  return (NP * 16 == N ? out : out.narrow(1, 0, N).contiguous()).view(shape);
}

// RMSNorm of every row of x (the last dim): x * rsqrt(mean(x^2) + eps) * w, w the norm's
// weight as the model applies it (Llama: w; Gemma: 1 + w). The squares are summed in one fixed
// order (16 lanes over the row, then the lanes in order), so a row's result does not depend on
// the other rows either.
torch::Tensor rms_norm(const torch::Tensor& x, const torch::Tensor& w, double eps) {
  TORCH_CHECK(x.scalar_type() == torch::kFloat && w.scalar_type() == torch::kFloat &&
                  x.device().is_cpu() && w.is_contiguous(),
              "rms_norm: float32 CPU tensors");
  const int64_t K = w.numel();
  TORCH_CHECK(x.size(-1) == K, "rms_norm: input width ", x.size(-1), " != ", K);
  auto x2 = x.reshape({-1, K}).contiguous();
  const int64_t M = x2.size(0), K16 = K - K % 16;
  auto out = torch::empty_like(x2);
  const float* xp = x2.data_ptr<float>();
  const float* wp = w.data_ptr<float>();
  float* op = out.data_ptr<float>();
  for (int64_t m = 0; m < M; ++m) {
    const float* r = xp + m * K;
    v16 acc{};
    for (int64_t k = 0; k < K16; k += 16) { v16 v = load(r + k); acc += v * v; }
    float sum = 0.0f;
    for (int i = 0; i < 16; ++i) sum += acc[i];
    for (int64_t k = K16; k < K; ++k) sum += r[k] * r[k];
    const float scale = 1.0f / std::sqrt(sum / static_cast<float>(K) + static_cast<float>(eps));
    for (int64_t k = 0; k < K; ++k) op[m * K + k] = r[k] * scale * wp[k];
  }
  return out.view(x.sizes());
}

// Was this build's at::parallel_for compiled for OpenMP (PyTorch's CPU thread pool on Linux)?
// Without -fopenmp it silently runs every call on one thread.
bool openmp() {
#ifdef _OPENMP
  return true;
#else
  return false;
#endif
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("openmp", &openmp, "built with OpenMP (at::parallel_for uses every thread)");
  m.def("pack", &pack, "W (N x K) -> panels (ceil(N/16) x K x 16)");
  m.def("rms_norm", &rms_norm, "RMSNorm over the last dim, fixed summation order");
  m.def("linear", &linear, "x W^T through packed panels, float32 sums, batch invariant");
}
