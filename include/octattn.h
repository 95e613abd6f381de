/* octattn: SIMD CPU attention kernels behind a plain C ABI.
 *
 * This header is the whole public contract. It is C99 and uses only <stddef.h> and
 * <stdint.h>; it compiles as C++ (also with -fno-exceptions).
 *
 * ------------------------------------------------------------------------------------
 * SEMANTICS
 *
 * Tensors. Every tensor is an octattn_tensor: a data pointer, a dtype, four sizes and
 * four strides counted in elements (not bytes). Logical shapes:
 *     q [batch, q_heads,  q_len,  head_dim]      k [batch, kv_heads, kv_len, head_dim]
 *     v [batch, kv_heads, kv_len, value_dim]     o [batch, q_heads,  q_len,  value_dim]
 *     lse [batch, q_heads, q_len, 1]             weights [batch, q_heads, q_len, kv_len]
 * so [B,T,H,D], [B,H,T,D] and the slices of a packed QKV projection are all views of
 * the caller's memory, with no copies. Strides must be >= 0. An output's elements must
 * not share an address with each other, and its extent (the bytes from its first to
 * one past its last element) must not overlap the extent of any input or other output:
 * two outputs interleaved in one buffer are refused even when no element is shared.
 * Data must be aligned to the element size. value_dim may differ from head_dim, and
 * inputs may share memory: v may be a view of k (its first value_dim columns: MLA's
 * latent rows, layers whose keys are their values), whose value rows a key tile then
 * finds in the caches, just read as its keys.
 *
 * Element types (since 0.7). octattn_attention takes q, k and v each in f32, bf16 or f16
 * (any combination: a bf16 model, or f32 queries over an f16 or bf16 KV cache), o in
 * f32 or q's dtype; lse, weights, bias and the sinks and slopes are f32. Widening bf16
 * and f16 to f32 is exact, and every algorithm computes in f32 on the widened values: a
 * call's bytes are those of the f32 call on the widened tensors (a 16-bit o holds that
 * call's o rounded to nearest even), so every rule below, the accuracy bound included,
 * holds as stated for 16-bit inputs; one exception: bf16 q and k on the avx512_bf16
 * target's fused path (vdpbf16ps; see the targets below). The fused algorithm widens keys and
 * values as a tile reads them (scratch bounded by the tiles, as for f32); naive widens a head's
 * operands into its scratch. The backward pass (since 0.11) reads q, k, v, o and dout
 * the same way, in any of the three (any combination), and writes f32 gradients: its
 * bytes are the f32 backward's on the widened tensors (but on avx512_bf16, below). Merge
 * takes f32 only
 * (UNSUPPORTED); of the stages (since 0.8), octattn_scores takes 16-bit q and k and
 * octattn_weighted_sum a 16-bit v, each with the bytes of the f32 stage on the widened
 * values (scores, weights and o f32), and the head layout calls copy f32, bf16 or f16
 * elements (dst of src's dtype); the other stages work on f32 scores.
 *
 * Option structs. Each begins with struct_size, set by its *_init() function. Fields are
 * only ever appended: a caller built against an older header passes its smaller
 * struct_size (never below the struct's size in version 0.1), the library reads only
 * the fields that struct_size covers whole and gives the others their defaults; a caller
 * built against a newer header may pass a larger struct_size if every byte past the
 * fields this library knows is zero.
 *
 * Grouped queries. q_heads % kv_heads == 0; query head h reads kv head
 * h / (q_heads / kv_heads) (repeat-interleave order), without copying k or v.
 *
 * Positions. Key row j sits at k_pos(j) = k_start + j (k_start defaults to 0; a call
 * over a shard of the keys gives the shard's first position). Query row i sits at
 * q_pos(i) = q_start + i. By default q_start = k_start + kv_len - q_len: the queries are
 * the newest tokens (bottom-right alignment, what a KV cache needs). With q_len ==
 * kv_len and k_start 0 it is the square case.
 *
 * Mask. With d = q_pos(i) - k_pos(j), causal attention allows (i, j) iff d >= 0 and,
 * when window > 0, also d < window || (stride > 0 && k_pos(j) % stride == 0). window
 * == 0 is plain causal; stride only matters with a window. Chunked attention (chunk >
 * 0, causal or full) also requires floor(q_pos(i) / chunk) == floor(k_pos(j) / chunk):
 * a row reads only keys of its own chunk, strided columns included. The mask depends on
 * positions only, so a call over a shard of the keys (k_start) masks exactly as one call
 * over all of them. Full (non-causal) attention allows every pair (of its chunk) and
 * requires window == stride == 0. A pair is also masked where the optional mask tensor
 * holds 0 or the optional bias tensor holds -inf.
 *
 * Scores. For an allowed pair (i, j) of query head h:
 *     s = scale * q_i . k_j                          (scale == 0: 1/sqrt(head_dim))
 *     s = softcap * tanh(s / softcap)                (softcap > 0)
 *     s += alibi_slopes[h] * (k_pos(j) - q_pos(i))   (alibi_slopes given; full attention
 *                                                     uses the same positions)
 *     s += bias[b, h, i, j]                          (bias given)
 * and o = softmax(s) v over the allowed pairs, computed stably (the row maximum is
 * subtracted first). With sinks, row i of head h has one more logit, sinks[h], in the
 * softmax's denominator only (no value row): weights sum to less than 1 and
 * lse = log(exp(sinks[h]) + sum_j exp(s_j)). lse (optional) receives the natural-log
 * log-sum-exp of each row; weights (optional) the softmax itself (0 where masked).
 *
 * Sequences (since 0.6). By default each batch entry is one sequence holding every query
 * and key row of its entry. Options describe batches of sequences of different lengths:
 *   padded   kv_starts[s] and kv_lens[s] restrict sequence s to its key rows kv_starts[s]
 *            .. kv_starts[s] + kv_lens[s] - 1 (left padding before them; right padding
 *            or the unused capacity of a static cache after them);
 *   ragged   sequences = n > 0 packs n sequences along the rows of batch entry 0 (the
 *            FlashAttention "varlen" layout: q, k and v [1, heads, total_tokens, dim],
 *            which is [total_tokens, heads, dim] in memory with the BTHD layout):
 *            sequence s has query rows cu_seqlens_q[s] .. cu_seqlens_q[s + 1] - 1 and key
 *            rows cu_seqlens_k[s] .. cu_seqlens_k[s + 1] - 1 (n + 1 offsets each,
 *            non-decreasing, from 0 to q_len and to kv_len); kv_starts and kv_lens, when
 *            given, then count within the sequence's key rows;
 *   q_starts[s] is the position of sequence s's first query row (instead of q_start;
 *            an entry OCTATTN_Q_START_DEFAULT: that sequence's default, below).
 * The arrays hold one int64 per sequence (batch entries, or n when ragged). Sequence s is
 * computed exactly as a call of its own on the views of its rows: its valid key rows
 * (kv_len_s of them) sit at positions k_start, k_start + 1, ..., its query rows (q_len_s)
 * at q_starts[s] + i (without q_starts: q_start + i), where the default is k_start +
 * kv_len_s - q_len_s (bottom-right alignment per sequence), and every mask option,
 * modifier and per-head array applies to it. The bias and mask tensors and weights keep the call's
 * row and column indices (a sequence's pair reads and writes them at its own rows' indices, so a
 * [batch, 1, q_len, kv_len] padding mask lines up). A sequence never reads the rows of another or
 * key rows outside its valid range, whatever their bits; weights outside a sequence's block are 0.
 * A sequence with no valid key (kv_lens[s] == 0) has only empty rows. Its output bytes are those of
 * the call of its own (batch composition changes no byte); the backward's gradients too (dsinks
 * sums the sequences' terms), with 0 for the key rows of no sequence and for dbias outside every
 * sequence's block. The stages take no sequences.
 *
 * Paged (since 0.6). With options.block_table, k and v are pools of fixed-size blocks
 * (vLLM's PagedAttention layout): k [num_blocks, kv_heads, block_size, head_dim] and v
 * [num_blocks, kv_heads, block_size, value_dim], any strides ([num_blocks, block_size,
 * kv_heads, dim] in memory is the BTHD layout), any block_size >= 1. Sequence s (a batch
 * entry of q, or a ragged sequence by cu_seqlens_q; cu_seqlens_k must be NULL) has
 * logical key rows 0 .. block_table_cols * block_size - 1: row r is row r % block_size of
 * block block_table[s * block_table_cols + r / block_size]; kv_starts and kv_lens (its
 * context length) select its valid rows among them as above, and only the blocks that
 * hold valid rows are read (each id must be in [0, num_blocks)). The bias and mask
 * tensors and weights have block_table_cols * block_size columns, the logical rows.
 * Blocks are read in place and never written: sequences may share blocks (a common
 * prefix). A paged call's bytes equal those of the same sequences with contiguous keys.
 * The naive algorithm, the backward and the stages do not take a paged cache
 * (UNSUPPORTED): it runs fused (AUTO) or reference.
 *
 * Shared prefixes (cascade decode, since 0.11). The fused path reads a sequence's keys in
 * spans of 1024 (key rows 1024 c .. 1024 c + 1023 from its first valid row). Where two or
 * more decode-shaped sequences of one call (query heads per kv head times q_len at most
 * 16) have the same q_len and their leading spans are the same key and value rows (the
 * same blocks of a paged cache; in a padded or dense batch, k and v, and their scales,
 * with batch stride 0), the call reads each such span once for up to 16 of them, their rows stacked
 * as one task's, instead of once per sequence. Nothing marks them: the call compares the
 * block ids (or row offsets). A sequence shares the spans it has in common with the first
 * sequence of its group (the first with its key row 0 and q_len; at most 64 groups per
 * call) that every one of its rows reads whole; softcap and sinks may be present, ALiBi,
 * bias, a mask tensor, a tree and strided columns turn sharing off. The bytes are those
 * of the same call over copies of the rows (no byte depends on what is shared);
 * octattn_run_info.shared_kv_rows counts the rows read once for several sequences.
 *
 * Quantized caches (since 0.11). k and v (each on its own; never q or o) may hold a
 * quantized cache. Each element's value, on which every algorithm computes exactly as on
 * an f32 cache holding these values (a call's bytes are those of the f32 call on the
 * dequantized k and v, with the same algorithm and target):
 *   INT8      x = s * i (i the int8 value): s an element of the scale tensor (below),
 *             the product rounded once to f32 (|x - true value| <= s / 2 for a cache
 *             stored with its absmax scale s = max|x| / 127);
 *   FP8_E4M3, FP8_E5M2
 *             x = s * f, f the fp8 value (exact in f32; e4m3fn: no infinities, S.1111.111
 *             is NaN, largest 448; e5m2: IEEE-like, largest 57344); without a scale
 *             tensor x = f. Relative error of a stored value: 2^-4 (e4m3), 2^-3 (e5m2);
 *   Q8_0      ggml's block_q8_0: per 32 values of a row an f16 d and 32 int8 q:
 *             x = d * q (d widened, the product rounded once);
 *   Q4_0      ggml's block_q4_0: an f16 d and 16 bytes; value i < 16 is the low nibble
 *             of byte i, value 16 + i its high nibble: x = d * (nibble - 8).
 *   FP8_DS_MLA
 *             DeepSeek V3.2's latent cache row (FlashMLA's and vLLM's fp8_ds_mla), 656
 *             bytes for 576 values: bytes 0..511 e4m3fn codes, then four f32 scales s_g
 *             (bytes 512 + 4 g), then bytes 528..655 the bf16 values 512..575. Value
 *             d < 512: x = s_(d / 128) * f (f the e4m3 value; the product rounded once);
 *             value d >= 512: the bf16 value, widened. Its keys are the 576-dimension
 *             latent rows (512 compressed + 64 rope dimensions) and v its first 512 values
 *             (v the same tensor, or a view of it, with shape[3] 512: read once).
 * A Q8_0 or Q4_0 tensor counts its strides in blocks (34 and 18 bytes), its shape in
 * values: head_dim (value_dim) must be a multiple of 32 and stride[3] must be 1 (a row's
 * blocks are consecutive), so a ggml cache is read in place (its byte strides over the
 * block size). An FP8_DS_MLA tensor counts its strides in rows (656 bytes), its shape in
 * values: shape[3] at most 576 (a tensor reads the first shape[3] values of each row)
 * and stride[3] 1. Data must be aligned to 2 bytes (1 for INT8 and FP8).
 * Scale tensors (options.k_scale, v_scale: f32, bf16 or f16, any strides) give s for k and
 * v: logical shape [batch, kv_heads, R, head_dim / G] (v: value_dim / G), where a size of 1
 * broadcasts (one scale per tensor is [1, 1, 1, 1], vLLM's per-head scales [1, kv_heads, 1,
 * 1]). G, the channels per scale, is head_dim / shape[3] and must divide head_dim. Key row
 * j reads scale row j / k_scale_rows: with k_scale_rows 1 (the default) R is kv_len (a
 * scale per token and group, R the tensor's rows); KIVI's keys scaled by channel within
 * blocks of n tokens are G = 1 and k_scale_rows n, R = ceil(kv_len / n). Paged: the scale
 * tensor is a pool like k, [num_blocks, kv_heads, block_size / rows, head_dim / G], the
 * row within a block reading row (row % block_size) / rows of its block (block_size a
 * multiple of rows). An INT8 cache needs its scale tensor; Q8_0 and Q4_0 take none; a
 * scale is read only with a key row that a query may read (a scale that covers several
 * rows is an input of each of them). Every algorithm of octattn_attention reads
 * quantized caches; the backward and the stages do not (UNSUPPORTED). octattn_kv_store
 * writes them.
 q . k in int8 (options.qk_precision OCTATTN_QK_INT8, as llama.cpp computes over its
 * quantized caches; INT8, Q8_0 and Q4_0 keys; the fused and reference algorithms, naive
 * is UNSUPPORTED). Each row of q is first rounded to int8 in blocks of B dimensions (Q8_0
 * and Q4_0: B = 32; INT8: B = the largest divisor of 32 that divides the keys' channels
 * per scale G): a block x gets the scale u = max|x| / 127 (in f32) and the integers
 * n_d = round-half-even(x_d * 127 / max|x|) (in double) in [-127, 127] (a block of zeros:
 * u = 0; a block holding a NaN or an infinity: u = NaN, so that its row's scores are
 * NaN). A key's score is then scale * sum over the blocks, in order, of (u * t) * dot,
 * dot the block's integer dot product of n and the key's integers (int8 i, Q8_0's q,
 * Q4_0's nibble - 8, exact) and t the key's scale for the block (INT8's s, the block's
 * d), each block's term added by one FMA. Decode and prefill of one target give the same
 * bytes, and the accuracy bound above holds against the reference computed on the rounded
 * q (u * n_d). The rounding moves each q_d by at most u / 2 = max|x| / 254 of its block,
 * a score by at most scale * sum_d |k_d| * u / 2. Where int8 dot products are an
 * instruction (AVX512-VNNI), decode over an 8-bit cache then does a fraction of the exact
 * path's work for q . k. The values and the rest of the call are as with
 * OCTATTN_QK_EXACT. (For a BF16 cache, q given as bf16 takes vdpbf16ps where the target
 * has it: the same choice, made by the caller's dtype.)
 *
 * Trees (since 0.11). Speculative decoding verifies a tree of n draft tokens in one call:
 * a sequence's q_len_s = n query rows are the draft tokens and its last n valid key rows
 * their keys. With options.tree, the pair (row i, key row j) of sequence s is masked when
 * j >= kv_len_s - n (tree column c = j - (kv_len_s - n)) and bit c of row i's bits is 0;
 * keys before the tree (the cached prefix) are left to the other mask options. Row i's
 * bits are the bytes at options.tree + e * tree_stride + r * tree_row_bytes (e the
 * sequence's batch entry, r its row index in q as for the mask tensor: ragged sequences'
 * rows are entry 0's rows cu_seqlens_q[s] + i), bit c the bit c % 8 (least significant
 * first: numpy.packbits' bitorder "little", FlashInfer's packed masks) of byte c / 8;
 * columns before a sequence's first key are not read. A tree row's bits are usually the
 * node and its ancestors (a causal call then also drops the later columns); the bits
 * combine with every other mask option and modifier as the mask tensor does, and a
 * call's bytes are those of the call with the mask tensor that holds the same pairs
 * (every algorithm, the backward and octattn_mask). tree_row_bytes * 8 must be at least
 * every sequence's q_len_s (INVALID_OPTION). A call takes a tree or a mask tensor, not
 * both.
 *
 * Block masks (since 0.11). PyTorch flex_attention's BlockMask: per (batch entry, query
 * head, query block) the key blocks a block of rows reads, some of them full. Query row i
 * of a sequence is in query block i / block_q, its key row j in key block j / block_kv
 * (row and key indices count from the sequence's first query row and first valid key,
 * as flex's q_idx and kv_idx; a ragged or paged call's entries are its sequences). The
 * lists of entry e, head h, query block b are the first c = block_counts[e, h, b, 0]
 * values of block_indices[e, h, b, :] (partial blocks) and, with full_block_counts, the
 * first of full_block_indices (full blocks): each list strictly ascending, within
 * [0, ceil(kv_len / block_kv)) (kv_len the call's key rows), no block on both lists, and
 * q_blocks at least ceil(q_len_s / block_q) for every sequence (all checked before
 * anything is read: INVALID_OPTION, INVALID_SHAPE). The pair (i, j) is masked when j's
 * block is on neither list of i's block; in a full block it is left to the analytic
 * mask, the modifiers and -inf biases alone (the mask tensor and the tree are not read
 * there); in a partial block the mask tensor or tree decides as well (neither: the pair
 * is allowed). The key rows of blocks a query block does not list are never read, and
 * the fused algorithm and the backward skip them, so a call's cost follows the listed
 * blocks. Every algorithm, the backward and octattn_mask take block masks; a call's
 * bytes do not depend on how the pairs it reads are split between full and partial
 * blocks.
 *
 * Key lists (token-sparse attention, since 0.11). With options.key_indices, query row i
 * of kv head g's query heads reads only the key rows its lists name: the first c entries
 * of key_indices[e, g, r, :] (c = key_counts[e, g, r, 0]; without key_counts all n of
 * them), joined with those of key_indices2 (key_counts2) where given (a second list, such
 * as a local window: its own n). e and r are the row's batch entry and row in q, as for
 * the mask tensor (ragged sequences' rows are entry 0's rows cu_seqlens_q[s] + i); a
 * size of 1 in the batch or head dimension is every entry's or every kv head's list
 * (DeepSeek's indexer: one list per token for all heads). An entry is a key row counted
 * from the sequence's first valid key, 0 .. kv_len_s - 1 (paged: its logical rows from
 * kv_starts), or -1 for none (padding). The pair (i, j) is masked unless j is an entry
 * of one of row i's lists: the lists are sets, in any order, and an entry named twice
 * (or on both lists) is read once. The analytic mask applies on top (an entry past a
 * row's causal bound is masked, whatever the indexer wrote), as do the mask tensor or
 * tree, the bias, ALiBi, softcap and sinks. Every entry a call's rows hold is checked
 * before anything is read: a count outside [0, n], an entry below -1 or at or past its
 * sequence's kv_len_s is INVALID_OPTION. The fused algorithm reads only the listed key
 * rows (its cost follows the lists, not kv_len): a row's keys, in ascending order, are
 * gathered into tiles of their own, so a row's bytes depend on the set of keys its lists
 * name, not on their order, duplicates or lengths, and a decode step equals its prefill
 * row as above; they are not those of the call with a mask tensor of the same pairs (its
 * tiles group other keys), which they agree with to the accuracy below. The naive and
 * reference algorithms give the bytes of the mask tensor of the same pairs (their
 * weights, 0 off the lists, and key scores included). The backward takes the forward
 * call's lists, and octattn_mask masks every pair off them. key_scores over lists run
 * naive or reference (AUTO picks naive; FUSED: UNSUPPORTED); a block mask with lists is
 * INVALID_OPTION.
 *
 * Key scores (since 0.11). With options.key_scores, octattn_attention also writes, for
 * every key row j of every kv head g, the sum of the weights it received: over the query
 * heads of g's group and the query rows of its sequence that read j, softmax(s)[i, j] =
 * exp(s_ij - lse_i) (sinks in lse as above), the weights output's values. Element
 * [e, g, j, 0] is key row j of batch entry e (ragged: of entry 0, the call's key rows;
 * paged: logical row j of sequence e, so a ragged paged call's key_scores has one entry
 * per sequence); every element is written, and a key that no row reads gets 0 (whatever
 * its bits). Every algorithm computes them (over key lists: naive and reference, see
 * Key lists), the fused one without materializing the weights: each task keeps its
 * rows' weights of the tiles it reads until their lse is
 * known (prefill: in its thread's scratch, 4 bytes per (row, key) of a task of about 256
 * rows, fewer where that would take more than 16 MiB; decode: 4 bytes per (query head,
 * row, key) of the call), then adds them up. Each task's sum of a key (rows in order, in
 * f32) is added as a fixed-point number (a unit 2^-32), so that the bytes do not depend on
 * the thread count, layout or batch composition; they agree with the reference's sums of
 * its weights within (1e-5 + 4e-6 S + 4e-8 C) of the sum plus q_len * 2^-31 (S and C as
 * in Accuracy below; each task's sum is rounded once). A weight that is NaN (a row that
 * reads a NaN or an infinite score) makes its key's score NaN; pairs a row does not read
 * add nothing. q_len times the group size must be below 2^30 (INVALID_SHAPE).
 *
 * Empty rows. A row with no allowed key (q_pos(i) < 0, e.g. q_len > kv_len by default),
 * or whose every allowed score is -inf, outputs zeros, weights 0 and lse = -inf, or
 * lse = sinks[h] with sinks.
 *
 * Non-finite input. NaN or Inf at an allowed position propagates as IEEE arithmetic
 * says. A masked position cannot reach any output, whatever its bits: the key and value
 * rows that no query of a call may read are never loaded, masked lanes inside a tile are
 * replaced by -inf before the softmax and skipped in the weighted sum (also where the
 * mask tensor or a -inf bias masks them), and the bias of a pair the analytic mask or
 * the mask tensor excludes cannot reach the output.
 *
 * Determinism. For a given algorithm, backend and target, an output row's bytes depend
 * only on the inputs that row may read: they are the same for any thread count, any
 * layout (strides) of the same numbers, any batch or head subset, and do not change
 * when a position the row may not read changes (causality). On the fused algorithm
 * they also do not depend on q_len or kv_len beyond the keys the row reads: the first
 * n rows of a length-N prefill equal a length-n prefill, and a decode step (one query
 * at position i, keys 0..i) or a chunked prefill ending at i equals prefill row i,
 * with every mask option; a split of the keys over threads (decode, and calls of many
 * query rows over few sequences and kv heads, such as MLA's absorbed decode) changes
 * no byte.
 * These hold for calls whose key rows start at the same k_start: the fused path groups
 * keys at fixed offsets from key row 0, so a call over a shard of the keys rounds
 * differently from one over all of them (octattn_merge says when merging is exact).
 * Different algorithms, backends or targets round differently: their outputs agree
 * to the accuracy below, not to the byte.
 *
 * Accuracy. naive and fused agree with the reference (double accumulation) within
 * max|v| * (5e-7 * max(1, S) + 1e-8 * C) per element, S being the largest |s| (after
 * every modifier) and C the largest |scale| * sum_d |q_d k_d| over the call's allowed
 * pairs (tests/README.md). The C term is for dot products that cancel (products much larger
 * than their sum): their f32 rounding follows the products, not the score. Scores sum
 * the head dimension in blocks of 64 (one FMA chain each, the blocks added in order),
 * the same order in every call.
 *
 * ------------------------------------------------------------------------------------
 * ERRORS AND THREADS
 *
 * Every function that can fail returns an octattn_status. Inputs are validated
 * completely before anything is written: a call that fails leaves every output
 * byte untouched. The context keeps a message for its last failure.
 *
 * Calls on different contexts may run concurrently. A context must not be used by two
 * threads at the same time. Functions without a context argument are thread-safe.
 */
