// Batch-invariant linear layer for decoding on CPU (kvspec.decoding.packed).
//
// y = x W^T (+ b) for x of M rows, W of N x K packed once into panels of 16 outputs:
// P[p][k][l] = W[16p + l][k] (zero padded). Each output y[m][n] is one fixed chain of float32
// fused multiply-adds over k (blocks of KB summed in order), whatever M and whatever tile the
// row lands in, so a row's result never depends on the other rows: a one-token decoding step
// and a q-token verification compute the same numbers. Weights are float32, bfloat16 or int8
// (widened to float32 in registers; int8 panels end in their 16 outputs' float32 scales, applied
// to each finished sum); activations and sums stay float32.
#include <torch/extension.h>
#include <ATen/Parallel.h>
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cmath>
#include <cstring>

namespace {

typedef float v16 __attribute__((vector_size(64)));
typedef uint16_t h16 __attribute__((vector_size(32)));
typedef uint32_t u16 __attribute__((vector_size(64)));
typedef int8_t c16 __attribute__((vector_size(16)));
typedef int32_t i16 __attribute__((vector_size(64)));

constexpr int64_t KB = 64;  // k block: partial sums of KB terms, added to the output in order

inline v16 load(const float* p) { v16 v; std::memcpy(&v, p, 64); return v; }
inline v16 load(const uint16_t* p) {  // bfloat16 -> float32: the 16 high bits
  h16 h; std::memcpy(&h, p, 32);
  u16 u = __builtin_convertvector(h, u16) << 16;
  v16 v; std::memcpy(&v, &u, 64); return v;
}
inline v16 load(const int8_t* p) {  // int8 -> float32, exact
#ifdef __AVX512F__  // GCC scalarises the generic conversion below (~4x slower than float32)
  __m512 f = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(
      reinterpret_cast<const __m128i*>(p))));
  v16 v; std::memcpy(&v, &f, 64); return v;
#else
  c16 c; std::memcpy(&c, p, 16);
  return __builtin_convertvector(__builtin_convertvector(c, i16), v16);
#endif
}
// The products' native vector: AVX-512's 16 floats, else AVX2's 8, a 16-output panel being
// 16 / VW of them. GCC lowers a 16-float generic vector on AVX2 through the stack (measured
// 2026-12-08, AVX2-only AMD EPYC: 13 GFLOP/s at any row count against torch's 95-128 at 64-256
// rows); each lane's chain of sums is the same whatever the width.
#ifdef __AVX512F__
constexpr int VW = 16;
#else
constexpr int VW = 8;
#endif
typedef float vec __attribute__((vector_size(VW * 4)));
constexpr int H = 16 / VW;  // vectors per panel row

