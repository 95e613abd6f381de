// `octattn bench`: timings of attention calls in GFLOP/s of useful work (only allowed
// score entries count), as ratios to the machine's measured FMA peak, with the peak
// RSS growth of one call measured in a fresh process. Uses only octattn.h.
#include <dlfcn.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <functional>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "limits.h"
#include "octattn.h"
#include "tool.h"

namespace {

struct Case {
  int64_t batch = 1, q_heads = 8, kv_heads = 0, q_len = 1024, kv_len = 0, head_dim = 64;
  // --value-dim (0: head_dim); --v-of-k: v is a view of k's first value_dim columns (MLA's
  // latent rows), so that the cache's bytes are k's alone.
  int64_t value_dim = 0;
  bool v_of_k = false;
  int64_t ValueDim() const { return value_dim > 0 ? value_dim : head_dim; }
  // Bytes of K and V per key row of one kv head (their scales included).
  double RowBytes() const;
  // Useful flops per allowed pair: q.k and p v (forward); the recomputed q.k, dP, dV, dQ
  // and dK (backward).
  double PairFlops() const {
    return backward ? 2.0 * (3 * head_dim + 2 * ValueDim()) : 2.0 * (head_dim + ValueDim());
  }
  int32_t causal = 1;
  int64_t window = 0, stride = 0;
  // Score modifiers: softcap (0: off), ALiBi slopes, sinks, chunk (0: off), a broadcast
  // bool mask tensor equal to the analytic mask (which the call then leaves out), a
  // broadcast f32 bias.
  float softcap = 0;
  bool alibi = false, sinks = false, mask_tensor = false, bias_tensor = false;
  int64_t chunk = 0;
  // --tree: the q_len query rows are a tree of draft tokens over the cache's last q_len
  // rows (TreeBits), passed as options.tree (or in the mask tensor with --mask-tensor).
  bool tree = false;
  // --block-mask: "documents" (block_docs equal documents packed in the sequence, each
  // reading its own keys) or "density" (each block listed with probability
  // block_density, seeded), kBenchBlock rows and keys a block, every listed block full
  // (the analytic mask applies inside); with --mask-tensor, the mask tensor of its pairs.
  std::string block_mask;
  int64_t block_docs = 0;
  double block_density = 0;
  // --key-scores: options.key_scores, each key's attention received.
  bool key_scores = false;
  // --index-topk K: each query row reads K distinct keys of those the mask allows (all of
  // them where it allows fewer), drawn seeded: options.key_indices, one list a row for
  // every batch entry and head (an indexer's top-k); K/V bytes those of the listed rows.
  int64_t index_topk = 0;
  octattn_algorithm algo = OCTATTN_ALGORITHM_AUTO;
  octattn_backend backend = OCTATTN_BACKEND_AUTO;
  octattn_target target = OCTATTN_TARGET_AUTO;
  int32_t threads = 1;
  bool backward = false;  // time octattn_attention_backward (after one forward)
  // Element types: q and o in `dtype`; k and v in `kv_dtype` (0: dtype).
  octattn_dtype dtype = OCTATTN_DTYPE_F32, kv_dtype = 0;
  octattn_dtype KvType() const { return kv_dtype ? kv_dtype : dtype; }
  // An INT8 cache's channels per f32 scale (its scales counted in its bytes).
  int64_t kv_group = 32;
  // options.qk_precision (OCTATTN_QK_INT8: q . k as int8 dot products).
  octattn_qk_precision qk = OCTATTN_QK_EXACT;
  // The cache's name in the output: its dtype, and with --qk int8 "+qk8".
  std::string KvName() const;
};

// Tensor memory: with --huge-pages, buffers of 2 MiB or more are 2 MiB aligned and
// advised as transparent huge pages before their first touch (a cache laid out
// [T, H, D] reads one head's slice of every row: a page per row with 4 KiB pages).
bool g_huge_pages = false;
// --align N: tensors at N-byte boundaries (PyTorch's allocator: 64); 0, malloc's (glibc's
// large blocks: 16 bytes into a page). Where a row starts in its lines moves the cost of
// writing scattered rows (the store) by up to 4x.
size_t g_align = 0;
template <class T>
struct BenchAlloc {
  using value_type = T;
  BenchAlloc() = default;
  template <class U>
  BenchAlloc(const BenchAlloc<U>&) {}
  T* allocate(size_t n) {
    return static_cast<T*>(AllocBytes(n * sizeof(T), g_huge_pages, g_align));
  }
  void deallocate(T* p, size_t) { std::free(p); }
  bool operator==(const BenchAlloc&) const { return true; }
  bool operator!=(const BenchAlloc&) const { return false; }
};
using Floats = std::vector<float, BenchAlloc<float>>;
using Halves = std::vector<uint16_t, BenchAlloc<uint16_t>>;

const char* const kDtypeNames[] = {"",         "f32",      "bf16", "f16",  "bool",  "int8",
                                   "fp8_e4m3", "fp8_e5m2", "q8_0", "q4_0", "int32", "fp8_ds_mla"};
const char* DtypeName(octattn_dtype t) { return kDtypeNames[t]; }
octattn_dtype DtypeByName(const std::string& s) {
  for (int t = OCTATTN_DTYPE_F32; t <= OCTATTN_DTYPE_FP8_DS_MLA; ++t)
    if (t != OCTATTN_DTYPE_BOOL && t != OCTATTN_DTYPE_INT32 && s == kDtypeNames[t]) return t;
  std::fprintf(stderr, "unknown dtype: %s\n", s.c_str());
  std::exit(2);
}
bool Quantized(octattn_dtype t) { return t >= OCTATTN_DTYPE_INT8; }
std::string Case::KvName() const {
  return std::string(DtypeName(KvType())) + (qk == OCTATTN_QK_INT8 ? "+qk8" : "");
}
bool Blocked(octattn_dtype t) { return t == OCTATTN_DTYPE_Q8_0 || t == OCTATTN_DTYPE_Q4_0; }
// Bytes of one element, of one block for Q8_0 and Q4_0 and of one row for FP8_DS_MLA
// (the unit their strides count).
int64_t DtypeBytes(octattn_dtype t) {
  return t == OCTATTN_DTYPE_F32                              ? 4
         : t == OCTATTN_DTYPE_BF16 || t == OCTATTN_DTYPE_F16 ? 2
         : t == OCTATTN_DTYPE_Q8_0                           ? 34
         : t == OCTATTN_DTYPE_Q4_0                           ? 18
         : t == OCTATTN_DTYPE_FP8_DS_MLA                     ? 656
                                                             : 1;
}
// Bytes a cache reads per value, its scales included.
double ValueBytes(const Case& c) {
  const octattn_dtype t = c.KvType();
  if (Blocked(t)) return DtypeBytes(t) / 32.0;
  if (t == OCTATTN_DTYPE_FP8_DS_MLA) return 656.0 / 576.0;
  return DtypeBytes(t) + (t == OCTATTN_DTYPE_INT8 ? 4.0 / c.kv_group : 0.0);
}
double Case::RowBytes() const {
  return static_cast<double>(head_dim + (v_of_k ? 0 : ValueDim())) * ValueBytes(*this);
}
// v as a view of k's first value_dim columns (--v-of-k), in k's dtype and strides.
octattn_tensor ValueView(const octattn_tensor& k, int64_t value_dim) {
  octattn_tensor v = k;
  v.shape[3] = value_dim;
  return v;
}

// The 16-bit pattern of x (inputs of a benchmark: bf16 truncated, f16 for |x| < 2 with
// the subnormals flushed), and a tensor's data moved into `type` (the f32 copy freed).
uint16_t HalfOf(float x, octattn_dtype type) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  if (type == OCTATTN_DTYPE_BF16) return static_cast<uint16_t>(u >> 16);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  int e = 0;
  const float m = std::frexp(std::fabs(x), &e);  // |x| = m * 2^e, m in [0.5, 1)
  if (x == 0 || e - 1 < -14) return sign;
  return static_cast<uint16_t>(sign | ((e - 1 + 15) << 10) | static_cast<int>((m * 2 - 1) * 1024));
}
// A quantized cache tensor: its bytes and its scales (INT8: one f32 per `kv_group`
// channels of a row; FP8: one of 1 for the tensor).
struct QuantData {
  std::vector<uint8_t, BenchAlloc<uint8_t>> bytes;
  Floats scale;
  octattn_tensor ts{};
  const octattn_tensor* Scale() const { return scale.empty() ? nullptr : &ts; }
};
// A tensor's data stored in a quantized dtype by octattn_kv_store (the f32 copy freed).
void Quantize(Floats* f, QuantData* qd, octattn_tensor* t, const Case& c) {
  const octattn_dtype type = c.KvType();
  octattn_tensor dst = *t;
  dst.dtype = type;
  int64_t span = 1;
  // Q8_0, Q4_0: [.., D] rows of D / 32 blocks; FP8_DS_MLA: rows of one unit.
  const int64_t per = Blocked(type) ? 32 : type == OCTATTN_DTYPE_FP8_DS_MLA ? t->shape[3] : 1;
  for (int d = 0; d < 4; ++d) {
    if (d < 3) dst.stride[d] /= per;
    span += ((d == 3 ? t->shape[3] / per : t->shape[d]) - 1) * dst.stride[d];
  }
  qd->bytes.resize(static_cast<size_t>(span * DtypeBytes(type)));
  dst.data = qd->bytes.data();
  if (type == OCTATTN_DTYPE_INT8) {
    const int64_t ss[4] = {t->shape[0], t->shape[1], t->shape[2], t->shape[3] / c.kv_group};
    qd->scale.resize(static_cast<size_t>(ss[0] * ss[1] * ss[2] * ss[3]));
    octattn_tensor_init(&qd->ts, qd->scale.data(), ss, OCTATTN_LAYOUT_BHTD);
  } else if (!Blocked(type) && type != OCTATTN_DTYPE_FP8_DS_MLA) {
    const int64_t ss[4] = {1, 1, 1, 1};
    qd->scale.assign(1, 1.0f);
    octattn_tensor_init(&qd->ts, qd->scale.data(), ss, OCTATTN_LAYOUT_BHTD);
  }
  octattn_context* ctx = nullptr;
  octattn_context_create(&ctx);
  octattn_context_set_threads(ctx, 0);
  octattn_tensor* sc = qd->scale.empty() ? nullptr : &qd->ts;
  if (octattn_kv_store(ctx, t, &dst, sc, 0, nullptr) != OCTATTN_OK) {
    std::fprintf(stderr, "--kv-dtype %s: %s\n", DtypeName(type), octattn_context_last_error(ctx));
    std::exit(2);
  }
  octattn_context_destroy(ctx);
  Floats().swap(*f);
  *t = dst;
}
void Retype(Floats* f, Halves* h, octattn_tensor* t, octattn_dtype type) {
  if (type == OCTATTN_DTYPE_F32) return;
  h->resize(f->size());
  for (size_t i = 0; i < f->size(); ++i) (*h)[i] = HalfOf((*f)[i], type);
  Floats().swap(*f);
  t->data = h->data();
  t->dtype = type;
}