#ifndef OCTATTN_H_
#define OCTATTN_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(_WIN32)
#define OCTATTN_API
#elif defined(__GNUC__)
#define OCTATTN_API __attribute__((visibility("default")))
#else
#define OCTATTN_API
#endif

/* ---------------------------------------------------------------------- version */

#define OCTATTN_VERSION_MAJOR 0
#define OCTATTN_VERSION_MINOR 11
#define OCTATTN_VERSION_PATCH 0
/* MAJOR * 10000 + MINOR * 100 + PATCH */
#define OCTATTN_VERSION_NUMBER \
  (OCTATTN_VERSION_MAJOR * 10000 + OCTATTN_VERSION_MINOR * 100 + OCTATTN_VERSION_PATCH)

/* @return the version of the loaded library, as OCTATTN_VERSION_NUMBER encodes it. */
OCTATTN_API uint32_t octattn_version_number(void);
/* @return the version of the loaded library as "MAJOR.MINOR.PATCH" (static string). */
OCTATTN_API const char* octattn_version_string(void);

/* ---------------------------------------------------------------------- status */

/* Status values are fixed forever; new ones are only appended. */
typedef int32_t octattn_status;
#define OCTATTN_OK 0
/* A required pointer (context, tensor, data, options, out-pointer) is NULL. */
#define OCTATTN_ERROR_NULL_POINTER 1
/* A size is zero or negative, or sizes of different tensors disagree, or
 * q_heads % kv_heads != 0, or a split's channel count is not heads * head_dim, or a
 * ragged batch's tensors have a batch size other than 1. */