inline vec loadv(const float* p) { vec v; std::memcpy(&v, p, VW * 4); return v; }
inline vec loadv(const uint16_t* p) {  // bfloat16 -> float32: the 16 high bits
#ifdef __AVX512F__
  return load(p);
#else
  __m256i u = _mm256_slli_epi32(_mm256_cvtepu16_epi32(
      _mm_loadu_si128(reinterpret_cast<const __m128i*>(p))), 16);
  __m256 f = _mm256_castsi256_ps(u);
  vec v; std::memcpy(&v, &f, 32); return v;
#endif
}
inline vec loadv(const int8_t* p) {  // int8 -> float32, exact
#ifdef __AVX512F__
  return load(p);
#else
  __m256 f = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(
      _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
  vec v; std::memcpy(&v, &f, 32); return v;
#endif
}
inline void add_to(float* p, vec v) { vec o = loadv(p); o += v; std::memcpy(p, &o, VW * 4); }

// Rows m0..m0+MB-1 of x against panels p0..p0+NB-1, into out (M x NP*16, zeroed).
template <int NB, int MB, typename W>
inline void tile(const float* x, int64_t K, int64_t KS, const W* w, float* out, int64_t NP,
                 int64_t m0, int64_t p0) {
  constexpr int NV = NB * H;  // vectors of a row's outputs in this tile
  for (int64_t k0 = 0; k0 < K; k0 += KB) {
    const int64_t k1 = std::min(K, k0 + KB);
    vec acc[MB][NV];
    for (int j = 0; j < MB; ++j) for (int i = 0; i < NV; ++i) acc[j][i] = vec{};
    for (int64_t k = k0; k < k1; ++k) {
      vec wv[NV];
      for (int i = 0; i < NB; ++i) {
        for (int h = 0; h < H; ++h) wv[i * H + h] = loadv(w + ((p0 + i) * KS + k) * 16 + h * VW);
        // 32 rows ahead of each panel's stream (2 KB of float32 weights; x86 prefetches never
        // fault, also past the last panel). Measured, cause not traced: SmolLM2's float32
        // linears at 4 / 8 rows 3-5 % / 7-9 % faster, one row unchanged (2026-12-06, AMD EPYC
        // Zen 5, side by side in one process); bfloat16 and int8 panels were not timed
        __builtin_prefetch(w + ((p0 + i) * KS + k + 32) * 16);
      }
      for (int j = 0; j < MB; ++j) {
        const float xs = x[(m0 + j) * K + k];
        for (int i = 0; i < NV; ++i) acc[j][i] += wv[i] * xs;
      }
    }
    for (int j = 0; j < MB; ++j)
      for (int i = 0; i < NV; ++i)
        add_to(out + ((m0 + j) * NP + p0) * 16 + i * VW, acc[j][i]);
  }
}

// Tiles of MB rows x NB panels; a verification's 7-9 positions as one tile of MX rows x NW
// panels, longer inputs as tiles of MW rows x NW panels (2026-12-03: one pass over the weights
// instead of a second from cache made verifying 7 / 8 / 9 positions 1.39 / 1.41 / 1.45 ->
// 1.26 / 1.29 / 1.32 one-position steps; 1-6 and 10-12 rows within +-0.05).
#ifdef __AVX512F__
constexpr int NB = 4, MB = 6;  // 24 accumulators + 4 weight vectors of AVX-512's 32 registers
constexpr int NW = 3, MX = 9, MW = 8;  // 27 (24) accumulators + 3 weight vectors + 1 broadcast
#else
constexpr int NB = 2, MB = 3;  // AVX2: a 16-float vector takes two of its 16 registers
constexpr int NW = 1, MX = 6, MW = 6;  // 12 + 2 registers, + 1 broadcast
#endif

// The last `left` (< the tile's rows) rows from m0, as one tile of exactly that many rows.
template <int N_B, int R, typename W>
inline void rest(const float* x, int64_t left, int64_t K, int64_t KS, const W* w, float* out,
                 int64_t NP, int64_t m0, int64_t p0) {
  if constexpr (R > 0) {
    if (left == R) {
      tile<N_B, R>(x, K, KS, w, out, NP, m0, p0);
    } else {
      rest<N_B, R - 1>(x, left, K, KS, w, out, NP, m0, p0);
    }
  }
}

// Every row of x against panels p0..p0+N_B-1: tiles of M_B rows, then the rest in one tile
// (the panels' weights stream from memory once, then from cache).
template <int N_B, int M_B, typename W>
inline void rows(const float* x, int64_t M, int64_t K, int64_t KS, const W* w, float* out,
                 int64_t NP, int64_t p0) {
  int64_t m0 = 0;
  for (; m0 + M_B <= M; m0 += M_B) tile<N_B, M_B>(x, K, KS, w, out, NP, m0, p0);
  rest<N_B, M_B - 1>(x, M - m0, K, KS, w, out, NP, m0, p0);
}

// Panels a..b-1, N_B at a time (then single panels), each against every row.
template <int N_B, int M_B, typename W>
void group(const float* x, int64_t M, int64_t K, int64_t KS, const W* w, float* out, int64_t NP,
           int64_t a, int64_t b) {
  int64_t p = a;
  for (; p + N_B <= b; p += N_B) rows<N_B, M_B>(x, M, K, KS, w, out, NP, p);
  for (; p < b; ++p) rows<1, M_B>(x, M, K, KS, w, out, NP, p);
}

// The tile shape never changes an output's chain of sums, only how often weights are read.
template <typename W>
void panels(const float* x, int64_t M, int64_t K, int64_t KS, const W* w, float* out,
            int64_t NP, int64_t a, int64_t b) {
  if (M <= MB) {
    group<NB, MB>(x, M, K, KS, w, out, NP, a, b);
  } else if (M <= MX) {
    group<NW, MX>(x, M, K, KS, w, out, NP, a, b);
  } else {
    group<NW, MW>(x, M, K, KS, w, out, NP, a, b);
  }
}

// int8 panels: K weight rows of 16 int8, then SCALE_ROWS rows holding the 16 outputs' float32
// scales (a weight is its int8 value times its output's scale).
constexpr int64_t SCALE_ROWS = 4;

// Panels a..b-1 of int8 weights against every row, each finished sum times its output's scale.
void int8_panels(const float* x, int64_t M, int64_t K, const int8_t* w, float* out, int64_t NP,
                 int64_t a, int64_t b) {
  const int64_t KS = K + SCALE_ROWS;
  panels(x, M, K, KS, w, out, NP, a, b);
  for (int64_t p = a; p < b; ++p) {
    float scale[16];
    std::memcpy(scale, w + (p * KS + K) * 16, sizeof(scale));
    for (int64_t m = 0; m < M; ++m)
      for (int l = 0; l < 16; ++l) out[(m * NP + p) * 16 + l] *= scale[l];
  }
}

}  // namespace