struct Args {
  Case base;
  std::vector<int64_t> q_lens, kv_lens, head_dims;
  std::vector<int32_t> threads;
  std::vector<octattn_algorithm> algos;
  std::vector<octattn_backend> backends;
  std::vector<octattn_target> targets;
  int repeat = 5;
  bool json = false, limits = false, quick = false, rss = true;
  // A batch of sequences: their key lengths (q_len new tokens each) and how they are
  // passed: one ragged call, one padded call, or one call per sequence.
  std::vector<int64_t> seq_kv_lens;
  std::string seq_mode = "ragged";
  std::string seq_layout;     // bhtd or bthd (default: bhtd padded, else bthd)
  bool prefill = false;       // each sequence's queries are all its keys (a prompt)
  int64_t block_size = 0;     // > 0: the ragged batch's keys in a paged cache
  int64_t shared_prefix = 0;  // paged: the first N keys of every sequence in shared blocks
  std::string against;        // another build of the library, timed call by call with this one
  bool vs_read = false;       // each call paired with a read of its K and V bytes
  bool contiguous = false;    // each paged batch paired with the batch in a contiguous cache
  bool vs_plain = false;      // each --key-scores call paired with the call without them
  bool store = false;         // time octattn_kv_store of q_len new rows instead of attention
  bool append = false;        // with store: each store at the cache's next rows
};

const char* kHelp =
    "usage: octattn bench [options]          one line per case (lists: comma separated)\n"
    "       octattn bench --limits [--json] [--quick]  FMA peak, sgemm, read bandwidth of one\n"
    "                                       core (--quick: a check that it runs, not a "
    "measurement)\n"
    "  --batch N --q-heads N --kv-heads N (default: q-heads)\n"
    "  --q-len LIST --kv-len LIST (default: q-len) --head-dim LIST\n"
    "  --value-dim N (default: head-dim)  --v-of-k  v a view of k's first value-dim\n"
    "            columns (MLA's latent rows: the K/V bytes are k's alone)\n"
    "  --full | --window N --stride N\n"
    "  --softcap X --alibi --sinks --chunk N   score modifiers\n"
    "  --mask-tensor (a broadcast bool mask equal to the mask of the other flags, passed\n"
    "                 instead of them) --bias-tensor (a broadcast f32 bias)\n"
    "  --tree N  N draft tokens (--q-len N) verified as a tree over the last N of --kv-len\n"
    "            keys: a seeded random tree (each node's parent one of the 8 nodes before\n"
    "            it), the same for every batch entry, as options.tree\n"
    "  --block-mask documents:N|density:F  a block mask of 128 x 128 blocks (options.\n"
    "            block_counts ...), every listed block full and the flags' mask inside:\n"
    "            N equal documents packed in --q-len (= --kv-len, a multiple of 128 N),\n"
    "            each row reading its own document's keys, or each key block listed for\n"
    "            each query block with probability F (seeded); with --mask-tensor the\n"
    "            mask tensor of the same pairs instead\n"
    "  --index-topk K  token-sparse: each row reads K seeded random keys of those the mask\n"
    "            allows (options.key_indices, one list a row for all heads); GB/s counts\n"
    "            the listed rows' bytes\n"
    "  --algo LIST (auto,reference,naive,fused) --backend LIST (highway,xsimd)\n"
    "  --target LIST (auto,amx_bf16,avx512_bf16,avx512,avx2,sse4,ssse3,sse2,neon,sve2_128,\n"
    "                 sve_256,scalar)\n"
    "  --threads LIST\n"
    "  --repeat N (timed calls after one warm-up; default 5) --no-rss --json\n"
    "  --huge-pages  tensors of 2 MiB or more in transparent huge pages (madvise)\n"
    "  --align N  tensors at N-byte boundaries (a power of two; PyTorch's: 64; default\n"
    "             malloc's)\n"
    "  --dtype f32|bf16|f16 (q, k, v and o)  --kv-dtype f32|bf16|f16|int8|fp8_e4m3|fp8_e5m2|\n"
    "               q8_0|q4_0|fp8_ds_mla (k and v only; quantized ones stored by\n"
    "               octattn_kv_store; fp8_ds_mla: --head-dim 576 --v-of-k)\n"
    "  --kv-group G  an int8 cache's channels per f32 scale (default 32; its bytes count)\n"
    "  --qk exact|int8  q . k over an int8, q8_0 or q4_0 cache: exact (default) or as int8\n"
    "               dot products (options.qk_precision; the cache's name gets \"+qk8\")\n"
    "  --store  time octattn_kv_store of --q-len new f32 rows per (batch, kv head) into a\n"
    "           --kv-dtype cache of --kv-len rows (a decode step's append: --q-len 1), at\n"
    "           its last rows; --append: each store at the next rows, cycling through the\n"
    "           cache (as decode steps append: rows no recent store touched)\n"
    "  --backward   time the backward (dq, dk, dv) after one forward; gflops count\n"
    "               2*(3*head_dim+2*value_dim) flops per allowed pair\n"
    "  --seq-kv-lens LIST  a batch of sequences with these key lengths, --q-len new\n"
    "               tokens each (its first value), as one ragged call ([total, H, D],\n"
    "               cu_seqlens), or with --padded as one padded call (kv_lens; the\n"
    "               batch's longest lengths), or with --separate as one call per\n"
    "               sequence; times the whole batch. --seq-layout bhtd|bthd: the\n"
    "               tensors' memory order (default: bhtd padded, else bthd).\n"
    "               --prefill: each sequence's queries are its keys (a prompt; padded:\n"
    "               left padding, as tokenizers pad; q_len is reported as -1).\n"
    "               --block-size N: the keys in a paged cache of N-row blocks, their\n"
    "               order shuffled (with the ragged call); --shared-prefix N: the first\n"
    "               N keys (whole blocks) the same for every sequence, in the same\n"
    "               blocks (a shared prompt; cascade decode reads them once). The line\n"
    "               adds shared_kv_rows (octattn_run_info); kv_gbps counts every\n"
    "               sequence's keys\n"
    "  --against LIB  also time the same calls through LIB, another build of the library\n"
    "               (a liboctattn.so; its own context, the same options), alternating\n"
    "               with this one call by call: the host's drifts then fall on both.\n"
    "               Adds against_seconds_median and speedup (the median and quartiles\n"
    "               of the per-pair ratios: LIB's seconds / this build's)\n"
    "  --vs-read    also time, after each call (before it, every other pair), one read of\n"
    "               as many bytes as the call's K and V by as many threads as the call's,\n"
    "               from a buffer of its own (at most 256 MiB; on huge pages with\n"
    "               --huge-pages): adds read_seconds_median, read_gbps and\n"
    "               read_fraction (the median and quartiles of the per-pair ratios\n"
    "               of kv_gbps to the read's rate), so that the two rates come\n"
    "               from the same moments of a shared host. The reads evict the caches:\n"
    "               meant for K and V larger than the last-level cache.\n"
    "  --key-scores  the calls also write each key's attention received (options.\n"
    "               key_scores); --vs-plain: and each is paired with the same call\n"
    "               without them, alternating: adds plain_seconds_median and\n"
    "               plain_fraction (per pair: the plain call's seconds / this one's)\n"
    "  --contiguous with --block-size: also time the same batch on a contiguous\n"
    "               [total, H, D] cache (its own context), alternating call by call:\n"
    "               adds contiguous_seconds_median and paged_fraction (per pair: the\n"
    "               contiguous call's seconds / the paged one's). --against, --vs-read\n"
    "               and --contiguous each pair the calls with one other: take one.\n"
    "gflops counts 2*(head_dim+value_dim) flops per allowed (query, key) pair;\n"
    "fma_peak_gflops is one core's measured peak for the target that ran (zmm FMA for\n"
    "avx512, avx512_bf16 and amx_bf16 (AMX tiles can run past it), ymm FMA for avx2,\n"
    "xmm mul+add for the other x86 targets, NEON FMA for the ARM64 ones) and\n"
    "peak_fraction is gflops / (fma_peak_gflops * threads); kv_gbps is K and V bytes /\n"
    "median seconds;\n"
    "extra_rss_mib is the peak RSS growth of one call in a fresh process.\n";

