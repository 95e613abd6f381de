// octattn-ring: causal self-attention of one sequence split over the ranks of an MPI job
// (ring attention). The sequence is cut into 2P chunks and rank r holds chunks r and
// 2P-1-r (so every rank has as much causal work as the others); the K/V shards travel
// around the ring with non-blocking sends and receives while the current shard is
// computed, each (query chunk, key chunk) pair is one call with q_start and k_start at
// the chunks' positions, and the partials are merged by LSE (octattn_merge). With
// --check, rank 0 also runs the single-process call and compares.
#include <mpi.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "octattn.h"

namespace {

struct Args {
  int64_t q_len = 1024, head_dim = 64, q_heads = 4, kv_heads = 0, window = 0, stride = 0;
  int32_t threads = 1, check_threads = 0;
  octattn_algorithm algo = OCTATTN_ALGORITHM_FUSED;
  uint64_t seed = 1;
  int repeat = 1;
  bool check = false;
  int fail_rank = -1;
  double timeout = 60;
  std::string dump;  // rank 0 writes the gathered o here (float32 [q_heads, T, dim])
};

const char* kHelp =
    "usage: mpirun -np P octattn-ring [options]\n"
    "  --q-len T --head-dim D --q-heads H --kv-heads H (default: q-heads)\n"
    "  --window W --stride S      the mask options of octattn_attention (causal)\n"
    "  --algo fused|naive         default fused\n"
    "  --threads N                threads per rank (default 1)\n"
    "  --repeat N                 run the ring N times, report the fastest\n"
    "  --check                    rank 0 also runs the single-process call and compares\n"
    "  --check-threads N          threads of that call (default: --threads)\n"
    "  --seed N                   the inputs (a pure function of seed and index)\n"
    "  --timeout S                seconds any rank waits for a message before it aborts the\n"
    "                             job (default 60)\n"
    "  --fail-rank R              rank R passes a bad option (a test of failure handling)\n"
    "  --dump FILE                rank 0 writes the result's bytes there: float32\n"
    "                             [q_heads, T, head_dim] (to compare with other rings)\n"
    "Prints one JSON line (rank 0): seconds, comm_seconds, comm_hidden_fraction and, with\n"
    "--check, single_seconds, max_abs_diff, bytes_equal, first_chunk_bytes_equal, bound,\n"
    "within_bound (exit status 1 if a fused run's first chunk differs or the bound fails).\n";

int rank = 0, ranks = 1;

[[noreturn]] void Die(const std::string& message) {
  std::fprintf(stderr, "octattn-ring: rank %d: %s\n", rank, message.c_str());
  std::fflush(stderr);
  MPI_Abort(MPI_COMM_WORLD, 1);
  std::exit(1);
}

void Check(octattn_status st, octattn_context* ctx, const char* what) {
  if (st != OCTATTN_OK)
    Die(std::string(what) + ": " + octattn_status_string(st) + ": " +
        octattn_context_last_error(ctx));
}

double Now() { return MPI_Wtime(); }

// Input values as a pure function of (seed, tensor, index): any rank makes any row.
float Value(uint64_t seed, uint64_t tensor, uint64_t index) {
  uint64_t z = seed * 0x9E3779B97F4A7C15ull + tensor * 0xBF58476D1CE4E5B9ull + index;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return static_cast<float>(static_cast<double>(z >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

// Rows [begin, end) of a [heads, T, dim] tensor (BHTD, batch 1) into buf as [heads, n, dim].
void MakeRows(const Args& a, uint64_t tensor, int64_t heads, int64_t begin, int64_t end,
              float* buf) {
  const int64_t n = end - begin;
  for (int64_t h = 0; h < heads; ++h)
    for (int64_t t = begin; t < end; ++t)
      for (int64_t d = 0; d < a.head_dim; ++d)
        buf[(h * n + (t - begin)) * a.head_dim + d] =
            Value(a.seed, tensor, static_cast<uint64_t>((h * a.q_len + t) * a.head_dim + d));
}

octattn_tensor View(float* data, int64_t heads, int64_t rows, int64_t dim) {
  octattn_tensor t;
  const int64_t shape[4] = {1, heads, rows, dim};
  octattn_tensor_init(&t, data, shape, OCTATTN_LAYOUT_BHTD);
  return t;
}

struct Chunk {
  int64_t begin, end;
};

// The 2P chunks of the sequence: chunk i covers [i * c, (i + 1) * c) clipped to T.
Chunk ChunkOf(const Args& a, int64_t i) {
  const int64_t c = (a.q_len + 2 * ranks - 1) / (2 * ranks);
  return {std::min(a.q_len, i * c), std::min(a.q_len, (i + 1) * c)};
}
// The two chunks rank r holds.
void ChunksOf(const Args& a, int r, Chunk out[2]) {
  out[0] = ChunkOf(a, r);
  out[1] = ChunkOf(a, 2 * ranks - 1 - r);
}

// Waits for the requests, sleeping between tests (a blocking MPI wait spins a core),
// and aborts the job after `timeout` seconds (0: none) instead of hanging.
double WaitFor(MPI_Request* req, int n, double timeout, const char* what) {
  const double t0 = Now();
  for (;;) {
    int done = 0;
    MPI_Testall(n, req, &done, MPI_STATUSES_IGNORE);
    if (done) return Now() - t0;
    if (timeout > 0 && Now() - t0 > timeout) Die(std::string("timed out waiting for ") + what);
    usleep(50);
  }
}
double Wait(const Args& a, MPI_Request* req, int n) {
  return WaitFor(req, n, a.timeout, "a neighbour's message");
}

// Drives a step's transfers while its shard is computed: Open MPI moves a large message
// only inside MPI calls, so a thread keeps testing the requests (MPI_THREAD_MULTIPLE;
// without it the transfers move only in the final wait).
class Progress {
 public:
  static bool enabled;
  void Start(MPI_Request* req, int n) {
    done_ = false;
    stop_ = false;
    if (!enabled || n == 0) return;
    thread_ = std::thread([this, req, n] {
      while (!stop_.load(std::memory_order_relaxed)) {
        int flag = 0;
        MPI_Testall(n, req, &flag, MPI_STATUSES_IGNORE);
        if (flag) {
          done_ = true;
          return;
        }
        usleep(20);
      }
    });
  }
  // Whether the transfers completed before the compute did.
  bool Finish() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
    return done_;
  }

 private:
  std::thread thread_;
  std::atomic<bool> stop_{false};
  bool done_ = false;
};
bool Progress::enabled = false;

// A K/V shard: the k and v rows of one rank's two chunks, [chunk][kv_heads][rows][dim].
struct Shard {
  std::vector<float> k, v;
};

int64_t ShardFloats(const Args& a) {
  const int64_t c = (a.q_len + 2 * ranks - 1) / (2 * ranks);
  return 2 * a.kv_heads * c * a.head_dim;
}

// Float offset of chunk `which` (0, 1) in a shard of rank r.
int64_t ChunkOffset(const Args& a, int r, int which) {
  Chunk ch[2];
  ChunksOf(a, r, ch);
  return which == 0 ? 0 : a.kv_heads * (ch[0].end - ch[0].begin) * a.head_dim;
}

void FillShard(const Args& a, int r, Shard* s) {
  Chunk ch[2];
  ChunksOf(a, r, ch);
  s->k.assign(static_cast<size_t>(ShardFloats(a)), 0.0f);
  s->v.assign(static_cast<size_t>(ShardFloats(a)), 0.0f);
  for (int w = 0; w < 2; ++w) {
    MakeRows(a, 1, a.kv_heads, ch[w].begin, ch[w].end, s->k.data() + ChunkOffset(a, r, w));
    MakeRows(a, 2, a.kv_heads, ch[w].begin, ch[w].end, s->v.data() + ChunkOffset(a, r, w));
  }
}

struct Result {
  double seconds = 0, comm_exposed = 0;
  int hidden_steps = 0;     // exchanges already complete when the step's compute ended
  std::vector<float> o[2];  // this rank's two chunks, [q_heads][rows][dim]
};

Result RunRing(const Args& a, octattn_context* ctx) {
  Chunk mine[2];
  ChunksOf(a, rank, mine);
  std::vector<float> q[2], lse[2], tmp_o, tmp_lse;
  Result res;
  const int64_t c = (a.q_len + 2 * ranks - 1) / (2 * ranks);
  tmp_o.resize(static_cast<size_t>(a.q_heads * c * a.head_dim));
  tmp_lse.resize(static_cast<size_t>(a.q_heads * c));
  for (int w = 0; w < 2; ++w) {
    const int64_t n = mine[w].end - mine[w].begin;
    q[w].resize(static_cast<size_t>(a.q_heads * n * a.head_dim));
    MakeRows(a, 0, a.q_heads, mine[w].begin, mine[w].end, q[w].data());
    // The running result starts empty: lse -inf contributes nothing to a merge.
    res.o[w].assign(static_cast<size_t>(a.q_heads * n * a.head_dim), 0.0f);
    lse[w].assign(static_cast<size_t>(a.q_heads * n), -INFINITY);
  }
  Shard cur, next;
  FillShard(a, rank, &cur);
  next.k.resize(cur.k.size());
  next.v.resize(cur.v.size());
  octattn_attention_options opt;
  octattn_attention_options_init(&opt);
  opt.algorithm = a.algo;
  opt.window = rank == a.fail_rank ? -1 : a.window;
  opt.stride = a.stride;
  const int right = (rank + 1) % ranks, left = (rank + ranks - 1) % ranks;
  MPI_Barrier(MPI_COMM_WORLD);
  const double t0 = Now();
  for (int step = 0; step < ranks; ++step) {
    const int owner = (rank + ranks - step) % ranks;
    MPI_Request req[4];
    int nreq = 0;
    if (step + 1 < ranks) {  // the next shard travels while this one is computed
      const int count = static_cast<int>(cur.k.size());
      MPI_Irecv(next.k.data(), count, MPI_FLOAT, left, 2 * step, MPI_COMM_WORLD, &req[nreq++]);
      MPI_Irecv(next.v.data(), count, MPI_FLOAT, left, 2 * step + 1, MPI_COMM_WORLD, &req[nreq++]);
      MPI_Isend(cur.k.data(), count, MPI_FLOAT, right, 2 * step, MPI_COMM_WORLD, &req[nreq++]);
      MPI_Isend(cur.v.data(), count, MPI_FLOAT, right, 2 * step + 1, MPI_COMM_WORLD, &req[nreq++]);
    }
    Progress progress;
    progress.Start(req, nreq);
    Chunk theirs[2];
    ChunksOf(a, owner, theirs);
    for (int qw = 0; qw < 2; ++qw)
      for (int kw = 0; kw < 2; ++kw) {
        const Chunk& qc = mine[qw];
        const Chunk& kc = theirs[kw];
        const int64_t nq = qc.end - qc.begin, nk = kc.end - kc.begin;
        if (nq == 0 || nk == 0 || kc.begin >= qc.end) continue;  // causal: all in the future
        if (a.stride == 0 && a.window > 0 && kc.end <= qc.begin - a.window + 1) continue;
        octattn_tensor tq = View(q[qw].data(), a.q_heads, nq, a.head_dim);
        octattn_tensor tk =
            View(cur.k.data() + ChunkOffset(a, owner, kw), a.kv_heads, nk, a.head_dim);
        octattn_tensor tv =
            View(cur.v.data() + ChunkOffset(a, owner, kw), a.kv_heads, nk, a.head_dim);
        octattn_tensor to = View(tmp_o.data(), a.q_heads, nq, a.head_dim);
        octattn_tensor tl = View(tmp_lse.data(), a.q_heads, nq, 1);
        opt.q_start = qc.begin;
        opt.k_start = kc.begin;
        Check(octattn_attention(ctx, &opt, &tq, &tk, &tv, &to, &tl, nullptr, nullptr, 0), ctx,
              "attention");
        octattn_tensor run[2] = {View(res.o[qw].data(), a.q_heads, nq, a.head_dim), to};
        octattn_tensor run_lse[2] = {View(lse[qw].data(), a.q_heads, nq, 1), tl};
        Check(octattn_merge(ctx, 2, run, run_lse, &run[0], &run_lse[0]), ctx, "merge");
      }
    const bool hidden = progress.Finish();
    if (nreq) {
      res.hidden_steps += hidden;
      res.comm_exposed += hidden ? 0.0 : Wait(a, req, nreq);
      std::swap(cur, next);
    }
  }
  res.seconds = Now() - t0;
  return res;
}

// The time one shard exchange takes with nothing to overlap it.
double ExchangeAlone(const Args& a) {
  if (ranks == 1) return 0;
  Shard s, r;
  FillShard(a, rank, &s);
  r.k.resize(s.k.size());
  r.v.resize(s.v.size());
  const int right = (rank + 1) % ranks, left = (rank + ranks - 1) % ranks;
  const int count = static_cast<int>(s.k.size());
  MPI_Barrier(MPI_COMM_WORLD);
  const double t0 = Now();
  MPI_Request req[4];
  MPI_Irecv(r.k.data(), count, MPI_FLOAT, left, 9000, MPI_COMM_WORLD, &req[0]);
  MPI_Irecv(r.v.data(), count, MPI_FLOAT, left, 9001, MPI_COMM_WORLD, &req[1]);
  MPI_Isend(s.k.data(), count, MPI_FLOAT, right, 9000, MPI_COMM_WORLD, &req[2]);
  MPI_Isend(s.v.data(), count, MPI_FLOAT, right, 9001, MPI_COMM_WORLD, &req[3]);
  Wait(a, req, 4);
  return Now() - t0;
}

// The accuracy bound of the header for the whole problem (two results, each within it
// of the reference): 2 * max|v| * (5e-7 * max(1, S) + 1e-8 * C).
double Bound(const Args& a, const std::vector<float>& q, const std::vector<float>& k,
             const std::vector<float>& v) {
  const int64_t group = a.q_heads / a.kv_heads;
  const double scale = 1.0 / std::sqrt(static_cast<double>(a.head_dim));
  double s_max = 0, c_max = 0, v_max = 0;
  for (float x : v) v_max = std::max(v_max, std::fabs(static_cast<double>(x)));
  for (int64_t h = 0; h < a.q_heads; ++h)
    for (int64_t i = 0; i < a.q_len; ++i)
      for (int64_t j = 0; j <= i; ++j) {
        double s = 0, c = 0;
        const float* qi = &q[static_cast<size_t>((h * a.q_len + i) * a.head_dim)];
        const float* kj = &k[static_cast<size_t>(((h / group) * a.q_len + j) * a.head_dim)];
        for (int64_t d = 0; d < a.head_dim; ++d) {
          const double x = static_cast<double>(qi[d]) * kj[d];
          s += x;
          c += std::fabs(x);
        }
        s_max = std::max(s_max, std::fabs(s) * scale);
        c_max = std::max(c_max, c * scale);
      }
  return 2 * v_max * (5e-7 * std::max(1.0, s_max) + 1e-8 * c_max);
}

bool Parse(int argc, char** argv, Args* a) {
  for (int i = 1; i < argc; ++i) {
    const std::string f = argv[i];
    auto next = [&]() -> const char* {
      if (i + 1 >= argc) {
        if (rank == 0) std::fprintf(stderr, "octattn-ring: %s needs a value\n", f.c_str());
        return nullptr;
      }
      return argv[++i];
    };
    const char* v = nullptr;
    if (f == "--check") {
      a->check = true;
      continue;
    }
    if (f == "--help" || f == "-h") {
      if (rank == 0) std::fputs(kHelp, stdout);
      return false;
    }
    if (!(v = next())) return false;
    if (f == "--q-len")
      a->q_len = std::atoll(v);
    else if (f == "--head-dim")
      a->head_dim = std::atoll(v);
    else if (f == "--q-heads")
      a->q_heads = std::atoll(v);
    else if (f == "--kv-heads")
      a->kv_heads = std::atoll(v);
    else if (f == "--window")
      a->window = std::atoll(v);
    else if (f == "--stride")
      a->stride = std::atoll(v);
    else if (f == "--threads")
      a->threads = std::atoi(v);
    else if (f == "--check-threads")
      a->check_threads = std::atoi(v);
    else if (f == "--repeat")
      a->repeat = std::max(1, std::atoi(v));
    else if (f == "--seed")
      a->seed = std::strtoull(v, nullptr, 10);
    else if (f == "--timeout")
      a->timeout = std::atof(v);
    else if (f == "--fail-rank")
      a->fail_rank = std::atoi(v);
    else if (f == "--dump")
      a->dump = v;
    else if (f == "--algo")
      a->algo = std::strcmp(v, "naive") == 0 ? OCTATTN_ALGORITHM_NAIVE : OCTATTN_ALGORITHM_FUSED;
    else {
      if (rank == 0) std::fprintf(stderr, "octattn-ring: unknown option %s\n%s", f.c_str(), kHelp);
      return false;
    }
  }
  if (a->kv_heads == 0) a->kv_heads = a->q_heads;
  if (a->check_threads == 0) a->check_threads = a->threads;
  if (a->q_len < 1 || a->head_dim < 1 || a->q_heads < 1 || a->kv_heads < 1 ||
      a->q_heads % a->kv_heads != 0) {
    if (rank == 0) std::fprintf(stderr, "octattn-ring: bad sizes\n");
    return false;
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  Progress::enabled = provided == MPI_THREAD_MULTIPLE;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &ranks);
  Args a;
  if (!Parse(argc, argv, &a)) {
    MPI_Finalize();
    return 2;
  }
  octattn_context* ctx = nullptr;
  if (octattn_context_create(&ctx) != OCTATTN_OK) Die("cannot create a context");
  Check(octattn_context_set_threads(ctx, a.threads), ctx, "threads");

  Result best;
  for (int r = 0; r < a.repeat; ++r) {
    Result res = RunRing(a, ctx);
    if (r == 0 || res.seconds < best.seconds) best = std::move(res);
  }
  const double alone = ExchangeAlone(a);
  double seconds = 0, exposed = 0, comm = 0;
  int hidden_steps = 0;
  MPI_Reduce(&best.hidden_steps, &hidden_steps, 1, MPI_INT, MPI_MIN, 0, MPI_COMM_WORLD);
  MPI_Reduce(&best.seconds, &seconds, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
  MPI_Reduce(&best.comm_exposed, &exposed, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
  MPI_Reduce(&alone, &comm, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
  comm *= ranks - 1;  // the ring's P - 1 exchanges, as long as one alone

  // Rank 0 gathers every rank's two chunks into [q_heads, T, dim].
  std::vector<float> o;
  if (rank == 0) o.assign(static_cast<size_t>(a.q_heads * a.q_len * a.head_dim), 0.0f);
  for (int r = 0; r < ranks; ++r) {
    Chunk ch[2];
    ChunksOf(a, r, ch);
    for (int w = 0; w < 2; ++w) {
      const int64_t n = ch[w].end - ch[w].begin;
      std::vector<float> part(static_cast<size_t>(a.q_heads * n * a.head_dim));
      if (r == rank && r == 0) part = best.o[w];
      if (r != 0 && rank == r)
        MPI_Send(best.o[w].data(), static_cast<int>(part.size()), MPI_FLOAT, 0, 100 + w,
                 MPI_COMM_WORLD);
      if (r != 0 && rank == 0) {
        MPI_Request req;
        MPI_Irecv(part.data(), static_cast<int>(part.size()), MPI_FLOAT, r, 100 + w, MPI_COMM_WORLD,
                  &req);
        Wait(a, &req, 1);
      }
      if (rank == 0)
        for (int64_t h = 0; h < a.q_heads; ++h)
          std::memcpy(&o[static_cast<size_t>((h * a.q_len + ch[w].begin) * a.head_dim)],
                      &part[static_cast<size_t>(h * n * a.head_dim)],
                      static_cast<size_t>(n * a.head_dim) * sizeof(float));
    }
  }

  int status = 0;
  if (rank == 0 && !a.dump.empty()) {
    FILE* f = std::fopen(a.dump.c_str(), "wb");
    if (!f || std::fwrite(o.data(), sizeof(float), o.size(), f) != o.size() || std::fclose(f))
      Die("cannot write " + a.dump);
  }
  if (rank == 0) {
    std::string extra;
    if (a.check) {
      std::vector<float> q(static_cast<size_t>(a.q_heads * a.q_len * a.head_dim)),
          k(static_cast<size_t>(a.kv_heads * a.q_len * a.head_dim)), v(k.size()), want(q.size());
      MakeRows(a, 0, a.q_heads, 0, a.q_len, q.data());
      MakeRows(a, 1, a.kv_heads, 0, a.q_len, k.data());
      MakeRows(a, 2, a.kv_heads, 0, a.q_len, v.data());
      octattn_tensor tq = View(q.data(), a.q_heads, a.q_len, a.head_dim);
      octattn_tensor tk = View(k.data(), a.kv_heads, a.q_len, a.head_dim);
      octattn_tensor tv = View(v.data(), a.kv_heads, a.q_len, a.head_dim);
      octattn_tensor tw = View(want.data(), a.q_heads, a.q_len, a.head_dim);
      octattn_attention_options opt;
      octattn_attention_options_init(&opt);
      opt.algorithm = a.algo;
      opt.window = a.window;
      opt.stride = a.stride;
      Check(octattn_context_set_threads(ctx, a.check_threads), ctx, "threads");
      double single = 0;
      for (int r = 0; r < a.repeat; ++r) {
        const double t0 = Now();
        Check(octattn_attention(ctx, &opt, &tq, &tk, &tv, &tw, nullptr, nullptr, nullptr, 0), ctx,
              "single-process attention");
        const double dt = Now() - t0;
        if (r == 0 || dt < single) single = dt;
      }
      double diff = 0;
      for (size_t i = 0; i < o.size(); ++i)
        diff = std::max(diff, std::fabs(static_cast<double>(o[i]) - want[i]));
      const bool equal = std::memcmp(o.data(), want.data(), o.size() * sizeof(float)) == 0;
      // The first chunk's rows read only their own keys: one partial, merged into an empty
      // result, which the header promises is that partial's bytes; and the partial is a
      // prefix of the single call (fused: prefix invariance), so those rows are equal.
      const Chunk first = ChunkOf(a, 0);
      bool first_equal = true;
      for (int64_t h = 0; h < a.q_heads; ++h) {
        const size_t at = static_cast<size_t>(h * a.q_len * a.head_dim);
        first_equal &=
            std::memcmp(&o[at], &want[at],
                        static_cast<size_t>(first.end * a.head_dim) * sizeof(float)) == 0;
      }
      if (a.algo == OCTATTN_ALGORITHM_FUSED && !first_equal) status = 1;
      // The bound needs every pair's dot product: computed for small problems only.
      const bool small = static_cast<double>(a.q_len) * a.q_len * a.head_dim * a.q_heads < 2e9;
      const double bound = small ? Bound(a, q, k, v) : 0;
      char buf[320], bound_text[32];
      std::snprintf(bound_text, sizeof(bound_text), "%.3g", bound);
      const bool within = !small || diff <= bound;
      if (!within || !std::isfinite(diff)) status = 1;
      std::snprintf(buf, sizeof(buf),
                    ",\"single_seconds\":%.6g,\"single_threads\":%d,\"max_abs_diff\":%.3g,"
                    "\"bytes_equal\":%s,\"first_chunk_bytes_equal\":%s,\"bound\":%s,"
                    "\"within_bound\":%s",
                    single, a.check_threads, diff, equal ? "true" : "false",
                    first_equal ? "true" : "false", small ? bound_text : "null",
                    small ? (within ? "true" : "false") : "null");
      extra = buf;
    }
    // The share of the ring's exchanges that had completed when their step's compute
    // ended, on the rank where the fewest had: those cost no wait at all.
    const double hidden = ranks > 1 ? static_cast<double>(hidden_steps) / (ranks - 1) : 1.0;
    std::printf(
        "{\"ranks\":%d,\"threads\":%d,\"q_len\":%lld,\"head_dim\":%lld,\"q_heads\":%lld,"
        "\"kv_heads\":%lld,\"window\":%lld,\"stride\":%lld,\"algo\":\"%s\",\"seconds\":%.6g,"
        "\"comm_seconds\":%.6g,\"wait_seconds\":%.6g,\"comm_hidden_fraction\":%.3f%s}\n",
        ranks, a.threads, static_cast<long long>(a.q_len), static_cast<long long>(a.head_dim),
        static_cast<long long>(a.q_heads), static_cast<long long>(a.kv_heads),
        static_cast<long long>(a.window), static_cast<long long>(a.stride),
        octattn_algorithm_name(a.algo), seconds, comm, exposed, hidden, extra.c_str());
    std::fflush(stdout);
  }
  octattn_context_destroy(ctx);
  // The other ranks wait for rank 0's check without spinning a core it may use.
  MPI_Request done;
  MPI_Ibcast(&status, 1, MPI_INT, 0, MPI_COMM_WORLD, &done);
  WaitFor(&done, 1, 0, "rank 0");
  MPI_Finalize();
  return status;
}