// The width K of the inputs a packed weight multiplies (int8 panels carry their scales too).
inline int64_t width(const torch::Tensor& packed) {
  return packed.size(1) - (packed.scalar_type() == torch::kChar ? SCALE_ROWS : 0);
}

torch::Tensor pack(const torch::Tensor& weight) {
  TORCH_CHECK(weight.dim() == 2, "pack: a 2-D weight, got ", weight.dim(), " dims");
  TORCH_CHECK(weight.scalar_type() == torch::kFloat || weight.scalar_type() == torch::kBFloat16,
              "pack: float32 or bfloat16 weights, got ", weight.scalar_type());
  const int64_t N = weight.size(0), K = weight.size(1), NP = (N + 15) / 16;
  auto padded = torch::zeros({NP * 16, K}, weight.options().device(torch::kCPU));
  padded.narrow(0, 0, N).copy_(weight);
  return padded.view({NP, 16, K}).transpose(1, 2).contiguous();
}

// W (N x K, float32) as int8 panels: each output row symmetric, scale max|row| / 127 (1 for an
// all-zero row), its weights round(w / scale); the panel's scales follow its K rows.
torch::Tensor pack_int8(const torch::Tensor& weight) {
  TORCH_CHECK(weight.dim() == 2 && weight.scalar_type() == torch::kFloat,
              "pack_int8: a 2-D float32 weight");
  const int64_t N = weight.size(0), K = weight.size(1), NP = (N + 15) / 16;
  auto w = weight.to(torch::kCPU).contiguous();
  auto scale = torch::ones({NP * 16}, w.options());
  auto peak = w.abs().amax(1);
  scale.narrow(0, 0, N).copy_(torch::where(peak > 0, peak / 127.0, torch::ones_like(peak)));
  auto q = torch::zeros({NP * 16, K}, w.options());
  q.narrow(0, 0, N).copy_(torch::round(w / scale.narrow(0, 0, N).unsqueeze(1)).clamp(-127, 127));
  auto panels = q.view({NP, 16, K}).transpose(1, 2).to(torch::kChar);  // (NP, K, 16)
  auto tail = scale.view({NP, 16}).view(torch::kChar).view({NP, SCALE_ROWS, 16});
  return torch::cat({panels, tail}, 1).contiguous();
}

// M rows of x (M x K) through packed panels into out (M x ceil(N/16)*16), each row's sums
// in one fixed order whatever M (the one product `linear` and `llama_step` both call).
void linear_rows(const float* x, int64_t M, const torch::Tensor& packed, float* out) {
  const int64_t K = width(packed), NP = packed.size(0);
  std::fill(out, out + M * NP * 16, 0.0f);
  if (packed.scalar_type() == torch::kFloat) {
    const float* wp = packed.data_ptr<float>();
    at::parallel_for(0, NP, 4, [&](int64_t a, int64_t b) { panels(x, M, K, K, wp, out, NP, a, b); });
  } else if (packed.scalar_type() == torch::kChar) {
    const int8_t* wp = packed.data_ptr<int8_t>();
    at::parallel_for(0, NP, 4, [&](int64_t a, int64_t b) { int8_panels(x, M, K, wp, out, NP, a, b); });
  } else {
    const auto* wp = reinterpret_cast<const uint16_t*>(packed.data_ptr<at::BFloat16>());
    at::parallel_for(0, NP, 4, [&](int64_t a, int64_t b) { panels(x, M, K, K, wp, out, NP, a, b); });
  }
}