template <class T, class Parse>
std::vector<T> List(const char* s, Parse parse) {
  std::vector<T> out;
  std::string all(s);
  size_t start = 0;
  while (start <= all.size()) {
    const size_t comma = all.find(',', start);
    out.push_back(
        parse(all.substr(start, comma == std::string::npos ? std::string::npos : comma - start)));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

template <class Names>
int32_t ByName(const std::string& s, int32_t lo, int32_t hi, Names names) {
  for (int32_t i = lo; i <= hi; ++i)
    if (s == names(i)) return i;
  std::fprintf(stderr, "unknown value: %s\n", s.c_str());
  std::exit(2);
}

bool Parse(int argc, char** argv, Args* a) {
  // One integer, the whole argument ("1,16" where one value is taken is an error).
  auto i64 = [](const std::string& s) {
    size_t used = 0;
    int64_t v = 0;
    try {
      v = static_cast<int64_t>(std::stoll(s, &used));
    } catch (const std::exception&) {
      used = 0;
    }
    if (used == 0 || used != s.size()) {
      std::fprintf(stderr, "not one integer: %s\n", s.c_str());
      std::exit(2);
    }
    return v;
  };
  for (int i = 1; i < argc; ++i) {
    const std::string f = argv[i];
    auto next = [&]() -> const char* {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "%s needs a value\n", f.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (f == "--batch")
      a->base.batch = i64(next());
    else if (f == "--against")
      a->against = next();
    else if (f == "--vs-read")
      a->vs_read = true;
    else if (f == "--contiguous")
      a->contiguous = true;
    else if (f == "--key-scores")
      a->base.key_scores = true;
    else if (f == "--vs-plain")
      a->vs_plain = a->base.key_scores = true;
    else if (f == "--q-heads")
      a->base.q_heads = i64(next());
    else if (f == "--kv-heads")
      a->base.kv_heads = i64(next());
    else if (f == "--q-len")
      a->q_lens = List<int64_t>(next(), i64);
    else if (f == "--kv-len")
      a->kv_lens = List<int64_t>(next(), i64);
    else if (f == "--head-dim")
      a->head_dims = List<int64_t>(next(), i64);
    else if (f == "--value-dim")
      a->base.value_dim = i64(next());
    else if (f == "--v-of-k")
      a->base.v_of_k = true;
    else if (f == "--full")
      a->base.causal = 0;
    else if (f == "--window")
      a->base.window = i64(next());
    else if (f == "--stride")
      a->base.stride = i64(next());
    else if (f == "--softcap")
      a->base.softcap = std::stof(next());
    else if (f == "--alibi")
      a->base.alibi = true;
    else if (f == "--sinks")
      a->base.sinks = true;
    else if (f == "--chunk")
      a->base.chunk = i64(next());
    else if (f == "--mask-tensor")
      a->base.mask_tensor = true;
    else if (f == "--tree") {
      a->base.tree = true;
      a->q_lens = {i64(next())};
    } else if (f == "--block-mask") {
      const std::string m = next();
      const size_t colon = m.find(':');
      const std::string kind = m.substr(0, colon);
      if (colon == std::string::npos || (kind != "documents" && kind != "density")) {
        std::fprintf(stderr, "--block-mask takes documents:N or density:F\n");
        std::exit(2);
      }
      a->base.block_mask = kind;
      if (kind == "documents")
        a->base.block_docs = i64(m.substr(colon + 1));
      else
        a->base.block_density = std::stod(m.substr(colon + 1));
    } else if (f == "--index-topk")
      a->base.index_topk = i64(next());
    else if (f == "--bias-tensor")
      a->base.bias_tensor = true;
    else if (f == "--threads")
      a->threads = List<int32_t>(next(), [](const std::string& s) { return std::stoi(s); });
    else if (f == "--repeat")
      a->repeat = std::max(1, std::atoi(next()));
    else if (f == "--backward")
      a->base.backward = true;
    else if (f == "--dtype")
      a->base.dtype = DtypeByName(next());
    else if (f == "--kv-dtype")
      a->base.kv_dtype = DtypeByName(next());
    else if (f == "--qk") {
      const std::string qk = next();
      if (qk != "exact" && qk != "int8") {
        std::fprintf(stderr, "--qk takes exact or int8, not %s\n", qk.c_str());
        std::exit(2);
      }
      a->base.qk = qk == "int8" ? OCTATTN_QK_INT8 : OCTATTN_QK_EXACT;
    } else if (f == "--kv-group")
      a->base.kv_group = std::max<int64_t>(1, i64(next()));
    else if (f == "--json")
      a->json = true;
    else if (f == "--limits")
      a->limits = true;
    else if (f == "--quick")
      a->quick = true;
    else if (f == "--seq-kv-lens")
      a->seq_kv_lens = List<int64_t>(next(), i64);
    else if (f == "--padded")
      a->seq_mode = "padded";
    else if (f == "--separate")
      a->seq_mode = "separate";
    else if (f == "--seq-layout")
      a->seq_layout = next();
    else if (f == "--store")
      a->store = true;
    else if (f == "--append")
      a->append = true;
    else if (f == "--prefill")
      a->prefill = true;
    else if (f == "--block-size")
      a->block_size = i64(next());
    else if (f == "--shared-prefix")
      a->shared_prefix = i64(next());
    else if (f == "--huge-pages")
      g_huge_pages = true;
    else if (f == "--align")
      g_align = static_cast<size_t>(i64(next()));
    else if (f == "--no-rss")
      a->rss = false;
    else if (f == "--algo")
      a->algos = List<octattn_algorithm>(
          next(), [](const std::string& s) { return ByName(s, 0, 3, octattn_algorithm_name); });
    else if (f == "--backend")
      a->backends = List<octattn_backend>(
          next(), [](const std::string& s) { return ByName(s, 0, 2, octattn_backend_name); });
    else if (f == "--target")
      a->targets = List<octattn_target>(next(), [](const std::string& s) {
        return ByName(s, 0, OCTATTN_TARGET_AMX_BF16, octattn_target_name);
      });
    else {
      std::fputs(kHelp, f == "--help" || f == "-h" ? stdout : stderr);
      std::exit(f == "--help" || f == "-h" ? 0 : 2);
    }
  }
  if (!a->against.empty() + a->vs_read + a->contiguous + a->vs_plain > 1) {
    std::fprintf(stderr,
                 "--against, --vs-read, --contiguous and --vs-plain each pair the calls with "
                 "one other: take one\n");
    std::exit(2);
  }
  if ((g_align & (g_align - 1)) != 0 || g_align > (size_t{1} << 21)) {
    std::fprintf(stderr, "--align takes a power of two up to 2 MiB\n");
    std::exit(2);
  }
  if (a->base.key_scores && (a->store || a->base.backward || a->seq_mode == "separate")) {
    std::fprintf(stderr,
                 "--key-scores times the forward of one call: not with --store, "
                 "--backward or --separate\n");
    std::exit(2);
  }
  if (a->contiguous && (a->block_size <= 0 || a->seq_kv_lens.empty() || a->seq_mode != "ragged")) {
    std::fprintf(stderr,
                 "--contiguous compares a paged batch: it needs --seq-kv-lens and "
                 "--block-size (and neither --padded nor --separate)\n");
    std::exit(2);
  }
  if (a->shared_prefix != 0) {
    int64_t shortest = INT64_MAX;
    for (int64_t kv : a->seq_kv_lens) shortest = std::min(shortest, kv);
    if (a->block_size <= 0 || a->seq_mode != "ragged" || a->shared_prefix < 0 ||
        a->shared_prefix % a->block_size != 0 || a->shared_prefix > shortest) {
      std::fprintf(stderr,
                   "--shared-prefix N shares whole blocks of a paged batch: it needs "
                   "--seq-kv-lens and --block-size (a multiple of which N is, at most the "
                   "shortest sequence)\n");
      std::exit(2);
    }
  }
  if (a->base.index_topk > 0 && (!a->base.block_mask.empty() || a->base.key_scores ||
                                 !a->seq_kv_lens.empty() || a->store || a->base.mask_tensor)) {
    std::fprintf(stderr,
                 "--index-topk times one call of --batch entries: not with --block-mask, "
                 "--key-scores, --seq-kv-lens, --store or --mask-tensor\n");
    std::exit(2);
  }
  if (!a->base.block_mask.empty() && (!a->seq_kv_lens.empty() || a->store || a->base.tree)) {
    std::fprintf(stderr,
                 "--block-mask times one call of --batch entries: not with --seq-kv-lens, "
                 "--store or --tree\n");
    std::exit(2);
  }
  const bool ds_mla = a->base.KvType() == OCTATTN_DTYPE_FP8_DS_MLA;
  if (a->base.v_of_k && (a->store || (Quantized(a->base.KvType()) && !ds_mla))) {
    std::fprintf(stderr,
                 "--v-of-k views k's rows as v: not with --store or a quantized cache other "
                 "than fp8_ds_mla\n");
    std::exit(2);
  }
  if (ds_mla && !a->store && !a->base.v_of_k) {
    std::fprintf(stderr, "--kv-dtype fp8_ds_mla holds latent rows: v is a view of k (--v-of-k)\n");
    std::exit(2);
  }
  if (a->base.value_dim < 0 || (a->base.value_dim > 0 && a->store)) {
    std::fprintf(stderr, "--value-dim takes a positive size, not with --store\n");
    std::exit(2);
  }
  for (int64_t d : a->head_dims.empty() ? std::vector<int64_t>{a->base.head_dim} : a->head_dims)
    if (a->base.v_of_k && a->base.value_dim > d) {
      std::fprintf(stderr, "--v-of-k views k's first --value-dim columns: at most --head-dim\n");
      std::exit(2);
    }
  if (a->base.tree && (!a->seq_kv_lens.empty() || a->store)) {
    std::fprintf(stderr,
                 "--tree times one call of --batch entries: not with --seq-kv-lens "
                 "or --store\n");
    std::exit(2);
  }
  return true;
}

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Seconds of one fn().
template <class Fn>
double Seconds(Fn&& fn) {
  const double t0 = Now();
  fn();
  return Now() - t0;
}

// Seconds of `repeat` calls of fn, sorted.
template <class Fn>
std::vector<double> TimeRepeats(int repeat, Fn&& fn) {
  std::vector<double> times;
  for (int r = 0; r < repeat; ++r) times.push_back(Seconds(fn));
  std::sort(times.begin(), times.end());
  return times;
}

// The entry points the timed calls go through: this build's, or another build's
// (--against), loaded by dlopen into a namespace of its own.
struct Api {
  decltype(&octattn_context_create) context_create = octattn_context_create;
  decltype(&octattn_context_set_threads) set_threads = octattn_context_set_threads;
  decltype(&octattn_context_set_target) set_target = octattn_context_set_target;
  decltype(&octattn_context_destroy) context_destroy = octattn_context_destroy;
  decltype(&octattn_context_last_error) last_error = octattn_context_last_error;
  decltype(&octattn_attention) attention = octattn_attention;
  decltype(&octattn_attention_backward) attention_backward = octattn_attention_backward;
  decltype(&octattn_kv_store) kv_store = octattn_kv_store;  // (null: a build before 0.11)
};
const Api kThisBuild;
Api g_against;  // valid where Args::against is set

// The library at `path` (exits with a message where it cannot be loaded).
Api LoadApi(const std::string& path) {
  void* lib = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    std::fprintf(stderr, "--against: %s\n", dlerror());
    std::exit(2);
  }
  Api api;
  auto sym = [&](auto* fn, const char* name) {
    void* p = dlsym(lib, name);
    if (!p) {
      std::fprintf(stderr, "--against %s: no symbol %s\n", path.c_str(), name);
      std::exit(2);
    }
    *fn = reinterpret_cast<std::remove_pointer_t<decltype(fn)>>(p);
  };
  sym(&api.context_create, "octattn_context_create");
  sym(&api.set_threads, "octattn_context_set_threads");
  sym(&api.set_target, "octattn_context_set_target");
  sym(&api.context_destroy, "octattn_context_destroy");
  sym(&api.last_error, "octattn_context_last_error");
  sym(&api.attention, "octattn_attention");
  sym(&api.attention_backward, "octattn_attention_backward");
  api.kv_store = reinterpret_cast<decltype(api.kv_store)>(dlsym(lib, "octattn_kv_store"));
  return api;
}

// `repeat` pairs of timed runs, mine() and theirs() (each returns its seconds), which of
// them goes first alternating: each one's seconds, sorted, and the sorted ratios of
// theirs to mine in each pair, times `scale`.
struct Paired {
  std::vector<double> mine, theirs, ratio;
};
template <class Fn, class Gn>
Paired TimePaired(int repeat, Fn&& mine, Gn&& theirs, double scale = 1) {
  Paired p;
  for (int r = 0; r < repeat; ++r) {
    double t[2];
    for (int k = 0; k < 2; ++k) {
      const bool me = (k == 0) == (r % 2 == 0);
      t[me ? 0 : 1] = me ? mine() : theirs();
    }
    p.mine.push_back(t[0]);
    p.theirs.push_back(t[1]);
    p.ratio.push_back(scale * t[1] / t[0]);
  }
  for (auto* v : {&p.mine, &p.theirs, &p.ratio}) std::sort(v->begin(), v->end());
  return p;
}

// The JSON fields (or the text) that a pairing adds to a case's line: the partner's
// median seconds (`name`_seconds_median), its rate where it read `bytes` (> 0:
// `name`_gbps), and the median and quartiles of the per-pair ratios (`ratio`).
std::string PairFields(const Paired& p, bool json, const char* name, const char* ratio,
                       double bytes = 0) {
  const size_t n = p.ratio.size();
  const double median = p.theirs[n / 2];
  char rate[64] = "";
  char buf[320];
  if (json) {
    if (bytes > 0)
      std::snprintf(rate, sizeof rate, ",\"%s_gbps\":%.4g", name, bytes / median / 1e9);
    std::snprintf(buf, sizeof buf,
                  ",\"%s_seconds_median\":%.6g%s,\"%s\":%.4f,\"%s_q1\":%.4f,\"%s_q3\":%.4f", name,
                  median, rate, ratio, p.ratio[n / 2], ratio, p.ratio[n / 4], ratio,
                  p.ratio[3 * n / 4]);
  } else {
    if (bytes > 0) std::snprintf(rate, sizeof rate, " (%.2f GB/s)", bytes / median / 1e9);
    std::snprintf(buf, sizeof buf, "  %s %.4f ms%s: %s %.3f (quartiles %.3f, %.3f)", name,
                  median * 1e3, rate, ratio, p.ratio[n / 2], p.ratio[n / 4], p.ratio[3 * n / 4]);
  }
  return buf;
}

// The keys row i may read by the header's formula (default alignment, k_start 0): the
// dense run [lo, hi) and the strided columns in [sb, lo).
struct RowRange {
  int64_t lo, hi, sb;
};
RowRange RowOf(const Case& c, int64_t i) {
  const int64_t qpos = c.kv_len - c.q_len + i;
  int64_t lo = 0, hi = c.kv_len;
  if (c.chunk > 0) {
    const int64_t c0 = qpos - ((qpos % c.chunk) + c.chunk) % c.chunk;
    lo = std::max<int64_t>(c0, 0);
    hi = std::min(hi, c0 + c.chunk);
  }
  const int64_t sb = lo;
  if (c.causal) hi = std::min(hi, qpos + 1);
  if (hi <= lo) return {0, 0, 0};
  if (c.causal && c.window > 0) lo = std::min(std::max(lo, qpos - c.window + 1), hi);
  return {lo, hi, sb};
}
// The tree of --tree: q_len rows of (q_len + 7) / 8 bytes, row i's bits node i and its
// ancestors; node i's parent is one of the 8 nodes before it (seeded), node 0 a root.
std::vector<uint8_t> TreeBits(const Case& c) {
  const int64_t n = c.q_len, row = (n + 7) / 8;
  std::vector<uint8_t> bits(static_cast<size_t>(n * row), 0);
  std::mt19937 rng(3);
  for (int64_t i = 0; i < n; ++i) {
    if (i > 0) {
      const int64_t parent = i - 1 - static_cast<int64_t>(rng() % std::min<int64_t>(i, 8));
      std::copy_n(bits.begin() + parent * row, row, bits.begin() + i * row);
    }
    bits[static_cast<size_t>(i * row + i / 8)] |= static_cast<uint8_t>(1u << (i % 8));
  }
  return bits;
}
bool InTree(const Case& c, const std::vector<uint8_t>& bits, int64_t i, int64_t j) {
  const int64_t col = j - (c.kv_len - c.q_len), row = (c.q_len + 7) / 8;
  return col < 0 || ((bits[static_cast<size_t>(i * row + col / 8)] >> (col % 8)) & 1u);
}
// The block mask of --block-mask: kinds of [q_blocks, key_blocks] (1: listed, full).
constexpr int64_t kBenchBlock = 128;
std::vector<uint8_t> BlockKinds(const Case& c) {
  const int64_t qb = (c.q_len + kBenchBlock - 1) / kBenchBlock,
                kb = (c.kv_len + kBenchBlock - 1) / kBenchBlock;
  std::vector<uint8_t> kinds(static_cast<size_t>(qb * kb), 0);
  std::mt19937 rng(11);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  const int64_t doc = c.block_docs > 0 ? c.kv_len / c.block_docs : 0;
  if (c.block_mask == "documents" &&
      (c.block_docs < 1 || c.q_len != c.kv_len || c.kv_len % (c.block_docs * kBenchBlock) != 0)) {
    std::fprintf(stderr,
                 "--block-mask documents:N needs --q-len = --kv-len, a multiple of %lld N\n",
                 static_cast<long long>(kBenchBlock));
    std::exit(2);
  }
  for (int64_t x = 0; x < qb; ++x)
    for (int64_t y = 0; y < kb; ++y) {
      if (c.block_mask == "documents")  // the query block's document's key blocks
        kinds[x * kb + y] = y * kBenchBlock / doc == x * kBenchBlock / doc;
      else
        kinds[x * kb + y] = u(rng) < c.block_density;
    }
  return kinds;
}
bool PairAllowed(const Case& c, int64_t i, int64_t j) {
  const RowRange r = RowOf(c, i);
  if (j >= r.lo && j < r.hi) return true;
  return c.causal && c.window > 0 && c.stride > 0 && j >= r.sb && j < r.lo && j % c.stride == 0;
}

// --index-topk: row i's listed keys (K distinct ones the mask allows, fewer where it
// allows fewer), seeded per row.
std::vector<int32_t> TopKeys(const Case& c, int64_t i) {
  std::vector<int32_t> allowed;
  const RowRange r = RowOf(c, i);
  for (int64_t j = std::min(r.sb, r.lo); j < r.hi; ++j)
    if (PairAllowed(c, i, j)) allowed.push_back(static_cast<int32_t>(j));
  std::mt19937 rng(static_cast<uint32_t>(17 + i));
  const size_t k = std::min(allowed.size(), static_cast<size_t>(c.index_topk));
  for (size_t x = 0; x < k; ++x)  // a partial Fisher-Yates shuffle: an unsorted top-k
    std::swap(allowed[x], allowed[x + rng() % (allowed.size() - x)]);
  allowed.resize(k);
  return allowed;
}

// Allowed (query, key) pairs of one head: the useful work.
double AllowedPairs(const Case& c) {
  double n = 0;
  if (c.index_topk > 0) {
    for (int64_t i = 0; i < c.q_len; ++i) n += static_cast<double>(TopKeys(c, i).size());
    return n;
  }
  if (!c.block_mask.empty()) {  // the analytic mask's pairs within the listed blocks
    const std::vector<uint8_t> kinds = BlockKinds(c);
    const int64_t kb = (c.kv_len + kBenchBlock - 1) / kBenchBlock;
    for (int64_t i = 0; i < c.q_len; ++i) {
      const RowRange r = RowOf(c, i);
      for (int64_t y = 0; y < kb; ++y) {
        if (!kinds[(i / kBenchBlock) * kb + y]) continue;
        const int64_t lo = std::max(r.lo, y * kBenchBlock),
                      hi = std::min(r.hi, (y + 1) * kBenchBlock);
        n += static_cast<double>(std::max<int64_t>(0, hi - lo));
        for (int64_t j = std::max(r.sb, y * kBenchBlock); j < std::min(r.lo, (y + 1) * kBenchBlock);
             ++j)
          n += PairAllowed(c, i, j);
      }
    }
    return n;
  }
  if (c.tree) {  // the analytic mask's pairs less the tree columns a row's bits drop
    const std::vector<uint8_t> bits = TreeBits(c);
    for (int64_t i = 0; i < c.q_len; ++i)
      for (int64_t j = std::max<int64_t>(0, c.kv_len - c.q_len); j < c.kv_len; ++j)
        n -= PairAllowed(c, i, j) && !InTree(c, bits, i, j);
  }
  for (int64_t i = 0; i < c.q_len; ++i) {
    const RowRange r = RowOf(c, i);
    n += static_cast<double>(r.hi - r.lo);
    if (c.causal && c.window > 0 && c.stride > 0 && r.lo > r.sb) {
      auto below = [&](int64_t e) { return e > 0 ? (e - 1) / c.stride + 1 : 0; };
      n += static_cast<double>(below(r.lo) - below(r.sb));
    }
  }
  return n;
}

struct Buffers {
  Floats q, k, v, o;
  Halves q16, k16, v16, o16;  // 16-bit data
  QuantData kq, vq;           // a quantized cache
  octattn_tensor tq, tk, tv, to;
  // The backward's: the forward's lse, dout and the gradients.
  std::vector<float> lse, dq, dk, dv;
  Floats dout;
  Halves dout16;  // of o's dtype
  octattn_tensor tlse{}, tdout{}, tdq{}, tdk{}, tdv{};
  std::vector<float> slopes, sinks, bias;
  std::vector<uint8_t> mask, tree, kinds;
  std::vector<int32_t> key_list;  // --index-topk: [q_len][index_topk] entries, -1 past a row's
  octattn_tensor tkeys{};
  octattn_tensor tbias{}, tmask{};
  // --block-mask's lists (one for every batch entry and head): counts, indices.
  std::vector<int32_t> block_counts, block_indices;
  octattn_tensor tcounts{}, tindices{};
  // --key-scores: the output ([batch, kv_heads, kv_len, 1]; written by const calls too).
  std::vector<float> key_scores;
  mutable octattn_tensor tks{};
  explicit Buffers(const Case& c) {
    const int64_t value_dim = c.ValueDim();
    const int64_t qs[4] = {c.batch, c.q_heads, c.q_len, c.head_dim};
    const int64_t ks[4] = {c.batch, c.kv_heads, c.kv_len, c.head_dim};
    const int64_t vs[4] = {c.batch, c.kv_heads, c.kv_len, value_dim};
    const int64_t os[4] = {c.batch, c.q_heads, c.q_len, value_dim};
    q.resize(static_cast<size_t>(qs[0] * qs[1] * qs[2] * qs[3]));
    k.resize(static_cast<size_t>(ks[0] * ks[1] * ks[2] * ks[3]));
    v.resize(c.v_of_k ? 0 : static_cast<size_t>(vs[0] * vs[1] * vs[2] * vs[3]));
    o.resize(static_cast<size_t>(os[0] * os[1] * os[2] * os[3]));
    std::mt19937 rng(1);
    std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
    for (auto* b : {&q, &k, &v})
      for (float& x : *b) x = dist(rng);
    std::fill(o.begin(), o.end(), 0.0f);  // touch the output pages before any timing
    octattn_tensor_init(&tq, q.data(), qs, OCTATTN_LAYOUT_BHTD);
    octattn_tensor_init(&tk, k.data(), ks, OCTATTN_LAYOUT_BHTD);
    octattn_tensor_init(&tv, v.data(), vs, OCTATTN_LAYOUT_BHTD);
    octattn_tensor_init(&to, o.data(), os, OCTATTN_LAYOUT_BHTD);
    if (c.backward) {
      const int64_t ls[4] = {c.batch, c.q_heads, c.q_len, 1};
      lse.assign(static_cast<size_t>(ls[0] * ls[1] * ls[2]), 0.0f);
      dout.resize(o.size());
      for (float& x : dout) x = dist(rng);
      dq.assign(q.size(), 0.0f);
      dk.assign(k.size(), 0.0f);
      dv.assign(static_cast<size_t>(vs[0] * vs[1] * vs[2] * vs[3]), 0.0f);
      octattn_tensor_init(&tlse, lse.data(), ls, OCTATTN_LAYOUT_BHTD);
      octattn_tensor_init(&tdout, dout.data(), os, OCTATTN_LAYOUT_BHTD);
      octattn_tensor_init(&tdq, dq.data(), qs, OCTATTN_LAYOUT_BHTD);
      octattn_tensor_init(&tdk, dk.data(), ks, OCTATTN_LAYOUT_BHTD);
      octattn_tensor_init(&tdv, dv.data(), vs, OCTATTN_LAYOUT_BHTD);
    }
    Retype(&q, &q16, &tq, c.dtype);
    Retype(&o, &o16, &to, c.dtype);
    if (c.backward) Retype(&dout, &dout16, &tdout, c.dtype);
    if (Quantized(c.KvType())) {
      Quantize(&k, &kq, &tk, c);
      if (!c.v_of_k) Quantize(&v, &vq, &tv, c);
    } else {
      Retype(&k, &k16, &tk, c.KvType());
      Retype(&v, &v16, &tv, c.KvType());
    }
    if (c.v_of_k) tv = ValueView(tk, value_dim);
    for (int64_t h = 0; h < c.q_heads; ++h) {
      // The ALiBi paper's slopes: a geometric sequence from 2^(-8 / heads).
      slopes.push_back(std::pow(2.0f, -8.0f * static_cast<float>(h + 1) / c.q_heads));
      sinks.push_back(dist(rng));
    }
    const int64_t ms[4] = {1, 1, c.q_len, c.kv_len};
    if (c.bias_tensor) {
      bias.resize(static_cast<size_t>(c.q_len * c.kv_len));
      for (float& x : bias) x = dist(rng);
      octattn_tensor_init(&tbias, bias.data(), ms, OCTATTN_LAYOUT_BHTD);
    }
    if (c.tree) tree = TreeBits(c);
    if (c.index_topk > 0) {
      key_list.assign(static_cast<size_t>(c.q_len * c.index_topk), -1);
      for (int64_t i = 0; i < c.q_len; ++i) {
        const std::vector<int32_t> top = TopKeys(c, i);
        std::copy(top.begin(), top.end(), key_list.begin() + i * c.index_topk);
      }
      const int64_t ls[4] = {1, 1, c.q_len, c.index_topk};
      octattn_tensor_init(&tkeys, key_list.data(), ls, OCTATTN_LAYOUT_BHTD);
      tkeys.dtype = OCTATTN_DTYPE_INT32;
    }
    if (c.key_scores) {
      const int64_t ss[4] = {c.batch, c.kv_heads, c.kv_len, 1};
      key_scores.assign(static_cast<size_t>(c.batch * c.kv_heads * c.kv_len), 0.0f);
      octattn_tensor_init(&tks, key_scores.data(), ss, OCTATTN_LAYOUT_BHTD);
    }
    const int64_t kb = (c.kv_len + kBenchBlock - 1) / kBenchBlock;
    if (!c.block_mask.empty()) {
      kinds = BlockKinds(c);
      const int64_t qb = (c.q_len + kBenchBlock - 1) / kBenchBlock;
      block_counts.assign(static_cast<size_t>(qb), 0);
      block_indices.assign(static_cast<size_t>(qb * kb), 0);
      for (int64_t x = 0; x < qb; ++x)
        for (int64_t y = 0; y < kb; ++y)
          if (kinds[x * kb + y])
            block_indices[x * kb + block_counts[x]++] = static_cast<int32_t>(y);
      const int64_t cs[4] = {1, 1, qb, 1}, is[4] = {1, 1, qb, kb};
      octattn_tensor_init(&tcounts, block_counts.data(), cs, OCTATTN_LAYOUT_BHTD);
      octattn_tensor_init(&tindices, block_indices.data(), is, OCTATTN_LAYOUT_BHTD);
      tcounts.dtype = tindices.dtype = OCTATTN_DTYPE_INT32;
    }
    if (c.mask_tensor) {
      mask.resize(static_cast<size_t>(c.q_len * c.kv_len));
      for (int64_t i = 0; i < c.q_len; ++i)
        for (int64_t j = 0; j < c.kv_len; ++j)
          mask[i * c.kv_len + j] =
              PairAllowed(c, i, j) && (!c.tree || InTree(c, tree, i, j)) &&
              (kinds.empty() || kinds[(i / kBenchBlock) * kb + j / kBenchBlock]);
      octattn_tensor_init(&tmask, mask.data(), ms, OCTATTN_LAYOUT_BHTD);
      tmask.dtype = OCTATTN_DTYPE_BOOL;
    }
  }
};

octattn_context* MakeContext(const Case& c, std::string* error, const Api& api = kThisBuild) {
  octattn_context* ctx = nullptr;
  if (api.context_create(&ctx) != OCTATTN_OK) return nullptr;
  if (api.set_threads(ctx, c.threads) != OCTATTN_OK ||
      api.set_target(ctx, c.backend, c.target) != OCTATTN_OK) {
    *error = api.last_error(ctx);
    api.context_destroy(ctx);
    return nullptr;
  }
  return ctx;
}

// The forward (with lse for a later backward), or the backward of its outputs.
octattn_status Forward(octattn_context* ctx, const octattn_attention_options& opt, Buffers& b,
                       const Case& c, const Api& api = kThisBuild) {
  return api.attention(ctx, &opt, &b.tq, &b.tk, &b.tv, &b.to, c.backward ? &b.tlse : nullptr,
                       nullptr, nullptr, 0);
}
octattn_status Backward(octattn_context* ctx, const octattn_attention_options& opt, Buffers& b,
                        const Api& api = kThisBuild) {
  return api.attention_backward(ctx, &opt, &b.tq, &b.tk, &b.tv, &b.to, &b.tlse, &b.tdout, nullptr,
                                &b.tdq, &b.tdk, &b.tdv, nullptr, nullptr, nullptr, 0);
}
// The timed call of a case: the forward, or the backward after one forward.
octattn_status Timed(octattn_context* ctx, const octattn_attention_options& opt, Buffers& b,
                     const Case& c, const Api& api = kThisBuild) {
  return c.backward ? Backward(ctx, opt, b, api) : Forward(ctx, opt, b, c, api);
}

// `repeat` timed calls run(ctx, kThisBuild) (after a warm-up call), sorted seconds; with
// a pairing, each alternates with its partner's run and *fields gets what the pairing
// adds to the line: --against, the same call through the other build (its own context,
// first warmed up by warm(x, api), which also checks that it takes these arguments; a
// failure ends the run with its message); --vs-read, a ReadPass of the call's `kv_bytes`
// by the call's threads (on huge pages with --huge-pages); --contiguous, `contiguous`
// (seconds of the batch on a contiguous cache).
template <class Warm, class Run>
std::vector<double> TimeCalls(const Case& c, const Args& a, octattn_context* ctx, Warm&& warm,
                              Run&& run, double kv_bytes, std::string* fields,
                              const std::function<double()>& contiguous = {}) {
  auto mine = [&] { run(ctx, kThisBuild); };
  if (a.vs_read) {
    octattn_run_info info{};
    info.struct_size = sizeof(info);
    octattn_context_last_run(ctx, &info);
    ReadPass read(static_cast<size_t>(kv_bytes), info.threads, g_huge_pages);
    read.Seconds();  // its pages touched, as the call's are by its warm-up
    const double bytes = static_cast<double>(read.Bytes());
    const Paired p = TimePaired(
        a.repeat, [&] { return Seconds(mine); }, [&] { return read.Seconds(); }, kv_bytes / bytes);
    *fields = PairFields(p, a.json, "read", "read_fraction", bytes);
    return p.mine;
  }
  if (a.contiguous || a.vs_plain) {  // `contiguous` times the partner
    const Paired p = TimePaired(
        a.repeat, [&] { return Seconds(mine); }, contiguous);
    *fields = a.vs_plain ? PairFields(p, a.json, "plain", "plain_fraction")
                         : PairFields(p, a.json, "contiguous", "paged_fraction");
    return p.mine;
  }
  if (a.against.empty()) return TimeRepeats(a.repeat, mine);
  std::string err = "no context";
  octattn_context* other = MakeContext(c, &err, g_against);
  const bool ok = other && warm(other, g_against) == OCTATTN_OK;
  if (other && !ok) err = g_against.last_error(other);
  if (!ok) {
    std::fprintf(stderr, "--against %s: %s\n", a.against.c_str(), err.c_str());
    std::exit(2);
  }
  const Paired p = TimePaired(
      a.repeat, [&] { return Seconds(mine); },
      [&] { return Seconds([&] { run(other, g_against); }); });
  g_against.context_destroy(other);
  *fields = PairFields(p, a.json, "against", "speedup");
  return p.mine;
}

// The options of a case's flags that need no buffers: mask, algorithm, softcap.
octattn_attention_options MaskOptions(const Case& c) {
  octattn_attention_options o;
  octattn_attention_options_init(&o);
  o.causal = c.causal;
  o.window = c.window;
  o.stride = c.stride;
  o.chunk = c.chunk;
  o.algorithm = c.algo;
  o.softcap = c.softcap;
  o.qk_precision = c.qk;
  return o;
}

octattn_attention_options OptionsOf(const Case& c, const Buffers& b) {
  octattn_attention_options o = MaskOptions(c);
  o.k_scale = b.kq.Scale();
  o.v_scale = b.vq.Scale();
  if (c.key_scores) o.key_scores = &b.tks;
  if (c.alibi) o.alibi_slopes = b.slopes.data();
  if (c.sinks) o.sinks = b.sinks.data();
  if (c.bias_tensor) o.bias = &b.tbias;
  if (c.index_topk > 0) o.key_indices = &b.tkeys;
  if (c.mask_tensor) {  // the tensor holds the mask (and the tree): the call's own is full
    o.mask = &b.tmask;
    o.causal = 0;
    o.window = o.stride = o.chunk = 0;
  } else if (!c.block_mask.empty()) {
    // One list for every batch entry and head (sizes 1); listed as partial blocks, which
    // without a mask tensor are full ones.
    o.block_counts = &b.tcounts;
    o.block_indices = &b.tindices;
    o.block_q = o.block_kv = kBenchBlock;
  } else if (c.tree) {
    o.tree = b.tree.data();
    o.tree_row_bytes = (c.q_len + 7) / 8;
    o.tree_stride = 0;  // one tree for every batch entry
  }
  return o;
}

// The modifiers of a case, as a short label ("none" without any).
std::string ModsOf(const Case& c) {
  std::string s;
  auto add = [&](const std::string& x) { s += (s.empty() ? "" : ",") + x; };
  if (c.softcap > 0) add("softcap=" + std::to_string(c.softcap).substr(0, 5));
  if (c.alibi) add("alibi");
  if (c.sinks) add("sinks");
  if (c.chunk > 0) add("chunk=" + std::to_string(c.chunk));
  if (c.tree) add("tree");
  if (c.block_mask == "documents") add("documents=" + std::to_string(c.block_docs));
  if (c.block_mask == "density") add("density=" + std::to_string(c.block_density).substr(0, 4));
  if (c.mask_tensor) add("mask_tensor");
  if (c.bias_tensor) add("bias_tensor");
  if (c.key_scores) add("key_scores");
  if (c.v_of_k) add("v_of_k");
  if (c.index_topk > 0) add("topk=" + std::to_string(c.index_topk));
  return s.empty() ? "none" : s;
}

// The head dimension, and /value_dim where it differs ("576/512").
std::string DimsOf(const Case& c) {
  return std::to_string(c.head_dim) +
         (c.ValueDim() != c.head_dim ? "/" + std::to_string(c.ValueDim()) : "");
}

long MaxRssKib() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_maxrss;
}

// Peak RSS growth of one call, in a child process that has nothing else allocated.
double ExtraRssMib(const Case& c) {
  int fds[2];
  if (pipe(fds) != 0) return -1;
  const pid_t pid = fork();
  if (pid == 0) {
    close(fds[0]);
    Buffers b(c);
    std::string err;
    octattn_context* ctx = MakeContext(c, &err);
    double mib = -1;
    if (ctx) {
      const octattn_attention_options opt = OptionsOf(c, b);
      const bool ready = !c.backward || Forward(ctx, opt, b, c) == OCTATTN_OK;
      const long before = MaxRssKib();
      if (ready && Timed(ctx, opt, b, c) == OCTATTN_OK) mib = (MaxRssKib() - before) / 1024.0;
    }
    if (write(fds[1], &mib, sizeof(mib)) != sizeof(mib)) _exit(1);
    _exit(0);
  }
  close(fds[1]);
  double mib = -1;
  if (read(fds[0], &mib, sizeof(mib)) != sizeof(mib)) mib = -1;
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  return mib;
}

double PeakFor(const Limits& l, octattn_target t) {
  if (t == OCTATTN_TARGET_AVX512 || t == OCTATTN_TARGET_AVX512_BF16 || t == OCTATTN_TARGET_AMX_BF16)
    return l.fma512;
  if (t == OCTATTN_TARGET_AVX2) return l.fma256;
  // ARM64: the NEON FMA peak for NEON and both SVE targets (the SVE cores these serve,
  // Neoverse V1 at 256 bits and N2/V2 at 128, issue as many flops per cycle through SVE
  // as through NEON); a quarter of it for the scalar target.
  if (l.fma128 > 0) return t == OCTATTN_TARGET_SCALAR ? l.fma128 / 4 : l.fma128;
  if (t == OCTATTN_TARGET_SCALAR) return l.muladd128 / 4;
  return l.muladd128;
}

void RunCase(const Case& c, const Args& a, const Limits& limits) {
  std::string err;
  octattn_context* ctx = MakeContext(c, &err);
  Buffers b(c);
  const octattn_attention_options opt = OptionsOf(c, b);
  octattn_status st = ctx ? Forward(ctx, opt, b, c) : OCTATTN_ERROR_UNSUPPORTED;
  if (st == OCTATTN_OK && c.backward) st = Backward(ctx, opt, b);  // also the warm-up
  if (ctx && st != OCTATTN_OK) err = octattn_context_last_error(ctx);
  if (st != OCTATTN_OK) {
    std::printf(a.json ? "{\"error\":\"%s\",\"algo\":\"%s\",\"q_len\":%lld,\"head_dim\":%lld}\n"
                       : "error: %s (algo %s, q_len %lld, head_dim %lld)\n",
                err.c_str(), octattn_algorithm_name(c.algo), (long long)c.q_len,
                (long long)c.head_dim);
    octattn_context_destroy(ctx);
    return;
  }
  std::string paired;  // what a pairing adds to the line
  // (--index-topk: the listed rows of the last query row, the most a row reads.)
  const int64_t kv_rows = c.index_topk > 0 ? std::min(c.index_topk, c.kv_len) : c.kv_len;
  const double kv_bytes = static_cast<double>(c.batch * c.kv_heads * kv_rows) * c.RowBytes();
  const std::vector<double> times = TimeCalls(
      c, a, ctx,
      [&](octattn_context* x, const Api& api) {
        octattn_status s = Forward(x, opt, b, c, api);
        if (s == OCTATTN_OK && c.backward) s = Backward(x, opt, b, api);
        return s;
      },
      [&](octattn_context* x, const Api& api) { return Timed(x, opt, b, c, api); }, kv_bytes,
      &paired,
      [&] {
        octattn_attention_options plain = opt;
        plain.key_scores = nullptr;
        return Seconds([&] { Forward(ctx, plain, b, c); });
      });
  const double median = times[times.size() / 2];
  octattn_run_info info{};
  info.struct_size = sizeof(info);
  octattn_context_last_run(ctx, &info);
  octattn_context_destroy(ctx);
  const double flops = c.PairFlops() * AllowedPairs(c) * c.batch * c.q_heads;
  const double gflops = flops / median / 1e9;
  const double peak = PeakFor(limits, info.algorithm == OCTATTN_ALGORITHM_REFERENCE
                                          ? (limits.fma512 > 0   ? OCTATTN_TARGET_AVX512
                                             : limits.fma128 > 0 ? OCTATTN_TARGET_NEON
                                                                 : OCTATTN_TARGET_AVX2)
                                          : info.target);
  const double kv_gbps = kv_bytes / median / 1e9;
  const double rss = a.rss ? ExtraRssMib(c) : -1;
  const char* target =
      info.algorithm == OCTATTN_ALGORITHM_REFERENCE ? "scalar" : octattn_target_name(info.target);
  const char* backend =
      info.algorithm == OCTATTN_ALGORITHM_REFERENCE ? "none" : octattn_backend_name(info.backend);
  if (a.json) {
    std::printf(
        "{\"pass\":\"%s\",\"algo\":\"%s\",\"backend\":\"%s\",\"target\":\"%s\",\"threads\":%d,"
        "\"batch\":%lld,"
        "\"q_heads\":%lld,\"kv_heads\":%lld,\"q_len\":%lld,\"kv_len\":%lld,\"head_dim\":%lld,"
        "\"value_dim\":%lld,\"causal\":%d,\"window\":%lld,\"stride\":%lld,\"mods\":\"%s\","
        "\"dtype\":\"%s\","
        "\"kv_dtype\":\"%s\",\"seconds_median\":%.6g,\"seconds_min\":%.6g,"
        "\"seconds_max\":%.6g,\"gflops\":%.4g,\"fma_peak_gflops\":%.4g,\"peak_fraction\":%.4f,"
        "\"kv_gbps\":%.4g,\"extra_rss_mib\":%.2f%s}\n",
        c.backward ? "backward" : "forward", octattn_algorithm_name(info.algorithm), backend,
        target, info.threads, (long long)c.batch, (long long)c.q_heads, (long long)c.kv_heads,
        (long long)c.q_len, (long long)c.kv_len, (long long)c.head_dim, (long long)c.ValueDim(),
        c.causal, (long long)c.window, (long long)c.stride, ModsOf(c).c_str(), DtypeName(c.dtype),
        c.KvName().c_str(), median, times.front(), times.back(), gflops, peak,
        gflops / (peak * info.threads), kv_gbps, rss, paired.c_str());
  } else {
    std::printf(
        "%s%-9s %-7s %-6s thr %d  B%lld Hq%lld Hkv%lld Tq%lld Tk%lld D%s %s w%lld s%lld %s "
        "%s/%s  %9.4f ms  %7.2f GFLOP/s  %5.1f%% of peak  %7.2f GB/s kv  +%.1f MiB%s\n",
        c.backward ? "backward " : "", octattn_algorithm_name(info.algorithm), backend, target,
        info.threads, (long long)c.batch, (long long)c.q_heads, (long long)c.kv_heads,
        (long long)c.q_len, (long long)c.kv_len, DimsOf(c).c_str(), c.causal ? "causal" : "full",
        (long long)c.window, (long long)c.stride, ModsOf(c).c_str(), DtypeName(c.dtype),
        c.KvName().c_str(), median * 1e3, gflops, 100 * gflops / (peak * info.threads), kv_gbps,
        rss, paired.c_str());
  }
  std::fflush(stdout);
}

// A batch of sequences (--seq-kv-lens): the ragged layout packs every sequence's rows
// ([1, heads, total, dim], by default [total, heads, dim] in memory), the padded one
// gives each the batch's longest lengths (left padding: kv_starts, kv_lens), separate
// calls take views of the ragged tensors.
struct SequenceBatch {
  int64_t n, total_q, total_k, max_q, max_k;
  std::vector<int64_t> kv_lens, q_lens, kv_starts, cu_q, cu_k;
  Floats q, k, v, o;
  Halves q16, k16, v16, o16, kp16, vp16;  // 16-bit data
  octattn_tensor tq{}, tk{}, tv{}, to{};
  SequenceBatch(const Case& c, const std::vector<int64_t>& lens, bool padded, bool prefill,
                octattn_layout layout)
      : n(static_cast<int64_t>(lens.size())), kv_lens(lens) {
    cu_q.push_back(0);
    cu_k.push_back(0);
    max_q = max_k = 0;
    for (int64_t kv : lens) {
      q_lens.push_back(prefill ? kv : c.q_len);
      cu_q.push_back(cu_q.back() + q_lens.back());
      cu_k.push_back(cu_k.back() + kv);
      max_q = std::max(max_q, q_lens.back());
      max_k = std::max(max_k, kv);
    }
    for (int64_t kv : lens) kv_starts.push_back(max_k - kv);
    total_q = cu_q.back();
    total_k = cu_k.back();
    const int64_t qs[4] = {padded ? n : 1, c.q_heads, padded ? max_q : total_q, c.head_dim};
    const int64_t ks[4] = {padded ? n : 1, c.kv_heads, padded ? max_k : total_k, c.head_dim};
    const int64_t vs[4] = {ks[0], ks[1], ks[2], c.ValueDim()};
    const int64_t os[4] = {qs[0], qs[1], qs[2], c.ValueDim()};
    q.resize(static_cast<size_t>(qs[0] * qs[1] * qs[2] * qs[3]));
    k.resize(static_cast<size_t>(ks[0] * ks[1] * ks[2] * ks[3]));
    v.resize(c.v_of_k ? 0 : static_cast<size_t>(vs[0] * vs[1] * vs[2] * vs[3]));
    o.assign(static_cast<size_t>(os[0] * os[1] * os[2] * os[3]), 0.0f);
    std::mt19937 rng(1);
    std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
    for (auto* b : {&q, &k, &v})
      for (float& x : *b) x = dist(rng);
    octattn_tensor_init(&tq, q.data(), qs, layout);
    octattn_tensor_init(&tk, k.data(), ks, layout);
    octattn_tensor_init(&tv, v.data(), vs, layout);
    octattn_tensor_init(&to, o.data(), os, layout);
  }
  // Rows [row, row + rows) of a [1, H, T, D] tensor.
  // The keys and values moved into pools of blocks of `bs` rows ([blocks, bs, H, D] in
  // memory), the blocks in shuffled order; the table has `cols` ids per sequence.
  int64_t cols = 0;
  std::vector<int32_t> table;
  Floats kp, vp;
  octattn_tensor tkp{}, tvp{};
  QuantData kq, vq, kpq, vpq;  // a quantized cache: contiguous and paged
  // The first `rows` keys and values of every sequence made those of sequence 0 (a
  // shared prompt), in the ragged tensors (before Page and Retype).
  void SharePrefix(const Case& c, int64_t rows) {
    auto share = [&](Floats& x, const octattn_tensor& t, int64_t dim) {
      for (int64_t s = 1; s < n; ++s)
        for (int64_t r = 0; r < rows; ++r)
          for (int64_t h = 0; h < c.kv_heads; ++h)
            for (int64_t d = 0; d < dim; ++d) {
              const int64_t at = h * t.stride[1] + d * t.stride[3];
              const int64_t dst = at + (cu_k[static_cast<size_t>(s)] + r) * t.stride[2];
              x[static_cast<size_t>(dst)] = x[static_cast<size_t>(at + r * t.stride[2])];
            }
    };
    share(k, tk, c.head_dim);
    if (!c.v_of_k) share(v, tv, c.ValueDim());
  }
  // With shared > 0, every sequence's first shared / bs table entries are sequence 0's.
  void Page(const Case& c, int64_t bs, int64_t shared = 0) {
    cols = (max_k + bs - 1) / bs;
    const int64_t blocks = n * cols;
    std::vector<int32_t> ids(static_cast<size_t>(blocks));
    for (int64_t i = 0; i < blocks; ++i) ids[static_cast<size_t>(i)] = static_cast<int32_t>(i);
    std::shuffle(ids.begin(), ids.end(), std::mt19937(7));
    table = ids;
    for (int64_t s = 1; s < n; ++s)
      for (int64_t b = 0; b < shared / bs; ++b)
        table[static_cast<size_t>(s * cols + b)] = table[static_cast<size_t>(b)];
    auto page = [&](const Floats& x, const octattn_tensor& t, int64_t dim, Floats* xp,
                    octattn_tensor* tp) {
      const int64_t ps[4] = {blocks, c.kv_heads, bs, dim};
      xp->assign(static_cast<size_t>(blocks * c.kv_heads * bs * dim), 0.0f);
      octattn_tensor_init(tp, xp->data(), ps, OCTATTN_LAYOUT_BTHD);
      for (int64_t s = 0; s < n; ++s)
        for (int64_t r = 0; r < kv_lens[static_cast<size_t>(s)]; ++r)
          for (int64_t h = 0; h < c.kv_heads; ++h) {
            const int64_t blk = table[static_cast<size_t>(s * cols + r / bs)];
            const int64_t dst = blk * tp->stride[0] + h * tp->stride[1] + (r % bs) * tp->stride[2];
            const int64_t from = h * t.stride[1] + (cu_k[static_cast<size_t>(s)] + r) * t.stride[2];
            for (int64_t d = 0; d < dim; ++d)
              (*xp)[static_cast<size_t>(dst + d)] = x[static_cast<size_t>(from + d * t.stride[3])];
          }
    };
    page(k, tk, c.head_dim, &kp, &tkp);
    if (!c.v_of_k) page(v, tv, c.ValueDim(), &vp, &tvp);
  }
  // The tensors in their dtypes (after Page).
  void Retype(const Case& c) {
    ::Retype(&q, &q16, &tq, c.dtype);
    ::Retype(&o, &o16, &to, c.dtype);
    if (Quantized(c.KvType())) {
      Quantize(&k, &kq, &tk, c);
      if (!c.v_of_k) Quantize(&v, &vq, &tv, c);
      if (!kp.empty()) {
        Quantize(&kp, &kpq, &tkp, c);
        Quantize(&vp, &vpq, &tvp, c);
      }
      return;
    }
    ::Retype(&k, &k16, &tk, c.KvType());
    ::Retype(&v, &v16, &tv, c.KvType());
    if (!kp.empty()) {
      ::Retype(&kp, &kp16, &tkp, c.KvType());
      ::Retype(&vp, &vp16, &tvp, c.KvType());
    }
    if (c.v_of_k) {
      tv = ValueView(tk, c.ValueDim());
      if (!kp.empty()) tvp = ValueView(tkp, c.ValueDim());
    }
  }
  static octattn_tensor Rows(const octattn_tensor& t, int64_t row, int64_t rows) {
    octattn_tensor r = t;
    r.data = static_cast<char*>(t.data) + row * t.stride[2] * DtypeBytes(t.dtype);
    r.shape[2] = rows;
    return r;
  }
};

// Times octattn_kv_store of a decode step's rows: q_len new rows of every (batch entry,
// kv head), f32, into a cache of kv_len rows in --kv-dtype (INT8: its scales computed;
// FP8: one scale per tensor), at its last rows (--append: at the rows after the previous
// store's, cycling through the cache); many stores a timing (a store takes microseconds),
// the median of --repeat timings per store; with --against, each timing alternating with
// one of the other build's (its own context; the same rows, which --append moves on from
// store to store whichever build wrote the last).
void RunStore(const Case& c, const Args& a) {
  const octattn_dtype type = c.KvType();
  const int64_t rows = c.q_len, cap = std::max(c.kv_len, rows);
  const int64_t ss[4] = {c.batch, c.kv_heads, rows, c.head_dim};
  const int64_t cs[4] = {c.batch, c.kv_heads, cap, c.head_dim};
  Floats src(static_cast<size_t>(ss[0] * ss[1] * ss[2] * ss[3])), cache_f;
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  for (float& x : src) x = dist(rng);
  cache_f.assign(static_cast<size_t>(cs[0] * cs[1] * cs[2] * cs[3]), 0.0f);
  octattn_tensor ts, tc;
  octattn_tensor_init(&ts, src.data(), ss, OCTATTN_LAYOUT_BHTD);
  octattn_tensor_init(&tc, cache_f.data(), cs, OCTATTN_LAYOUT_BHTD);
  QuantData qd;
  Halves h16;
  if (Quantized(type)) {
    Quantize(&cache_f, &qd, &tc, c);
  } else {
    Retype(&cache_f, &h16, &tc, type);
  }
  // The view of `rows` rows of the cache from row `at`, and of their scales.
  octattn_tensor dst = tc, scale = qd.ts;
  dst.shape[2] = rows;
  if (type == OCTATTN_DTYPE_INT8) scale.shape[2] = rows;
  auto place = [&](int64_t at) {
    dst.data = static_cast<char*>(tc.data) + at * tc.stride[2] * DtypeBytes(type);
    if (type == OCTATTN_DTYPE_INT8)
      scale.data = static_cast<float*>(qd.ts.data) + at * qd.ts.stride[2];
  };
  place(cap - rows);
  std::string err;
  octattn_context* ctx = MakeContext(c, &err);
  octattn_tensor* sc = qd.scale.empty() ? nullptr : &scale;
  const int64_t slots = cap / rows;  // the row blocks --append cycles through
  int64_t next = 0;
  auto store = [&](octattn_context* x, const Api& api) {
    if (a.append) place((next++ % slots) * rows);
    return api.kv_store(x, &ts, &dst, sc, 0, nullptr);
  };
  if (!ctx || store(ctx, kThisBuild) != OCTATTN_OK) {
    std::printf("error: %s\n", ctx ? octattn_context_last_error(ctx) : err.c_str());
    octattn_context_destroy(ctx);
    return;
  }
  octattn_context* other = nullptr;  // --against: the other build's context
  if (!a.against.empty()) {
    err.clear();
    if (!g_against.kv_store) {
      err = "no octattn_kv_store (a build before 0.11)";
    } else if (!(other = MakeContext(c, &err, g_against))) {
      if (err.empty()) err = "no context";
    } else if (store(other, g_against) != OCTATTN_OK) {
      err = g_against.last_error(other);
    }
    if (!err.empty()) {
      std::fprintf(stderr, "--against %s: %s\n", a.against.c_str(), err.c_str());
      std::exit(2);
    }
  }
  int64_t n = 1;  // stores per timing: about 10 ms of them
  auto stores = [&](octattn_context* x, const Api& api) {
    return Seconds([&] {
      for (int64_t i = 0; i < n; ++i) store(x, api);
    });
  };
  while (stores(ctx, kThisBuild) < 0.01 && n < (int64_t{1} << 24)) n *= 2;
  std::vector<double> times;
  char paired[160] = "";
  if (other) {
    const Paired p = TimePaired(
        a.repeat, [&] { return stores(ctx, kThisBuild); },
        [&] { return stores(other, g_against); });
    times = p.mine;
    const size_t m = p.ratio.size();
    std::snprintf(paired, sizeof paired, "  against %.3f us: speedup %.3f (quartiles %.3f, %.3f)",
                  p.theirs[m / 2] / static_cast<double>(n) * 1e6, p.ratio[m / 2], p.ratio[m / 4],
                  p.ratio[3 * m / 4]);
    g_against.context_destroy(other);
  } else {
    times = TimeRepeats(a.repeat, [&] { stores(ctx, kThisBuild); });
  }
  octattn_context_destroy(ctx);
  const double per = times[times.size() / 2] / static_cast<double>(n);
  const double values = static_cast<double>(c.batch * c.kv_heads * rows * c.head_dim);
  std::printf(
      "store%s %s thr %d  B%lld Hkv%lld rows %lld D%lld f32 -> %s  %9.3f us  %7.2f Gvalues/s%s\n",
      a.append ? " --append" : "", octattn_target_name(c.target), c.threads, (long long)c.batch,
      (long long)c.kv_heads, (long long)rows, (long long)c.head_dim, DtypeName(type), per * 1e6,
      values / per / 1e9, paired);
}

// Times one step over a batch of sequences (all of them, whichever way they are passed).
void RunSequenceBatch(const Case& c, const Args& a, const Limits& limits) {
  const bool padded = a.seq_mode == "padded", separate = a.seq_mode == "separate";
  const octattn_layout layout = a.seq_layout == "bhtd" || (a.seq_layout.empty() && padded)
                                    ? OCTATTN_LAYOUT_BHTD
                                    : OCTATTN_LAYOUT_BTHD;
  SequenceBatch sb(c, a.seq_kv_lens, padded, a.prefill, layout);
  std::string err;
  octattn_context* ctx = MakeContext(c, &err);
  // The mask flags and softcap (the other modifiers are not offered with batches here).
  octattn_attention_options opt = MaskOptions(c);
  std::vector<octattn_tensor> views;  // separate: q, k, v, o of each sequence
  if (padded) {
    opt.kv_starts = sb.kv_starts.data();
    opt.kv_lens = sb.kv_lens.data();
  } else if (!separate) {
    opt.sequences = sb.n;
    opt.cu_seqlens_q = sb.cu_q.data();
    opt.cu_seqlens_k = sb.cu_k.data();
    if (a.block_size > 0) {
      sb.SharePrefix(c, a.shared_prefix);
      sb.Page(c, a.block_size, a.shared_prefix);
      opt.cu_seqlens_k = nullptr;
      opt.kv_lens = sb.kv_lens.data();
      opt.block_table = sb.table.data();
      opt.block_table_cols = sb.cols;
    }
  }
  // --key-scores: one entry per batch entry (padded), per sequence (paged) or for the
  // ragged call's key rows.
  std::vector<float> key_scores;
  octattn_tensor tks{};
  if (c.key_scores) {
    const int64_t ss[4] = {padded || a.block_size > 0 ? sb.n : 1, c.kv_heads,
                           padded             ? sb.max_k
                           : a.block_size > 0 ? sb.cols * a.block_size
                                              : sb.total_k,
                           1};
    key_scores.assign(static_cast<size_t>(ss[0] * ss[1] * ss[2]), 0.0f);
    octattn_tensor_init(&tks, key_scores.data(), ss, OCTATTN_LAYOUT_BHTD);
    opt.key_scores = &tks;
  }
  if (separate && Quantized(c.KvType())) {
    std::fprintf(stderr, "--seq-mode separate takes no quantized cache (its scales' rows)\n");
    std::exit(2);
  }
  sb.Retype(c);
  const octattn_tensor flat_k = sb.tk, flat_v = sb.tv;  // the contiguous cache
  opt.k_scale = sb.kq.Scale();
  opt.v_scale = sb.vq.Scale();
  octattn_attention_options flat = opt;
  flat.key_scores = nullptr;  // (--contiguous: the same call's time, not with --key-scores)
  if (opt.block_table) {
    sb.tk = sb.tkp;
    sb.tv = sb.tvp;
    opt.k_scale = sb.kpq.Scale();
    opt.v_scale = sb.vpq.Scale();
  }
  if (separate) {
    for (int64_t s = 0; s < sb.n; ++s) {
      views.push_back(SequenceBatch::Rows(sb.tq, sb.cu_q[s], sb.q_lens[s]));
      views.push_back(SequenceBatch::Rows(sb.tk, sb.cu_k[s], sb.kv_lens[s]));
      views.push_back(SequenceBatch::Rows(sb.tv, sb.cu_k[s], sb.kv_lens[s]));
      views.push_back(SequenceBatch::Rows(sb.to, sb.cu_q[s], sb.q_lens[s]));
    }
  }
  // The batch through a context of this build or (--against) of the other.
  auto call = [&](octattn_context* x, const Api& api) -> octattn_status {
    if (!separate)
      return api.attention(x, &opt, &sb.tq, &sb.tk, &sb.tv, &sb.to, nullptr, nullptr, nullptr, 0);
    for (size_t s = 0; s < views.size(); s += 4) {
      const octattn_status st = api.attention(x, &opt, &views[s], &views[s + 1], &views[s + 2],
                                              &views[s + 3], nullptr, nullptr, nullptr, 0);
      if (st != OCTATTN_OK) return st;
    }
    return OCTATTN_OK;
  };
  const octattn_status st = ctx ? call(ctx, kThisBuild) : OCTATTN_ERROR_UNSUPPORTED;
  if (st != OCTATTN_OK) {
    if (ctx) err = octattn_context_last_error(ctx);
    std::printf(a.json ? "{\"error\":\"%s\"}\n" : "error: %s\n", err.c_str());
    octattn_context_destroy(ctx);
    return;
  }
  // --contiguous: the batch on the contiguous cache, through a context of its own.
  flat.cu_seqlens_k = sb.cu_k.data();
  flat.kv_lens = nullptr;
  flat.block_table = nullptr;
  flat.block_table_cols = 0;
  octattn_context* flat_ctx = nullptr;
  auto flat_call = [&] {
    return octattn_attention(flat_ctx, &flat, &sb.tq, &flat_k, &flat_v, &sb.to, nullptr, nullptr,
                             nullptr, 0);
  };
  if (a.contiguous) {  // its warm-up, which also checks the call
    flat_ctx = MakeContext(c, &err);
    if (flat_ctx && flat_call() != OCTATTN_OK) err = octattn_context_last_error(flat_ctx);
    if (!flat_ctx || !err.empty()) {
      std::fprintf(stderr, "--contiguous: %s\n", err.c_str());
      std::exit(2);
    }
  }
  octattn_attention_options plain = opt;
  plain.key_scores = nullptr;
  auto contiguous = [&] {
    if (a.vs_plain)
      return Seconds([&] {
        octattn_attention(ctx, &plain, &sb.tq, &sb.tk, &sb.tv, &sb.to, nullptr, nullptr, nullptr,
                          0);
      });
    return Seconds(flat_call);
  };
  std::string paired;  // what a pairing adds to the line
  const double kv_bytes = static_cast<double>(c.kv_heads * sb.total_k) * c.RowBytes();
  const std::vector<double> times = TimeCalls(c, a, ctx, call, call, kv_bytes, &paired, contiguous);
  octattn_context_destroy(flat_ctx);
  const double median = times[times.size() / 2];
  octattn_run_info info{};
  info.struct_size = sizeof(info);
  octattn_context_last_run(ctx, &info);
  octattn_context_destroy(ctx);
  double pairs = 0;
  for (size_t s = 0; s < sb.kv_lens.size(); ++s) {
    Case one = c;
    one.q_len = sb.q_lens[s];
    one.kv_len = sb.kv_lens[s];
    pairs += AllowedPairs(one);
  }
  const double gflops = c.PairFlops() * pairs * c.q_heads / median / 1e9;
  const double peak = PeakFor(limits, info.target);
  const double kv_gbps = kv_bytes / median / 1e9;
  std::string lens;
  for (int64_t kv : sb.kv_lens) lens += (lens.empty() ? "" : ",") + std::to_string(kv);
  const char* layout_name = layout == OCTATTN_LAYOUT_BHTD ? "bhtd" : "bthd";
  const bool paged = opt.block_table != nullptr;
  const std::string mode = paged ? "paged" + std::to_string(a.block_size) : a.seq_mode;
  if (a.json) {
    std::printf(
        "{\"pass\":\"forward\",\"batch_mode\":\"%s\",\"block_size\":%lld,\"layout\":\"%s\","
        "\"algo\":\"%s\","
        "\"backend\":\"%s\",\"target\":\"%s\",\"threads\":%d,\"sequences\":%lld,"
        "\"q_heads\":%lld,\"kv_heads\":%lld,\"q_len\":%lld,\"seq_kv_lens\":[%s],"
        "\"head_dim\":%lld,\"value_dim\":%lld,\"v_of_k\":%s,\"dtype\":\"%s\",\"kv_dtype\":\"%s\","
        "\"seconds_median\":%.6g,\"seconds_min\":%.6g,\"seconds_max\":%.6g,"
        "\"gflops\":%.4g,\"fma_peak_gflops\":%.4g,\"peak_fraction\":%.4f,\"kv_gbps\":%.4g,"
        "\"shared_prefix\":%lld,\"shared_kv_rows\":%lld%s}\n",
        mode.c_str(), (long long)(paged ? a.block_size : 0), layout_name,
        octattn_algorithm_name(info.algorithm), octattn_backend_name(info.backend),
        octattn_target_name(info.target), info.threads, (long long)sb.n, (long long)c.q_heads,
        (long long)c.kv_heads, (long long)(a.prefill ? -1 : c.q_len), lens.c_str(),
        (long long)c.head_dim, (long long)c.ValueDim(), c.v_of_k ? "true" : "false",
        DtypeName(c.dtype), c.KvName().c_str(), median, times.front(), times.back(), gflops, peak,
        gflops / (peak * info.threads), kv_gbps, (long long)a.shared_prefix,
        (long long)info.shared_kv_rows, paired.c_str());
  } else {
    std::printf(
        "%-8s %s %-9s %-7s %-6s thr %d  %lld seqs Hq%lld Hkv%lld Tq%lld Tk %lld..%lld (sum "
        "%lld) D%s%s %s/%s  %9.4f ms  %7.2f GFLOP/s  %5.1f%% of peak  %7.2f GB/s kv%s%s\n",
        mode.c_str(), layout_name, octattn_algorithm_name(info.algorithm),
        octattn_backend_name(info.backend), octattn_target_name(info.target), info.threads,
        (long long)sb.n, (long long)c.q_heads, (long long)c.kv_heads,
        (long long)(a.prefill ? -1 : c.q_len),
        (long long)*std::min_element(sb.kv_lens.begin(), sb.kv_lens.end()), (long long)sb.max_k,
        (long long)sb.total_k, DimsOf(c).c_str(), c.v_of_k ? " v_of_k" : "", DtypeName(c.dtype),
        c.KvName().c_str(), median * 1e3, gflops, 100 * gflops / (peak * info.threads), kv_gbps,
        info.shared_kv_rows > 0 ? ("  shared rows " + std::to_string(info.shared_kv_rows)).c_str()
                                : "",
        paired.c_str());
  }
  std::fflush(stdout);
}

}  // namespace