#define OCTATTN_ERROR_INVALID_SHAPE 2
/* A stride is negative, or an output's elements overlap each other. */
#define OCTATTN_ERROR_INVALID_STRIDE 3
/* A size, stride or extent product overflows int64_t or size_t. */
#define OCTATTN_ERROR_OVERFLOW 4
/* An output's extent overlaps the extent of an input or of another output (in-place
 * stages excepted). */
#define OCTATTN_ERROR_ALIASING 5
/* An option is out of range: unknown enum value, negative window, stride or chunk,
 * window or stride with full attention, q_start, k_start, q_start - k_start or chunk
 * beyond +-2^62, non-finite scale, negative or non-finite softcap, a non-finite ALiBi
 * slope, a sink that is NaN or +inf, a mask or bias tensor of the wrong dtype, negative
 * thread count; sequence arrays out of range (a q_starts entry as q_start, kv_starts or
 * kv_lens beyond a sequence's key rows, offsets that decrease or do not run from 0 to the
 * rows' count, cu_seqlens without sequences, a negative sequences, a block id out of
 * range, block_table_cols < 1, cu_seqlens_k with a block table). */
#define OCTATTN_ERROR_INVALID_OPTION 6
/* An option struct's struct_size is smaller than its size in version 0.1, or bytes past
 * the fields this library knows are not zero. */