torch::Tensor linear(const torch::Tensor& x, const torch::Tensor& packed, int64_t N) {
  TORCH_CHECK(x.scalar_type() == torch::kFloat && x.device().is_cpu(),
              "packed linear: float32 CPU inputs, got ", x.scalar_type(), " on ", x.device());
  TORCH_CHECK(packed.dim() == 3 && packed.size(2) == 16 && packed.is_contiguous(),
              "packed linear: a weight made by pack() or pack_int8()");
  const int64_t K = width(packed), NP = packed.size(0);
  TORCH_CHECK(x.size(-1) == K, "packed linear: input width ", x.size(-1), " != ", K);
  auto x2 = x.reshape({-1, K}).contiguous();
  const int64_t M = x2.size(0);
  auto out = torch::empty({M, NP * 16}, x2.options());
  linear_rows(x2.data_ptr<float>(), M, packed, out.data_ptr<float>());
  auto shape = x.sizes().vec();
  shape.back() = N;
  return (NP * 16 == N ? out : out.narrow(1, 0, N).contiguous()).view(shape);
}

// RMSNorm of one row r of K values into out: r * rsqrt(mean(r^2) + eps) * w. The squares are
// summed in one fixed order (16 lanes over the row, then the lanes in order).
inline void norm_row(const float* r, const float* wp, int64_t K, double eps, float* out) {
  const int64_t K16 = K - K % 16;
  v16 acc{};
  for (int64_t k = 0; k < K16; k += 16) { v16 v = load(r + k); acc += v * v; }
  float sum = 0.0f;
  for (int i = 0; i < 16; ++i) sum += acc[i];
  for (int64_t k = K16; k < K; ++k) sum += r[k] * r[k];
  const float scale = 1.0f / std::sqrt(sum / static_cast<float>(K) + static_cast<float>(eps));
  for (int64_t k = 0; k < K; ++k) out[k] = r[k] * scale * wp[k];
}

// RMSNorm of every row of x (the last dim), w the norm's weight as the model applies it
// (Llama: w; Gemma: 1 + w); a row's result does not depend on the other rows.
torch::Tensor rms_norm(const torch::Tensor& x, const torch::Tensor& w, double eps) {
  TORCH_CHECK(x.scalar_type() == torch::kFloat && w.scalar_type() == torch::kFloat &&
                  x.device().is_cpu() && w.is_contiguous(),
              "rms_norm: float32 CPU tensors");
  const int64_t K = w.numel();
  TORCH_CHECK(x.size(-1) == K, "rms_norm: input width ", x.size(-1), " != ", K);
  auto x2 = x.reshape({-1, K}).contiguous();
  const int64_t M = x2.size(0);
  auto out = torch::empty_like(x2);
  const float* xp = x2.data_ptr<float>();
  const float* wp = w.data_ptr<float>();
  float* op = out.data_ptr<float>();
  for (int64_t m = 0; m < M; ++m) norm_row(xp + m * K, wp, K, eps, op + m * K);
  return out.view(x.sizes());
}

// transformers' rotary embedding of one head vector in place: x * cos + rotate_half(x) * sin,
// rotate_half(x) = (-x[half:], x[:half]).
inline void rotate(float* x, const float* cos, const float* sin, int64_t d) {
  const int64_t half = d / 2;
  for (int64_t i = 0; i < half; ++i) {
    const float a = x[i], b = x[i + half];
    x[i] = a * cos[i] - b * sin[i];
    x[i + half] = b * cos[i + half] + a * sin[i + half];
  }
}

