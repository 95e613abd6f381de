// Head layout: split, merge and packed-QKV split are byte-exact inverses for any sizes
// and destination strides.
#include "fuzz_support.h"

using namespace fuzz;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Input in(data, size);
  const int64_t batch = in.Range(1, 3), tokens = in.Range(1, 20), q_heads = in.Range(1, 6),
                kv_heads = in.Range(1, 3), dim = in.Range(1, 17);
  const int layout = static_cast<int>(in.Range(0, 3));
  octattn_context* ctx = nullptr;
  FUZZ_CHECK(octattn_context_create(&ctx) == OCTATTN_OK);
  FUZZ_CHECK(octattn_context_set_threads(ctx, static_cast<int32_t>(in.Range(1, 2))) == OCTATTN_OK);

  Tensor x(batch, tokens, q_heads * dim, 1, kBHTD), back(batch, tokens, q_heads * dim, 1, kBHTD);
  for (float& f : x.buf) f = in.AnyBits();
  Tensor heads(batch, q_heads, tokens, dim, layout);
  FUZZ_CHECK(octattn_split_heads(ctx, &x.t, q_heads, &heads.t) == OCTATTN_OK);
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t h = 0; h < q_heads; ++h)
      for (int64_t t = 0; t < tokens; ++t)
        for (int64_t d = 0; d < dim; ++d)
          FUZZ_CHECK(std::memcmp(&heads.at(b, h, t, d), &x.at(b, t, h * dim + d, 0), 4) == 0);
  FUZZ_CHECK(octattn_merge_heads(ctx, &heads.t, &back.t) == OCTATTN_OK);
  FUZZ_CHECK(std::memcmp(back.buf.data(), x.buf.data(), x.buf.size() * 4) == 0);

  const int64_t c = (q_heads + 2 * kv_heads) * dim;
  Tensor packed(batch, tokens, c, 1, kBHTD), merged(batch, tokens, c, 1, kBHTD);
  for (float& f : packed.buf) f = in.AnyBits();
  Tensor q(batch, q_heads, tokens, dim, layout), k(batch, kv_heads, tokens, dim, layout),
      v(batch, kv_heads, tokens, dim, layout);
  if (q_heads % kv_heads != 0) {  // the GQA rule: refused, nothing written
    FUZZ_CHECK(octattn_split_qkv(ctx, &packed.t, q_heads, kv_heads, &q.t, &k.t, &v.t) ==
               OCTATTN_ERROR_INVALID_SHAPE);
    for (const Tensor* t : {&q, &k, &v})
      for (float f : t->buf) FUZZ_CHECK(f == 0.0f);
    octattn_context_destroy(ctx);
    return 0;
  }
  FUZZ_CHECK(octattn_split_qkv(ctx, &packed.t, q_heads, kv_heads, &q.t, &k.t, &v.t) == OCTATTN_OK);
  // Merging q, k and v back into one [B, T, C] buffer rebuilds the packed input.
  octattn_tensor views[3];
  const Tensor* parts[3] = {&q, &k, &v};
  const int64_t offsets[3] = {0, q_heads * dim, (q_heads + kv_heads) * dim};
  for (int i = 0; i < 3; ++i) {
    views[i] = merged.t;
    views[i].data = merged.buf.data() + offsets[i];
    views[i].shape[2] = parts[i]->t.shape[1] * dim;
    FUZZ_CHECK(octattn_merge_heads(ctx, &parts[i]->t, &views[i]) == OCTATTN_OK);
  }
  FUZZ_CHECK(std::memcmp(merged.buf.data(), packed.buf.data(), packed.buf.size() * 4) == 0);
  octattn_context_destroy(ctx);
  return 0;
}