#define OCTATTN_ERROR_STRUCT_SIZE 7
/* The caller's workspace is smaller than octattn_attention_workspace_size() says. */
#define OCTATTN_ERROR_WORKSPACE_TOO_SMALL 8
/* Valid but not available: a bf16 or f16 tensor where f32 is required (lse, weights,
 * an o of another dtype than q's, the backward's gradients, merge, the stages), a SIMD
 * target that is not compiled or not supported by this CPU, weights requested from the
 * fused algorithm, sequences given to a stage, a paged cache given to naive or to the
 * backward, a quantized one to the backward or a stage. */
#define OCTATTN_ERROR_UNSUPPORTED 9
/* Memory could not be allocated, or would exceed the context's memory limit. */
#define OCTATTN_ERROR_OUT_OF_MEMORY 10
/* A data pointer is not aligned to its element size. */
#define OCTATTN_ERROR_MISALIGNED 11
/* An unexpected internal failure; please report it. */
#define OCTATTN_ERROR_INTERNAL 12

/* @return a static, never NULL, English name of the status ("unknown status" for
 * values this library does not define). */
OCTATTN_API const char* octattn_status_string(octattn_status status);

/* The layout of a public struct as this library was built, for bindings that declare
 * the structs themselves (FFI, other languages) to check their view when they load:
 * with field NULL, *out = sizeof(type); else *out = offsetof(type, field). `type` is
 * "octattn_tensor", "octattn_attention_options" or "octattn_run_info"; `field` is a
 * member's name as this header spells it.
 * @return OCTATTN_OK, NULL_POINTER (type or out), INVALID_OPTION (unknown type or
 *   field; *out is not written). Since 0.4. */
OCTATTN_API octattn_status octattn_struct_layout(const char* type, const char* field, size_t* out);

/* ---------------------------------------------------------------------- enums */

typedef int32_t octattn_dtype;
#define OCTATTN_DTYPE_F32 1
#define OCTATTN_DTYPE_BF16 2 /* bfloat16 (q, k, v, o of octattn_attention; since 0.7) */
#define OCTATTN_DTYPE_F16 3  /* IEEE binary16 (the same tensors; since 0.7) */
/* One byte per element, 0 = false: the mask tensor only (since 0.3). */
#define OCTATTN_DTYPE_BOOL 4
/* Quantized KV caches: k and v of octattn_attention, dst of octattn_kv_store (since 0.11;
 * see SEMANTICS, Quantized caches). */
#define OCTATTN_DTYPE_INT8 5     /* int8 values times a scale of options.k_scale / v_scale */
#define OCTATTN_DTYPE_FP8_E4M3 6 /* OCP float8 e4m3fn (torch.float8_e4m3fn), times a scale */
#define OCTATTN_DTYPE_FP8_E5M2 7 /* OCP float8 e5m2 (torch.float8_e5m2), times a scale */
#define OCTATTN_DTYPE_Q8_0 8     /* ggml's block_q8_0: 34-byte blocks of 32 values */
#define OCTATTN_DTYPE_Q4_0 9     /* ggml's block_q4_0: 18-byte blocks of 32 values */
/* int32_t: a block mask's counts and indices only (since 0.11; see SEMANTICS, Block masks). */
#define OCTATTN_DTYPE_INT32 10
/* DeepSeek V3.2's fp8 latent cache (vLLM's fp8_ds_mla): 656-byte rows of 576 values, 512
 * e4m3 with an f32 scale per 128 and 64 bf16 (since 0.11; SEMANTICS, Quantized caches). */
#define OCTATTN_DTYPE_FP8_DS_MLA 11

typedef int32_t octattn_algorithm;
/* fused unless weights are requested, then naive. */
#define OCTATTN_ALGORITHM_AUTO 0
/* scalar, double-accumulating: the oracle the other algorithms are tested against. */
#define OCTATTN_ALGORITHM_REFERENCE 1
/* SIMD; materializes the [q_len, kv_len] scores of one (batch, head) per thread. */
#define OCTATTN_ALGORITHM_NAIVE 2
/* SIMD flash attention (online softmax over packed key tiles): scratch bounded by the
 * tile sizes whatever kv_len is; skips key tiles no row may read (sliding windows cost
 * O(q_len * window) plus the strided columns); cannot return weights. */
#define OCTATTN_ALGORITHM_FUSED 3

typedef int32_t octattn_qk_precision;
/* q . k in f32 on the dequantized keys: every format's scores as the f32 call's. */
#define OCTATTN_QK_EXACT 0
/* INT8, Q8_0 and Q4_0 key caches: q rounded to int8 in blocks, q . k as integer dot
 * products (see SEMANTICS, Quantized caches). Since 0.11. */
#define OCTATTN_QK_INT8 1

typedef int32_t octattn_backend;
#define OCTATTN_BACKEND_AUTO 0 /* Highway */
#define OCTATTN_BACKEND_HIGHWAY 1
#define OCTATTN_BACKEND_XSIMD 2

/* SIMD targets: x86-64 from least to most capable (1-6, then 10), ARM64 (7-9). A
 * backend compiles the subset of its machine's architecture:
 *   x86-64: Highway scalar, ssse3, sse4, avx2, avx512, avx512_bf16; xsimd sse2, sse4,
 *           avx2, avx512.
 *   ARM64:  Highway scalar, neon, sve2_128, sve_256; xsimd neon.
 * avx512_bf16 (since 0.8) is avx512 on CPUs with AVX512_BF16 and AVX512_VNNI (AMD Zen 4
 * and later, Intel Cooper Lake, Sapphire Rapids and later; since 0.11 its int8 dot
 * products run OCTATTN_QK_INT8's q . k): the fused algorithm's q.k of bf16 q and
 * bf16 k (even head_dim) runs on vdpbf16ps, which sums each pair of dimensions into the
 * chain (dimension 2p + 1, then 2p) with bf16 subnormals in q and k read as zero and
 * subnormal partial sums flushed to zero; the accuracy bound holds for it with C and S
 * taken over q and k with their subnormals zeroed, plus max|v| * 1e-8 * head_dim *
 * 2^-126 * |scale| (the flushes). When v is bf16 too and the call has no score modifier
 * (softcap, ALiBi, bias, mask tensor) and no strided columns, the weighted sum runs on
 * vdpbf16ps as well: each row's softmax weights rounded to bf16 (nearest even,
 * subnormals to zero; the denominator keeps the f32 weights), keys summed in pairs (key
 * 2m + 1, then 2m; a key whose pair partner the row may not read, alone), which adds
 * max|v| * 2^-8 to the bound. Decode still equals prefill, and every other invariant holds.
 * The backward (since 0.11) recomputes q.k of bf16 q and k (even head_dim) and computes
 * dout.v of bf16 dout and v (even value_dim) on vdpbf16ps the same way (one chain over
 * the pairs), its bound taken over the inputs with their subnormals zeroed. Where all
 * four are bf16, a tile of 64 rows and 64 keys all of whose pairs are read (no mask edge,
 * mask tensor, bias or list inside it) also sums dv and dk over pairs of rows and dq over
 * pairs of keys on vdpbf16ps, the probabilities and the scores' gradient rounded to bf16
 * (nearest even, subnormals to zero); that adds max|dout| * 2^-8 * max(1, P_j) to dv's
 * bound, |scale| * max|q| * G * 2^-8 * max(1, P_j) to dk's and |scale| * max|k| * G *
 * 2^-8 to dq's. Every invariant of the backward holds.
 * Everything else it runs is avx512's code, the same bytes; a caller who wants the
 * widened-f32 bytes selects avx512. AUTO picks it on CPUs with the extensions other than
 * Intel's (AMD Zen 4 and later); on Intel cores (since 0.11) AUTO picks avx512, whose
 * widened bf16 ran faster there (prefill, decode and the backward), and a caller who
 * wants vdpbf16ps asks for avx512_bf16; but Highway's AUTO runs OCTATTN_QK_INT8 calls on
 * avx512_bf16 wherever it runs (since 0.11), for its int8 dot products: such a call's
 * bytes are avx512's (its integer sums are exact either way), and
 * octattn_context_last_run names the target that ran.
 * amx_bf16 (since 0.9) is avx512_bf16 on CPUs with AMX-TILE and AMX-BF16 (Intel
 * Sapphire Rapids and later) where Linux grants the process the tile state
 * (arch_prctl ARCH_REQ_XCOMP_PERM, asked once; refused: the target is not available).
 * AUTO never picks it: a caller asks for it (octattn_context_set_target or
 * OCTATTN_TARGET=amx_bf16). Where the fused algorithm's q.k runs on vdpbf16ps on
 * avx512_bf16 and head_dim is a multiple of 32, it runs on AMX tiles instead: each block
 * of 64 dimensions (32 at the end) is tdpbf16ps's sum of its 32-dimension steps from
 * zero (the instruction's own sum of 32 products, not a chain of FMAs; bf16 subnormals
 * read as zero and subnormal results flushed, as vdpbf16ps does), the blocks added in
 * order, then scaled. Where avx512_bf16's weighted sums run on vdpbf16ps (bf16 v, no
 * score modifier, no strided columns) and q.k runs on AMX, each row's keys of a key
 * tile (256 keys) in whole groups of 32 from the tile's first key are summed on AMX
 * tiles, a tdpbf16ps step a group (the instruction's own sum of the group's 32 weighted
 * values added to the row's sum), and its keys before and after those groups on
 * vdpbf16ps's pairs, before and after them. The accuracy bound is avx512_bf16's (its
 * 2^-8 term included). Decode reads the cache in place as on avx512_bf16, each group
 * of keys' pairs and value rows arranged in scratch as the packed tiles hold them, so
 * decode still equals prefill (byte for byte) and every other invariant holds. Every
 * other call is avx512_bf16's code, the same bytes (other head_dims too).
 * The SVE targets have the vector length in their name: a CPU runs sve_256 when its SVE
 * vectors are 256 bits and sve2_128 when it has SVE2 with 128-bit vectors; any other
 * ARM64 CPU (no SVE, or SVE of another length) runs neon. */