// Attention of one query head q (d) over keys/values rows 0..n-1 (n x d each) into out (d).
inline void attend_one(const float* q, const float* keys, const float* values, int64_t n,
                       int64_t d, float scale, float* scores, float* out) {
  const int64_t d16 = d - d % 16;
  float top = -INFINITY;
  for (int64_t j = 0; j < n; ++j) {
    const float* k = keys + j * d;
    v16 acc{};
    for (int64_t i = 0; i < d16; i += 16) acc += load(q + i) * load(k + i);
    float s = 0.0f;
    for (int l = 0; l < 16; ++l) s += acc[l];
    for (int64_t i = d16; i < d; ++i) s += q[i] * k[i];
    scores[j] = s * scale;
    top = std::max(top, scores[j]);
  }
  float sum = 0.0f;
  for (int64_t j = 0; j < n; ++j) { scores[j] = std::exp(scores[j] - top); sum += scores[j]; }
  std::fill(out, out + d, 0.0f);
  for (int64_t j = 0; j < n; ++j) {
    const float p = scores[j] / sum;
    const float* v = values + j * d;
    for (int64_t i = 0; i < d; ++i) out[i] += p * v[i];
  }
}

inline int64_t padded(const torch::Tensor& packed) { return packed.size(0) * 16; }