int RunBench(int argc, char** argv) {
  Args a;
  Parse(argc, argv, &a);
  if (a.limits) {
    const Limits l = MeasureLimits(true, a.quick);
    if (a.json)
      std::printf(
          "{\"limits\":true,\"fma_peak_gflops\":%.4g,\"fma_peak_avx2_gflops\":%.4g,"
          "\"muladd_sse_gflops\":%.4g,\"sgemm_gflops\":%.4g,\"read_gbps\":%.4g,"
          "\"fma_peak_neon_gflops\":%.4g,\"read_blocks_gbps\":%.4g,\"threads\":%d,"
          "\"read_threads_gbps\":%.4g,\"read_slices_gbps\":%.4g}\n",
          l.fma512 > 0   ? l.fma512
          : l.fma256 > 0 ? l.fma256
                         : l.fma128,
          l.fma256, l.muladd128, l.sgemm, l.read_gbps, l.fma128, l.read_blocks_gbps, l.threads,
          l.read_threads_gbps, l.read_slices_gbps);
    else
      std::printf(
          "one core: FMA peak %.1f GFLOP/s (zmm), %.1f (ymm), SSE mul+add %.1f, "
          "NEON FMA %.1f; OpenBLAS sgemm %.1f GFLOP/s; read %.1f GB/s (64 KiB blocks in "
          "shuffled order: %.1f; 512 B slices of 4 KiB rows, 32 rows a pass: %.1f); %d cores "
          "reading: %.1f GB/s\n",
          l.fma512, l.fma256, l.muladd128, l.fma128, l.sgemm, l.read_gbps, l.read_blocks_gbps,
          l.read_slices_gbps, l.threads, l.read_threads_gbps);
    return 0;
  }
  if (!a.against.empty()) g_against = LoadApi(a.against);
  const Limits limits = MeasureLimits(false);
  if (a.q_lens.empty()) a.q_lens.push_back(a.base.q_len);
  if (a.head_dims.empty()) a.head_dims.push_back(a.base.head_dim);
  if (a.threads.empty()) a.threads.push_back(a.base.threads);
  if (a.algos.empty()) a.algos.push_back(a.base.algo);
  if (a.backends.empty()) a.backends.push_back(a.base.backend);
  if (a.targets.empty()) a.targets.push_back(a.base.target);
  // With both lists, each q_len pairs with each kv_len.
  std::vector<std::pair<int64_t, int64_t>> lens;
  for (int64_t q : a.q_lens)
    if (a.kv_lens.empty())
      lens.push_back({q, q});
    else
      for (int64_t kv : a.kv_lens) lens.push_back({q, kv});
  for (const auto& len : lens)
    for (int64_t d : a.head_dims)
      for (octattn_algorithm algo : a.algos)
        for (octattn_backend backend : a.backends)
          for (octattn_target target : a.targets)
            for (int32_t threads : a.threads) {
              Case c = a.base;
              c.q_len = len.first;
              c.kv_len = len.second;
              c.kv_heads = c.kv_heads ? c.kv_heads : c.q_heads;
              c.head_dim = d;
              c.algo = algo;
              c.backend = backend;
              c.target = target;
              c.threads = threads;
              if (a.store)
                RunStore(c, a);
              else if (a.seq_kv_lens.empty())
                RunCase(c, a, limits);
              else
                RunSequenceBatch(c, a, limits);
            }
  return 0;
}