typedef int32_t octattn_target;
#define OCTATTN_TARGET_AUTO 0 /* the best compiled target this CPU runs (see above) */
#define OCTATTN_TARGET_SCALAR 1
#define OCTATTN_TARGET_SSE2 2
#define OCTATTN_TARGET_SSSE3 3
#define OCTATTN_TARGET_SSE4 4
#define OCTATTN_TARGET_AVX2 5         /* with FMA */
#define OCTATTN_TARGET_AVX512 6       /* AVX-512 F+CD+DQ+BW (Highway also VL) */
#define OCTATTN_TARGET_NEON 7         /* ARM64 Advanced SIMD, 128-bit, with FMA */
#define OCTATTN_TARGET_SVE2_128 8     /* ARM64 SVE2, 128-bit vectors */
#define OCTATTN_TARGET_SVE_256 9      /* ARM64 SVE, 256-bit vectors */
#define OCTATTN_TARGET_AVX512_BF16 10 /* avx512 + AVX512_BF16 (since 0.8) */
#define OCTATTN_TARGET_AMX_BF16 11    /* avx512_bf16 + AMX-BF16 tiles (since 0.9) */

typedef int32_t octattn_layout;
#define OCTATTN_LAYOUT_BHTD 0 /* [batch, heads, tokens, dim], dim fastest */
#define OCTATTN_LAYOUT_BTHD 1 /* [batch, tokens, heads, dim], dim fastest */

/* @return static names ("highway", "avx2", "fused", ...); "unknown" for other values. */
OCTATTN_API const char* octattn_backend_name(octattn_backend backend);
OCTATTN_API const char* octattn_target_name(octattn_target target);
OCTATTN_API const char* octattn_algorithm_name(octattn_algorithm algorithm);

/* ---------------------------------------------------------------------- tensors */

typedef struct octattn_tensor {
  void* data;          /* never written through for inputs */
  octattn_dtype dtype; /* F32; BF16 or F16 where SEMANTICS allows; the mask tensor BOOL */
  int32_t reserved;    /* must be 0 */
  int64_t shape[4];    /* logical sizes, see SEMANTICS */
  int64_t stride[4];   /* in elements, >= 0 */
} octattn_tensor;

/* Describes a dense f32 tensor of logical shape [d0, d1, d2, d3] = [B, H, T, D] stored
 * as `layout` says (BHTD: as is; BTHD: memory order [B, T, H, D]).
 * @return OCTATTN_OK, NULL_POINTER (tensor), INVALID_SHAPE, INVALID_OPTION (layout),
 *         OVERFLOW. */
OCTATTN_API octattn_status octattn_tensor_init(octattn_tensor* tensor, void* data,
                                               const int64_t shape[4], octattn_layout layout);

/* ---------------------------------------------------------------------- context */

typedef struct octattn_context octattn_context;

/* Creates a context: thread cap = all hardware threads, backend and target auto, no
 * memory limit. The environment variables OCTATTN_BACKEND (highway|xsimd) and
 * OCTATTN_TARGET (a target name: scalar, sse2, ..., avx512, neon, sve2_128, sve_256,
 * avx512_bf16, amx_bf16) set the initial choice; a value this machine cannot run is ignored.
 * OCTATTN_THREADS (a decimal integer >= 0, as octattn_context_set_threads takes; since
 * 0.4) sets the initial thread cap; any other value is ignored.
 * @return OCTATTN_OK, NULL_POINTER (out), OUT_OF_MEMORY. */
OCTATTN_API octattn_status octattn_context_create(octattn_context** out);
/* Frees the context and its scratch memory. Accepts NULL. */
OCTATTN_API void octattn_context_destroy(octattn_context* ctx);

/* Caps the threads that calls on this context use. 0 = all hardware threads; values
 * above that are capped to it. Outputs do not depend on the thread count.
 * @return OCTATTN_OK, NULL_POINTER, INVALID_OPTION (negative), OUT_OF_MEMORY. */
OCTATTN_API octattn_status octattn_context_set_threads(octattn_context* ctx, int32_t threads);
/* @return OCTATTN_OK, NULL_POINTER. *out = the effective thread cap. */
OCTATTN_API octattn_status octattn_context_get_threads(const octattn_context* ctx, int32_t* out);

/* Chooses the SIMD backend and target of later calls. AUTO target = the best one this
 * CPU supports (for OCTATTN_QK_INT8 calls, see OCTATTN_TARGET_AVX512_BF16); a named
 * target must be compiled into the backend and supported by the CPU, and runs every
 * call. @return OCTATTN_OK, NULL_POINTER, INVALID_OPTION (unknown value), UNSUPPORTED. */
OCTATTN_API octattn_status octattn_context_set_target(octattn_context* ctx, octattn_backend backend,
                                                      octattn_target target);

/* Limits the scratch memory the library allocates for this context (0 = no limit).
 * Calls that would need more fail with OUT_OF_MEMORY; caller-provided workspaces are
 * not limited. @return OCTATTN_OK, NULL_POINTER. */
OCTATTN_API octattn_status octattn_context_set_memory_limit(octattn_context* ctx, uint64_t bytes);

/* @return the message of the context's last failed call ("" if none has failed); a
 * successful call leaves it as it was. Valid until the next failed call on the context
 * or its destruction. NULL ctx gives "". */
OCTATTN_API const char* octattn_context_last_error(const octattn_context* ctx);

typedef struct octattn_run_info {
  size_t struct_size;
  octattn_algorithm algorithm; /* the algorithm that ran (never AUTO) */
  octattn_backend backend;     /* the backend that ran (never AUTO); 0 for reference */
  octattn_target target;       /* the target that ran; SCALAR for reference */
  int32_t threads;             /* the thread cap the call ran under */
  /* Cascade decode (SEMANTICS, Shared prefixes; since 0.11): K/V rows of one kv head that
   * octattn_attention read once for several sequences rather than once for each (a span
   * of n key rows read for m sequences counts n * (m - 1) per kv head); 0 for the other
   * calls. */
  int64_t shared_kv_rows;
} octattn_run_info;

/* Reports what the context's last successful kernel call ran: octattn_attention and the
 * stages (octattn_scores ... octattn_weighted_sum, which report algorithm NAIVE with the
 * context's backend and target) record it; octattn_merge and the head layout calls are
 * scalar loops with no SIMD target and record nothing. Before any such call, info
 * reports algorithm, backend and target AUTO (0) and threads 0. Set info->struct_size
 * first (at least the 24 bytes of version 0.1's struct): only the bytes it covers are
 * written, struct_size is left as given.
 * @return OCTATTN_OK, NULL_POINTER, STRUCT_SIZE (info->struct_size below 24). */
OCTATTN_API octattn_status octattn_context_last_run(const octattn_context* ctx,
                                                    octattn_run_info* info);