// T consecutive positions of a plain Llama decoder (batch 1) in one call: the tokens'
// embeddings x0 (T x D) through every layer (RMSNorm, q/k/v, RoPE, grouped causal attention
// over the cache and the positions before, o; RMSNorm, SiLU-gated MLP; residuals), the final
// norm and the output head. norms: 2 per layer, then the final one (weights as applied);
// packed: q, k, v, o, gate, up, down per layer, then the head; cos/sin (T x d) the positions'
// rotary rows; keys/values (L, h_kv, capacity, d) get position t's rotated key and value at
// index len + t, and its attention reads rows 0 .. len + t. Returns logits (T x n_out).
torch::Tensor llama_step(const torch::Tensor& x0, int64_t len, const torch::Tensor& cos,
                         const torch::Tensor& sin, const std::vector<torch::Tensor>& norms,
                         const std::vector<torch::Tensor>& packed, int64_t n_out,
                         const torch::Tensor& keys, const torch::Tensor& values, int64_t heads,
                         double eps) {
  const int64_t L = keys.size(0), hkv = keys.size(1), cap = keys.size(2), d = keys.size(3);
  TORCH_CHECK(x0.dim() == 2 && cos.dim() == 2 && sin.dim() == 2, "llama_step: 2-D x0, cos, sin");
  const int64_t T = x0.size(0), D = x0.size(1);
  TORCH_CHECK(x0.scalar_type() == torch::kFloat && x0.is_contiguous() && keys.is_contiguous() &&
                  values.is_contiguous() && keys.scalar_type() == torch::kFloat &&
                  cos.is_contiguous() && sin.is_contiguous(),
              "llama_step: contiguous float32 CPU tensors");
  TORCH_CHECK(static_cast<int64_t>(norms.size()) == 2 * L + 1 &&
                  static_cast<int64_t>(packed.size()) == 7 * L + 1,
              "llama_step: 2 norms and 7 layers per decoder layer, then the final norm and head");
  TORCH_CHECK(len + T <= cap && heads % hkv == 0 && cos.size(0) == T && cos.size(1) == d &&
                  sin.size(0) == T && sin.size(1) == d,
              "llama_step: cache full or shapes inconsistent");
  for (int64_t l = 0; l <= L; ++l) {  // every product reads the widths it is given
    TORCH_CHECK(norms[std::min(2 * l, 2 * L)].numel() == D, "llama_step: a norm's width != ", D);
    if (l == L) break;
    const torch::Tensor* w = packed.data() + 7 * l;
    for (int i = 0; i < 7; ++i)  // the buffers below are sized from layer 0
      TORCH_CHECK(w[i].sizes() == packed[i].sizes(), "llama_step: layer ", l, " differs from 0");
    const int64_t inter = width(w[6]);
    TORCH_CHECK(width(w[0]) == D && width(w[1]) == D && width(w[2]) == D &&
                    width(w[4]) == D && width(w[5]) == D && width(w[3]) == heads * d &&
                    padded(w[0]) >= heads * d && padded(w[1]) >= hkv * d &&
                    padded(w[2]) >= hkv * d && padded(w[3]) >= D && padded(w[6]) >= D &&
                    padded(w[4]) >= inter && w[5].sizes() == w[4].sizes() &&
                    norms[2 * l + 1].numel() == D,
                "llama_step: layer ", l, "'s weights do not fit its widths");
  }
  TORCH_CHECK(width(packed[7 * L]) == D && padded(packed[7 * L]) >= n_out,
              "llama_step: the head's width != ", D);
  const int64_t group = heads / hkv;
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  const int64_t nq = padded(packed[0]), nk = padded(packed[1]), nv = padded(packed[2]);
  const int64_t no = padded(packed[3]), ng = padded(packed[4]), nd = padded(packed[6]);
  std::vector<float> x(x0.data_ptr<float>(), x0.data_ptr<float>() + T * D), h(T * D);
  std::vector<float> q(T * nq), k(T * nk), v(T * nv), att(T * heads * d), o(T * no);
  std::vector<float> gate(T * ng), up(T * ng), down(T * nd);
  const float* cp = cos.data_ptr<float>();
  const float* sp = sin.data_ptr<float>();
  for (int64_t l = 0; l < L; ++l) {
    const torch::Tensor* w = packed.data() + 7 * l;
    for (int64_t t = 0; t < T; ++t)
      norm_row(x.data() + t * D, norms[2 * l].data_ptr<float>(), D, eps, h.data() + t * D);
    linear_rows(h.data(), T, w[0], q.data());
    linear_rows(h.data(), T, w[1], k.data());
    linear_rows(h.data(), T, w[2], v.data());
    float* kc = keys.data_ptr<float>() + l * hkv * cap * d;
    float* vc = values.data_ptr<float>() + l * hkv * cap * d;
    for (int64_t t = 0; t < T; ++t) {
      for (int64_t g = 0; g < hkv; ++g) {
        float* kt = k.data() + t * nk + g * d;
        rotate(kt, cp + t * d, sp + t * d, d);
        std::memcpy(kc + (g * cap + len + t) * d, kt, d * sizeof(float));
        std::memcpy(vc + (g * cap + len + t) * d, v.data() + t * nv + g * d, d * sizeof(float));
      }
    }
    at::parallel_for(0, T * heads, 1, [&](int64_t a, int64_t b) {
      std::vector<float> scores(len + T);
      for (int64_t i = a; i < b; ++i) {
        const int64_t t = i / heads, hd = i % heads, g = hd / group;
        float* qt = q.data() + t * nq + hd * d;
        rotate(qt, cp + t * d, sp + t * d, d);
        attend_one(qt, kc + g * cap * d, vc + g * cap * d, len + t + 1, d, scale, scores.data(),
                   att.data() + (t * heads + hd) * d);
      }
    });
    linear_rows(att.data(), T, w[3], o.data());
    for (int64_t t = 0; t < T; ++t)
      for (int64_t i = 0; i < D; ++i) x[t * D + i] += o[t * no + i];
    for (int64_t t = 0; t < T; ++t)
      norm_row(x.data() + t * D, norms[2 * l + 1].data_ptr<float>(), D, eps, h.data() + t * D);
    linear_rows(h.data(), T, w[4], gate.data());
    linear_rows(h.data(), T, w[5], up.data());
    const int64_t inter = width(w[6]);
    std::vector<float> act(T * inter);
    for (int64_t t = 0; t < T; ++t)
      for (int64_t i = 0; i < inter; ++i) {
        const float a = gate[t * ng + i];
        act[t * inter + i] = a / (1.0f + std::exp(-a)) * up[t * ng + i];
      }
    linear_rows(act.data(), T, w[6], down.data());
    for (int64_t t = 0; t < T; ++t)
      for (int64_t i = 0; i < D; ++i) x[t * D + i] += down[t * nd + i];
  }
  for (int64_t t = 0; t < T; ++t)
    norm_row(x.data() + t * D, norms[2 * L].data_ptr<float>(), D, eps, h.data() + t * D);
  const torch::Tensor& head = packed[7 * L];
  auto logits = torch::empty({T, padded(head)}, x0.options());
  linear_rows(h.data(), T, head, logits.data_ptr<float>());
  return logits.narrow(1, 0, n_out).contiguous();
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
  m.def("pack_int8", &pack_int8, "W (N x K) -> int8 panels with their scales (ceil(N/16) x K+4 x 16)");
  m.def("rms_norm", &rms_norm, "RMSNorm over the last dim, fixed summation order");
  m.def("linear", &linear, "x W^T through packed panels, float32 sums, batch invariant");
  m.def("llama_step", &llama_step, "T chained positions of a plain Llama decoder, one call");
}