/* Lists the targets compiled into `backend` that this CPU supports: the one AUTO picks
 * first, then the others from the newest extensions down (on Intel cores avx512_bf16
 * follows avx512, which AUTO picks there: see OCTATTN_TARGET_AVX512_BF16), then amx_bf16,
 * which AUTO never picks.
 * @return OCTATTN_OK, NULL_POINTER (count), INVALID_OPTION (backend).
 * *count = the number of such targets; at most `capacity` are written to `targets`
 * (which may be NULL when capacity is 0). */
OCTATTN_API octattn_status octattn_available_targets(octattn_backend backend,
                                                     octattn_target* targets, size_t capacity,
                                                     size_t* count);

/* ---------------------------------------------------------------------- attention */

#define OCTATTN_Q_START_DEFAULT INT64_MIN /* k_start + kv_len - q_len */

typedef struct octattn_attention_options {
  size_t struct_size;          /* sizeof(octattn_attention_options); 48 in version 0.1 */
  int32_t causal;              /* 1 (default): causal mask; 0: full attention */
  octattn_algorithm algorithm; /* default AUTO */
  int64_t window;              /* default 0: plain causal */
  int64_t stride;              /* default 0: no global columns */
  int64_t q_start;             /* default OCTATTN_Q_START_DEFAULT */
  float scale;                 /* default 0: 1/sqrt(head_dim) */
  int32_t reserved;            /* must be 0 */
  /* Since 0.2 (struct_size 56): */
  int64_t k_start; /* default 0: the position of key row 0 */
  /* Since 0.3 (struct_size 104): score modifiers, see SEMANTICS. Arrays and tensors are
   * read during the call only; NULL (the default) turns each off. */
  int64_t chunk;             /* default 0: no chunks; else chunked attention */
  float softcap;             /* default 0: off; else > 0 and finite */
  int32_t reserved2;         /* must be 0 */
  const float* alibi_slopes; /* q_heads finite slopes (NULL: no ALiBi) */
  const float* sinks;        /* q_heads sink logits, finite or -inf (NULL: none) */
  /* [batch, q_heads, q_len, kv_len] added to the scores: f32, any strides >= 0; a size of
   * 1 broadcasts (its stride is ignored), as does a stride of 0. */
  const octattn_tensor* bias;
  /* The same shape rules, OCTATTN_DTYPE_BOOL: 0 masks the pair. */
  const octattn_tensor* mask;
  /* Since 0.6 (struct_size 168): batches of sequences of different lengths, see
   * SEMANTICS (Sequences). Arrays are read during the call only; NULL (the default) turns
   * each off. Per sequence: */
  const int64_t* q_starts;     /* the first query row's position (default: q_start) */
  const int64_t* kv_starts;    /* the first valid key row (default 0) */
  const int64_t* kv_lens;      /* valid key rows from kv_starts[s] (default: the rest) */
  int64_t sequences;           /* default 0: the batch entries; n > 0: a ragged batch */
  const int64_t* cu_seqlens_q; /* ragged: n + 1 offsets of the query rows */
  const int64_t* cu_seqlens_k; /* ragged: n + 1 offsets of the key rows */
  /* A paged KV cache (see SEMANTICS, Paged): block_table_cols block ids per sequence
   * (row s at block_table + s * block_table_cols). NULL: contiguous keys. */
  const int32_t* block_table;
  int64_t block_table_cols;
  /* Since 0.11 (struct_size 208): the scales of an INT8 or FP8 cache (see SEMANTICS,
   * Quantized caches); NULL (the default): none (FP8 values as they are; INT8 needs one). */
  const octattn_tensor* k_scale;
  const octattn_tensor* v_scale;
  int64_t k_scale_rows; /* key rows per row of k_scale (default 0: 1) */
  int64_t v_scale_rows; /* key rows per row of v_scale (default 0: 1) */
  /* How q . k is computed over a quantized key cache (default OCTATTN_QK_EXACT). */
  octattn_qk_precision qk_precision;
  int32_t reserved3; /* must be 0 */
  /* Since 0.11 (struct_size 232): a tree of draft tokens (speculative decoding's
   * verification), packed bits per query row, see SEMANTICS (Trees). NULL (the default):
   * none. Not with options.mask. */
  const uint8_t* tree;
  int64_t tree_row_bytes; /* bytes from a row's bits to the next row's (>= 1 with a tree) */
  int64_t tree_stride;    /* bytes from a batch entry's rows to the next (default 0: every
                             entry reads the same tree, as a tensor's stride of 0) */
  /* Since 0.11 (struct_size 280): a block mask, flex_attention's BlockMask, see SEMANTICS
   * (Block masks). INT32 tensors, a size of 1 (or a stride of 0) broadcasting in the batch
   * and head dimensions. NULL block_counts (the default): none. */
  const octattn_tensor* block_counts;       /* [batch, q_heads, q_blocks, 1]: kv_num_blocks */
  const octattn_tensor* block_indices;      /* [batch, q_heads, q_blocks, n]: kv_indices */
  const octattn_tensor* full_block_counts;  /* full_kv_num_blocks (NULL: no full blocks) */
  const octattn_tensor* full_block_indices; /* full_kv_indices */
  int64_t block_q;                          /* query rows per block (>= 1 with a block mask) */
  int64_t block_kv;                         /* key rows per block (>= 1 with a block mask) */
  /* Since 0.11 (struct_size 288): an output of octattn_attention, each key's attention
   * received, for KV-cache eviction (H2O, SnapKV); see SEMANTICS (Key scores). f32
   * [batch, kv_heads, kv_len, 1] (paged: [sequences, kv_heads, logical rows, 1]). NULL
   * (the default): none. The backward and octattn_mask ignore it. */
  octattn_tensor* key_scores;
  /* Since 0.11 (struct_size 320): token-sparse attention, per query row the key rows it
   * reads (DeepSeek's sparse attention: an indexer's top-k), see SEMANTICS (Key lists).
   * INT32 tensors, a size of 1 (or a stride of 0) broadcasting in the batch and head
   * dimensions. NULL key_indices (the default): none. */
  const octattn_tensor* key_indices;  /* [batch, 1 or kv_heads, q_len, n]: key rows, -1: none */
  const octattn_tensor* key_counts;   /* [batch, 1 or kv_heads, q_len, 1]: entries of a row's
                                         list (NULL: all n) */
  const octattn_tensor* key_indices2; /* a second list joined to the first (a local window) */
  const octattn_tensor* key_counts2;  /* its counts (NULL: all of its n) */
} octattn_attention_options;

/* Fills *options with the defaults above, writing exactly the struct this header
 * declares (when the struct grows, a caller built against an older header keeps the
 * init of its version: the library exports one symbol version per struct size, which
 * the linker binds a program to when it is built).
 * Callers that resolve symbols at run time (Python's ctypes, cffi's ABI mode, JNA,
 * Julia's ccall, LuaJIT's FFI, Go's purego) get the newest version from dlsym, which
 * writes the newest struct: they must call octattn_attention_options_init_size instead.
 * @return OCTATTN_OK, NULL_POINTER. */
OCTATTN_API octattn_status octattn_attention_options_init(octattn_attention_options* options);

/* Fills the first struct_size bytes at *options with the defaults above and sets
 * options->struct_size = struct_size; writes nothing past them. For callers whose struct
 * is another version's (every binding that declares the struct itself, and every caller
 * that resolves symbols at run time, see above): pass the size of the struct as the
 * caller declares it. Bytes past the fields this library knows are zeroed (a newer
 * header's fields, whose defaults are zero bytes). On failure nothing is written.
 * @return OCTATTN_OK, NULL_POINTER, STRUCT_SIZE (struct_size below 48, the size in
 *   version 0.1). Since 0.10. */
OCTATTN_API octattn_status octattn_attention_options_init_size(octattn_attention_options* options,
                                                               size_t struct_size);

/* Bytes of workspace that octattn_attention() needs for these arguments on this
 * context (its thread cap and target included). `options` may be NULL (defaults).
 * lse and weights may be NULL. @return as octattn_attention() validates. */
OCTATTN_API octattn_status octattn_attention_workspace_size(
    octattn_context* ctx, const octattn_attention_options* options, const octattn_tensor* q,
    const octattn_tensor* k, const octattn_tensor* v, const octattn_tensor* o,
    const octattn_tensor* lse, const octattn_tensor* weights, size_t* bytes);

/* o = softmax(scale * q k^T + M) v, with optional lse and weights (see SEMANTICS).
 * `options` may be NULL (defaults). `workspace` may be NULL: the context then uses its
 * own scratch, allocated on first need and reused by later calls. With a workspace of
 * at least octattn_attention_workspace_size() bytes the call allocates nothing, padded,
 * ragged and paged batches included (the workspace holds their sequences' tables too),
 * once the context's thread pool has started its threads (its first parallel call).
 * @return OCTATTN_OK, NULL_POINTER, INVALID_SHAPE, INVALID_STRIDE, OVERFLOW, ALIASING,
 *   INVALID_OPTION, STRUCT_SIZE, WORKSPACE_TOO_SMALL, UNSUPPORTED (dtype; weights with
 *   FUSED), OUT_OF_MEMORY, MISALIGNED, INTERNAL. */
OCTATTN_API octattn_status octattn_attention(octattn_context* ctx,
                                             const octattn_attention_options* options,
                                             const octattn_tensor* q, const octattn_tensor* k,
                                             const octattn_tensor* v, octattn_tensor* o,
                                             octattn_tensor* lse, octattn_tensor* weights,
                                             void* workspace, size_t workspace_size);

/* ---------------------------------------------------------------------- cache store
 * Writes new key or value rows into a KV cache of any dtype (since 0.11): src [batch,
 * kv_heads, rows, dim] (f32, bf16 or f16) converted to dst's dtype:
 *   F32, BF16, F16   rounded to nearest even (F32: copied);
 *   INT8             each scale's block of values (scale_rows rows by G channels, as
 *                    options.k_scale reads it) gets s = max|x| / 127, written to `scale`
 *                    in its dtype and read back from there, and i = clamp(round half to
 *                    even(x / s), -127, 127) (s == 0: i = 0); a block holding NaN or Inf
 *                    gets s = NaN and i = 0 (its values read back as NaN);
 *   FP8_E4M3, FP8_E5M2
 *                    fp8(x / s), rounded to nearest even, finite values beyond the
 *                    largest finite one saturating to it, NaN to NaN, Inf to NaN (e4m3)
 *                    or Inf (e5m2); s read from `scale` (an input here, broadcasting as
 *                    options.k_scale does; NULL: 1);
 *   Q8_0             per block d = f16(max|x| / 127), q = clamp(round(x / d), -127, 127);
 *   Q4_0             per block m = the value of largest magnitude (the first of equals),
 *                    d = f16(m / -8), nibble = clamp(round(x / d) + 8, 0, 15) (d == 0: 8)
 *   FP8_DS_MLA       rows of 576 values (dim 576): per group of 128 of values 0..511
 *                    s = max|x| / 448 (f32) and e4m3fn(x / s) as FP8 above (s == 0:
 *                    code 0); values 512..575 rounded to bf16
 * (round: half to even; a Q block holding NaN or Inf gets d = NaN, an FP8_DS_MLA group s =
 * NaN and codes 0). INT8 and FP8 need `scale`; the other dtypes take none (scale NULL,
 * scale_rows 0).
 * Contiguous (slots NULL): dst has src's shape, a view of the cache's rows that receive
 * src's (the caller offsets it to the positions); an INT8 scale is [batch, kv_heads,
 * rows / scale_rows, dim / G] (rows a multiple of scale_rows; 0 means 1), written whole.
 * Paged (vLLM's slot mapping): src row t of batch entry b goes to slot slots[b * rows + t]
 * of the pools dst [num_blocks, kv_heads, block_size, dim] and scale [num_blocks,
 * kv_heads, block_size / scale_rows, dim / G]: block slot / block_size, row slot %
 * block_size; a negative slot skips its row. With scale_rows > 1 each scale's rows go to
 * consecutive slots from a multiple of scale_rows (block_size a multiple of it). Rows are
 * written in order (two rows with one slot: the later one's bytes), and the bytes are
 * the same for any thread count. A store of at most 16 rows a (batch entry, kv head), a
 * decode step's, writes the 64-byte lines that F32, BF16, F16, INT8 and FP8 rows fill whole
 * past the CPU's caches (non-temporal stores, fenced before the call returns: new rows then cost
 * no read of their lines; rewriting rows already in the caches costs more); longer ones
 * write through the caches.
 * @return OCTATTN_OK, NULL_POINTER (also scale for INT8), INVALID_SHAPE, INVALID_STRIDE,
 *   OVERFLOW, ALIASING (dst or scale overlapping src, or each other), INVALID_OPTION
 *   (a slot out of range or misaligned, a scale for a dtype that takes none,
 *   scale_rows < 0), UNSUPPORTED (a quantized src), MISALIGNED, OUT_OF_MEMORY. */
OCTATTN_API octattn_status octattn_kv_store(octattn_context* ctx, const octattn_tensor* src,
                                            octattn_tensor* dst, octattn_tensor* scale,
                                            int64_t scale_rows, const int64_t* slots);

/* ---------------------------------------------------------------------- backward
 * The gradients of octattn_attention for training (since 0.5). Given the forward call's
 * options and inputs, the o and lse it returned, dout = dL/do (the shape of o) and
 * optionally dlse = dL/dlse (the shape of lse; NULL: zero), the backward writes dq, dk
 * and dv (the shapes of q, k and v), and on request dsinks (q_heads floats; needs
 * options.sinks) and dbias ([batch, q_heads, q_len, kv_len]). For an allowed pair
 * (i, j) of query head h, with p the softmax of row i (its sink in the denominator)
 * and x = scale * q_i . k_j:
 *     D_i = dout_i . o_i - dlse_i   ds = p_ij * (dout_i . v_j - D_i)
 *     dbias[b, h, i, j] = ds        dx = ds * (1 - tanh(x / softcap)^2) (softcap > 0; else ds)
 *     dq_i += scale * dx * k_j      dk_j += scale * dx * q_i      dv_j += p_ij * dout_i
 *     dsinks[h] = -sum over batches and rows of exp(sinks[h] - lse_i) * D_i
 * (a row with no allowed key has o = 0 and lse = sinks[h]: it adds dlse_i to dsinks)
 * dk and dv of a kv head sum over the query heads of its GQA group. dbias is the
 * gradient of the scores after every modifier, so it is also dL/dbias of a bias tensor
 * (full size: a caller whose bias broadcasts sums it over those dimensions) and exists
 * with no bias tensor too; it is 0 where the pair is masked. ALiBi slopes, scale and the
 * mask tensor are constants (no gradient). A row with no allowed key, or whose allowed
 * scores are all -inf, gets dq 0 and contributes to no other gradient. Every element of
 * every gradient is written, keys that no row reads getting 0.
 *
 * Algorithms: AUTO and FUSED run the fused backward (FlashAttention-2's: the
 * probabilities recomputed tile by tile from q, k and lse, D from dout and o; scratch
 * bounded by the tile sizes whatever q_len and kv_len are, tiles no row reads skipped).
 * Over key lists it takes the query rows 64 at a time, their lists as sets (each key
 * once, ascending), and reads only the tiles of 64 keys that one of those rows names,
 * checking each pair (a row that reads fewer than an eighth of a tile's keys computes
 * its pairs alone, the others the tile's products): its cost follows the tiles the lists touch
 * (scattered top-k lists touch most of a short cache's), and its scratch holds 64 rows'
 * lists (4 bytes for each entry of the lists' capacity n + n2).
 * Its o and lse must be what octattn_attention returned for these inputs and options.
 * REFERENCE is the double-accumulating oracle: it recomputes o and the softmax from q,
 * k and v and does not read o and lse. NAIVE: UNSUPPORTED. Tasks are (batch, kv head)
 * pairs, or (sequence, kv head) pairs for a batch of sequences: at most that many threads
 * work.
 *
 * Invariants. A masked pair reaches no gradient whatever the bits of q, k, v, o, lse and
 * dout, dlse (NaN and Inf included): dk_j and dv_j depend only on the rows that may read key
 * j, dq_i only on the keys row i reads (and on row i), dbias[i, j] only on row i and key
 * j. The bytes of every gradient are the same for any thread count, any strides of the
 * same numbers, and any subset of the batch or of whole GQA groups: dk and dv sum their
 * rows, and dq its keys, in one fixed order (no atomics).
 *
 * Accuracy. Against the reference, on inputs with o and lse from the forward: with
 * S the largest |score| (after every modifier), R = 1e-6 * max(1, S), P_j the sum of
 * p_ij over the rows that read key j (its group's heads too), G = value_dim * max|dout|
 * * max|v| + max|dlse| (a bound on |dout_i . v_j| and |D_i|):
 *     |dv_j - ref| <= R * max|dout| * max(1, P_j)
 *     |dq_i - ref| <= R * |scale| * max|k| * G * 4
 *     |dk_j - ref| <= R * |scale| * max|q| * G * 4 * max(1, P_j)
 *     |dbias - ref| <= R * G * 4,   |dsinks - ref| <= R * G * 2 * (rows with a key)
 * the maxima taken over the call (tests/README.md); bf16 tensors on avx512_bf16 add the
 * terms of that target's rule (SIMD targets, below).
 *
 * All inputs must be disjoint from every output; outputs must not overlap each other.
 * @return OCTATTN_OK, NULL_POINTER (also lse, dout, dq, dk, dv), INVALID_SHAPE,
 *   INVALID_STRIDE, OVERFLOW, ALIASING, INVALID_OPTION (also dsinks without
 *   options.sinks), STRUCT_SIZE, WORKSPACE_TOO_SMALL, UNSUPPORTED (a quantized cache, a
 *   16-bit gradient, NAIVE),
 *   OUT_OF_MEMORY, MISALIGNED, INTERNAL. Since 0.5. */
OCTATTN_API octattn_status octattn_attention_backward(
    octattn_context* ctx, const octattn_attention_options* options, const octattn_tensor* q,
    const octattn_tensor* k, const octattn_tensor* v, const octattn_tensor* o,
    const octattn_tensor* lse, const octattn_tensor* dout, const octattn_tensor* dlse,
    octattn_tensor* dq, octattn_tensor* dk, octattn_tensor* dv, float* dsinks,
    octattn_tensor* dbias, void* workspace, size_t workspace_size);

/* Bytes of workspace octattn_attention_backward() needs for these arguments on this
 * context; with a workspace of that size the backward allocates nothing, as
 * octattn_attention. @return as octattn_attention_backward() validates, and NULL_POINTER
 * (bytes). Since 0.5. */
OCTATTN_API octattn_status octattn_attention_backward_workspace_size(
    octattn_context* ctx, const octattn_attention_options* options, const octattn_tensor* q,
    const octattn_tensor* k, const octattn_tensor* v, const octattn_tensor* o,
    const octattn_tensor* lse, const octattn_tensor* dout, const octattn_tensor* dlse,
    const octattn_tensor* dq, const octattn_tensor* dk, const octattn_tensor* dv,
    const float* dsinks, const octattn_tensor* dbias, size_t* bytes);

/* ---------------------------------------------------------------------- partials
 * A sequence split over processes (context parallelism, ring attention) attends each
 * query block to one shard of the keys at a time (k_start gives a shard its positions)
 * and combines the partial results (o_p, lse_p) by their natural-log LSE:
 *     m = max_p lse_p,  lse = m + log(sum_p exp(lse_p - m)),  o = sum_p exp(lse_p - lse) o_p
 * per row, in double, over the partials in the order given, rounded once. A partial
 * whose lse is -inf (no key of its shard is allowed, or all scores were -inf)
 * contributes nothing: its o is not read, so whatever it holds (NaN included) cannot
 * reach the result. A row whose every partial is -inf gives zeros and lse -inf, as one
 * call does; NaN in an lse makes its row NaN. Over disjoint key shards whose union is
 * one call's keys, the result agrees with that call within twice the accuracy bound;
 * byte for byte when at most one partial of a row is not -inf (then the result is that
 * partial's bytes), and not in general otherwise (one call merges its internal,
 * unnormalized partials). Merging is associative within the same bound.
 *
 * o_parts and lse_parts: arrays of `parts` >= 1 tensors of shapes [B, H, T, Dv] and
 * [B, H, T, 1], any strides. o gets the result, [B, H, T, Dv]; lse (optional) its LSE.
 * In place: o may be the very view o_parts[p] (same data, shape and strides) and lse
 * the view lse_parts[p] of the same p (how a running result absorbs the next shard);
 * apart from that, outputs must not overlap any input or each other. Runs on the
 * context's thread pool.
 * @return OCTATTN_OK, NULL_POINTER, INVALID_SHAPE (parts == 0, sizes that differ),
 *   INVALID_STRIDE, OVERFLOW, ALIASING, INVALID_OPTION (dtype), UNSUPPORTED (dtype),
 *   OUT_OF_MEMORY, MISALIGNED, INTERNAL. Since 0.2. */
OCTATTN_API octattn_status octattn_merge(octattn_context* ctx, size_t parts,
                                         const octattn_tensor* o_parts,
                                         const octattn_tensor* lse_parts, octattn_tensor* o,
                                         octattn_tensor* lse);

/* ---------------------------------------------------------------------- stages
 * The naive path as separate kernels, so callers can compose variants (a bias between
 * mask and softmax, say). They run on the context's backend and target. `scores` is a
 * [batch, q_heads, q_len, kv_len] tensor. Each returns OCTATTN_OK, NULL_POINTER,
 * INVALID_SHAPE, INVALID_STRIDE, OVERFLOW, ALIASING (output against inputs),
 * UNSUPPORTED (dtype), OUT_OF_MEMORY, MISALIGNED or INTERNAL, plus what it lists. */

/* scores = q k^T (unscaled), with the GQA rule. q and k: f32, bf16 or f16 (since 0.8);
 * scores f32. */
OCTATTN_API octattn_status octattn_scores(octattn_context* ctx, const octattn_tensor* q,
                                          const octattn_tensor* k, octattn_tensor* scores);
/* scores *= scale, in place (scale 0 is a real zero here). Also INVALID_OPTION (scale
 * not finite). */
OCTATTN_API octattn_status octattn_scale(octattn_context* ctx, octattn_tensor* scores, float scale);
/* Sets masked entries of scores to -inf, in place, by the options' causal, window,
 * stride, chunk, q_start, k_start, mask tensor, tree, block mask and key lists (kv_len =
 * scores' last size; a list's head dimension is 1 or a divisor of q_heads, each list
 * serving its group of heads; the modifiers are octattn_modify_scores'). Also
 * INVALID_OPTION, STRUCT_SIZE, and UNSUPPORTED for options with sequences (q_starts,
 * kv_starts, kv_lens, sequences). */
OCTATTN_API octattn_status octattn_mask(octattn_context* ctx,
                                        const octattn_attention_options* options,
                                        octattn_tensor* scores);
/* Applies the options' softcap, ALiBi slopes and bias tensor to scaled scores, in place,
 * in the order of SEMANTICS (positions from q_start and k_start); entries whose bias is
 * -inf become -inf. Other options are not applied (the mask is octattn_mask's, the sinks
 * octattn_softmax_sinks'). Also INVALID_OPTION, STRUCT_SIZE, UNSUPPORTED (sequences, as
 * octattn_mask). Since 0.3. */
OCTATTN_API octattn_status octattn_modify_scores(octattn_context* ctx,
                                                 const octattn_attention_options* options,
                                                 octattn_tensor* scores);
/* Row-wise stable softmax of scores, in place; lse (optional, [B, H, q_len, 1]) gets
 * each row's natural-log log-sum-exp. Rows that are all -inf become zeros, lse -inf. */
OCTATTN_API octattn_status octattn_softmax(octattn_context* ctx, octattn_tensor* scores,
                                           octattn_tensor* lse);
/* octattn_softmax with sinks: sinks (q_heads logits, finite or -inf; required, else
 * NULL_POINTER) join each row's denominator as SEMANTICS says; a row of -inf becomes
 * zeros with lse = sinks[h]. Also INVALID_OPTION (a sink NaN or +inf). Since 0.3. */
OCTATTN_API octattn_status octattn_softmax_sinks(octattn_context* ctx, octattn_tensor* scores,
                                                 const float* sinks, octattn_tensor* lse);
/* o = weights v, with the GQA rule. Entries of weights that are exactly 0 still
 * multiply their value rows (IEEE: 0 * Inf = NaN). v: f32, bf16 or f16 (since 0.8);
 * weights and o f32. */
OCTATTN_API octattn_status octattn_weighted_sum(octattn_context* ctx, const octattn_tensor* weights,
                                                const octattn_tensor* v, octattn_tensor* o);

/* ---------------------------------------------------------------------- head layout
 * Byte-exact copies. A [batch, tokens, channels] sequence tensor is an octattn_tensor
 * with shape {batch, tokens, channels, 1} (stride[3] is ignored). Elements f32, bf16 or
 * f16 (since 0.8), every output of src's dtype (else UNSUPPORTED). */

/* dst [B, heads, T, channels / heads] <- src [B, T, channels]. */
OCTATTN_API octattn_status octattn_split_heads(octattn_context* ctx, const octattn_tensor* src,
                                               int64_t heads, octattn_tensor* dst);
/* dst [B, T, H * D] <- src [B, H, T, D]: the inverse of octattn_split_heads(). */
OCTATTN_API octattn_status octattn_merge_heads(octattn_context* ctx, const octattn_tensor* src,
                                               octattn_tensor* dst);
/* q [B, q_heads, T, D], k and v [B, kv_heads, T, D] <- src [B, T, (q_heads + 2 kv_heads) D],
 * channels ordered q heads, then k heads, then v heads. q_heads % kv_heads == 0, as for
 * attention (INVALID_SHAPE otherwise). */
OCTATTN_API octattn_status octattn_split_qkv(octattn_context* ctx, const octattn_tensor* src,
                                             int64_t q_heads, int64_t kv_heads, octattn_tensor* q,
                                             octattn_tensor* k, octattn_tensor* v);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* OCTATTN_H_ */
