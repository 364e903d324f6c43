// api.cpp — sdpa::forward / sdpa::backward: validate, pick the kernel and ISA,
// spread tiles over threads.
#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <utility>
#include <vector>

#include <omp.h>

#include "attention/engine16.hpp"
#include "attention/fast.hpp"
#include "attention/mask_rows.hpp"
#include "attention/merge.hpp"
#include "attention/plan.hpp"
#include "common/per_isa.hpp"
#include "attention/problem.hpp"
#include "sdpa/reference.hpp"

namespace sdpa {
namespace detail {

namespace {
std::atomic<i64> strided_copy_byte_count{0};
// 512 MiB: the strided copies of one call (below) may add at most this much memory.
std::atomic<i64> strided_copy_limit{i64{512} << 20};
std::atomic<const FastKernels*> kernels_for_tests{nullptr};
}  // namespace
i64 strided_copy_bytes() { return strided_copy_byte_count.load(std::memory_order_relaxed); }
i64 strided_copy_limit_bytes() { return strided_copy_limit.load(std::memory_order_relaxed); }
void set_strided_copy_limit_bytes(i64 bytes) { strided_copy_limit.store(bytes, std::memory_order_relaxed); }
bool backward_on_engine(Engine16 engine, const Problem& p) {
  return engine_takes(engine, p.dtype) && (!engine_backward_needs_finite(engine, p.dtype) || p.inputs_finite);
}
void set_kernels_for_tests(const FastKernels* kernels) { kernels_for_tests.store(kernels, std::memory_order_relaxed); }

const FastKernels& fast_kernels(Isa isa) {
  static const PerIsa<const FastKernels& (*)()> set{fast_kernels_scalar,
                                                    SDPA_X86_ENTRY(fast_kernels_avx2),
                                                    SDPA_AVX512_ENTRY(fast_kernels_avx512),
                                                    SDPA_ARM_ENTRY(fast_kernels_neon),
                                                    SDPA_ARM_ENTRY(fast_kernels_sve256),
                                                    SDPA_ARM_ENTRY(fast_kernels_sve512)};
  return per_isa(set, isa, "isa")();
}

const FastKernels& kernels_for(const Options& opt) {
  if (const FastKernels* k = kernels_for_tests.load(std::memory_order_relaxed)) return *k;
  const FastKernels& widening = fast_kernels(opt.isa);
  // The avx512 (neon) path's table is the one of the engine the dispatch chose.
#if defined(__x86_64__) && !defined(SDPA_NO_AVX512)
  if (&widening == &fast_kernels_avx512()) {
    switch (engine_for(Isa::avx512)) {
      case Engine16::amx: return fast_kernels_avx512_amx();
      case Engine16::dot: return fast_kernels_avx512_dot();
      default: break;
    }
  }
#elif defined(__aarch64__)
  if (&widening == &fast_kernels_neon() && engine_for(Isa::neon) == Engine16::dot) return fast_kernels_neon_dot();
#endif
  return widening;
}

namespace {

// The plan's ISA, and the reasons for it and for the engine of a call of `dtype` on `kern`.
void plan_dispatch(Plan& plan, const Options& opt, const FastKernels& kern, Dtype dtype) {
  plan.isa = opt.isa == Isa::automatic ? active_isa() : opt.isa;
  std::string why = opt.isa == Isa::automatic ? active_dispatch().isa_reason : "Options::isa";
  if (kernels_for_tests.load(std::memory_order_relaxed) != nullptr)
    why += "; a test's kernel table";
  else if (dtype == Dtype::f32)
    why += "; fp32 has no 16-bit products";
  else if (plan.isa != Isa::avx512)
    why += std::string("; the ") + isa_name(plan.isa) + " path widens 16-bit operands";
  else if (!engine_takes(kern.engine, dtype))
    why += std::string("; the ") + engine_name(kern.engine) + " engine does not take " + dtype_name(dtype) +
           (kern.engine == Engine16::widened ? " (" + active_dispatch().engine_reason + ")" : ": widened");
  else
    why += "; " + active_dispatch().engine_reason;
  plan.why = why;
}

// A forward's schedule in its plan: the dispatch, its workers and key splits, and the items each
// loop took (loops: [worker][ForwardLoop]).
void plan_forward(Plan& plan, const Options& opt, const FastKernels& kern, Dtype dtype, int workers, i64 splits,
                  const std::vector<std::array<i64, 4>>& loops) {
  plan_dispatch(plan, opt, kern, dtype);
  plan.threads = workers;
  plan.kv_splits = splits;
  for (const auto& w : loops) {
    plan.decoding_items += w[static_cast<std::size_t>(ForwardLoop::decoding)];
    plan.few_lane_items += w[static_cast<std::size_t>(ForwardLoop::few_lanes)];
    plan.tiled_items += w[static_cast<std::size_t>(ForwardLoop::tiled)];
    plan.engine_items += w[static_cast<std::size_t>(ForwardLoop::engine)];
  }
  plan.engine = plan.engine_items > 0 ? kern.engine : Engine16::widened;
}

// The blocks a call's buffers take (the workers' scratch, the strided copies, the packed
// operands), kept between calls. A block above glibc's mmap threshold (at most 32 MiB) is
// mapped afresh on every allocation, and each of its pages faulted in and zeroed by the
// kernel on first touch: a bf16 forward of 64 queries over 32768 keys (8 kv heads, D 128)
// spent a fifth of its time in the faults of its 64 MiB packed Vᵀ, an fp16 one over 4096
// keys two fifths (docs/performance.md, "Buffers kept between calls"). A call takes a free
// block big enough, the smallest such, else a new one, and gives it back at its end; a call
// that finds none big enough first frees the free ones (so the pool holds what the calls of
// one shape took at once, not every size seen). Blocks are 64-byte aligned.
class BlockPool {
 public:
  ~BlockPool() {
    for (const Block& b : blocks_) ::operator delete (b.data, std::align_val_t{64});
  }
  std::byte* take(i64 bytes) {
    const std::lock_guard<std::mutex> lock(mutex_);
    Block* best = nullptr;
    for (Block& b : blocks_)
      if (!b.busy && b.bytes >= bytes && (best == nullptr || b.bytes < best->bytes)) best = &b;
    if (best != nullptr) {
      best->busy = true;
      return best->data;
    }
    free_idle();
    auto* data = static_cast<std::byte*>(::operator new (static_cast<std::size_t>(bytes), std::align_val_t{64}));
    blocks_.push_back({data, bytes, true});
    return data;
  }
  void give_back(const std::byte* data) {
    const std::lock_guard<std::mutex> lock(mutex_);
    for (Block& b : blocks_)
      if (b.data == data) b.busy = false;
  }
  BufferPoolBytes bytes() {
    const std::lock_guard<std::mutex> lock(mutex_);
    BufferPoolBytes r;
    for (const Block& b : blocks_) r.held += b.bytes, r.busy += b.busy ? b.bytes : 0;
    return r;
  }
  i64 release() {  // frees the free blocks (as take does before a new one): their bytes
    const std::lock_guard<std::mutex> lock(mutex_);
    return free_idle();
  }

 private:
  struct Block {
    std::byte* data;
    i64 bytes;
    bool busy;
  };
  i64 free_idle() {  // under mutex_
    i64 freed = 0;
    std::erase_if(blocks_, [&](const Block& b) {
      if (b.busy) return false;
      ::operator delete (b.data, std::align_val_t{64});
      freed += b.bytes;
      return true;
    });
    return freed;
  }
  std::mutex mutex_;
  std::vector<Block> blocks_;
};
BlockPool& block_pool() {
  static BlockPool pool;
  return pool;
}
// One block of the pool for the life of the object (none for 0 bytes).
class PooledBlock {
 public:
  PooledBlock() = default;
  explicit PooledBlock(i64 bytes) : data_(bytes > 0 ? block_pool().take(bytes) : nullptr) {}
  ~PooledBlock() {
    if (data_ != nullptr) block_pool().give_back(data_);
  }
  PooledBlock(const PooledBlock&) = delete;
  PooledBlock& operator=(const PooledBlock&) = delete;
  PooledBlock(PooledBlock&& o) noexcept : data_(o.data_) { o.data_ = nullptr; }
  PooledBlock& operator=(PooledBlock&& o) noexcept {
    std::swap(data_, o.data_);
    return *this;
  }
  std::byte* data() const { return data_; }

 private:
  std::byte* data_ = nullptr;
};

// One 64-byte-aligned scratch block per worker, allocated before the parallel
// region so no allocation failure can escape an OpenMP region.
class ScratchBlocks {
 public:
  ScratchBlocks(int workers, i64 floats_each)
      : floats_(floats_each),
        stride_(static_cast<std::size_t>((floats_each + 15) / 16 * 16)),
        block_(std::max<i64>(static_cast<i64>(stride_ * sizeof(float)) * workers, 64)) {}
  WorkerScratch worker(int w) const {
    return {reinterpret_cast<float*>(block_.data()) + stride_ * static_cast<std::size_t>(w), floats_};
  }

 private:
  i64 floats_;          // what the kernel asked for, per worker
  std::size_t stride_;  // between workers: floats_ rounded up to 64 bytes
  PooledBlock block_;
};

i64 ceil_div(i64 a, i64 b) { return (a + b - 1) / b; }

// Element offset of (a, b, c, d) in a view, and one element of a tensor in the call's dtype,
// for the few places outside the kernel that touch single elements (delta, the split merge).
template <class V>
i64 off4(const V& v, i64 a, i64 b, i64 c, i64 d) {
  return a * v.stride[0] + b * v.stride[1] + c * v.stride[2] + d * v.stride[3];
}
float load_at(const InView& x, i64 o) {
  switch (x.dtype) {
    case Dtype::bf16: return static_cast<float>(static_cast<const bf16*>(x.bits)[o]);
    case Dtype::fp16: return static_cast<float>(static_cast<const fp16*>(x.bits)[o]);
    default: return x.data[o];
  }
}
void store_at(const OutView& x, i64 o, float value) {
  switch (x.dtype) {
    case Dtype::bf16: static_cast<bf16*>(x.bits)[o] = bf16(value); break;
    case Dtype::fp16: static_cast<fp16*>(x.bits)[o] = fp16(value); break;
    default: x.data[o] = value;
  }
}

int workers_for(const Options& opt, i64 items) {
  const int t = resolve_threads(opt);
  return static_cast<int>(items < t ? items : t);
}

// Runs body(item, scratch) for item in [0, items) on `workers` threads. Each item is
// done entirely by one thread, so results do not depend on the thread count.
template <class Body>
void parallel_items(i64 items, int workers, const ScratchBlocks& blocks, Body body) {
#pragma omp parallel num_threads(workers)
  {
    const WorkerScratch scratch = blocks.worker(omp_get_thread_num());
#pragma omp for schedule(dynamic, 1)
    for (i64 item = 0; item < items; ++item) body(item, scratch);
  }
}

// Rows far apart, copied back to back once per call. Hugging Face models pass
// (B, H, N, D) views of (B, N, H, D) projections: rows H·D elements apart. Read in place, a
// tile's rows at such a stride fall in a few L1 sets and defeat the L2 stream prefetcher;
// the forward packed V per tile and gathered K by broadcasts, the backward packed Q and dout
// per (key tile, query tile), ~9 % of the call at B = 1, H = 8, N = 2048, D = 64 on Zen 3
// (docs/performance.md, "Transposed views: copied once per call"). A tensor read by at
// least kCopyMinReads items is copied instead, by all workers, in its own dtype: the kernel
// then reads exactly what a contiguous call gives it, so the bits are the contiguous call's.
// The copy costs one read and one write of the tensor, O(N·D), never O(N²); a tensor read
// fewer times (decoding reads K and V once) stays in place. The copies of one call take at
// most strided_copy_limit_bytes() (512 MiB unless a test lowers it): the copy doubles the
// memory of what it copies, and past that a call's inputs stay where they are and run the
// ~9 % slower strided reads rather than risk an allocation the caller did not plan for
// (N = 32768, H = 32, D = 128 in fp32 is 512 MiB a tensor). Tensors are offered in the
// order the profile ranks them (the forward: V, then K, then Q), each taken if it still fits.
constexpr i64 kCopyMinReads = 4;

// Whether x's (b, h) rows already lie back to back: unit stride along D and at most a padded
// row apart (kernel/operands.inl's rows_in_place), or a single row.
bool rows_tight(const InView& x) {
  const i64 D = x.shape[3], padded = ceil_div(D, kPad) * kPad;
  return x.shape[2] <= 1 || (x.stride[3] == 1 && x.stride[2] >= D && x.stride[2] <= padded);
}

// The call's tensors whose rows are not tight and that at least kCopyMinReads items read,
// copied back to back in their own dtype into one buffer, which lives as long as this
// object: add() each candidate, then copy() rewrites the views it took (others stay as they
// are). One allocation per call, made before the parallel copy (no allocation failure
// escapes an OpenMP region): separate ones were each given fresh pages by malloc, whose page
// faults cost as much as the copy itself at N = 1024 (docs/performance.md, "Transposed views").
class TightCopies {
 public:
  TightCopies() = default;
  TightCopies(const TightCopies&) = delete;
  TightCopies& operator=(const TightCopies&) = delete;

  void add(InView& x, i64 reads) {
    if (rows_tight(x) || reads < kCopyMinReads) return;
    const i64 bytes = (x.numel() * x.element_bytes() + 63) / 64 * 64;
    if (bytes_ + bytes > limit_) return;
    views_.push_back({&x, bytes_});
    bytes_ += bytes;
  }

  i64 count() const { return static_cast<i64>(views_.size()); }

  void copy(int workers) {
    if (views_.empty()) return;
    block_ = PooledBlock(bytes_);
    strided_copy_byte_count.fetch_add(bytes_, std::memory_order_relaxed);
#pragma omp parallel num_threads(workers)
    for (const Copy& c : views_) {
      const InView& x = *c.view;
      // Named, not a structured binding: clang (the fuzz build) cannot capture those in OpenMP regions.
      const i64 B = x.shape[0], H = x.shape[1], N = x.shape[2], D = x.shape[3];
      const i64 size = x.element_bytes(), rows = B * H * N;
      const auto* from =
          static_cast<const std::byte*>(x.dtype == Dtype::f32 ? static_cast<const void*>(x.data) : x.bits);
      std::byte* to = block_.data() + c.at;
#pragma omp for schedule(static) nowait
      for (i64 row = 0; row < rows; ++row) {
        const std::byte* src = from + off4(x, row / (H * N), row / N % H, row % N, 0) * size;
        std::byte* dst = to + row * D * size;
        if (x.stride[3] == 1) {
          std::memcpy(dst, src, static_cast<std::size_t>(D * size));
        } else {
          for (i64 d = 0; d < D; ++d)
            std::memcpy(dst + d * size, src + d * x.stride[3] * size, static_cast<std::size_t>(size));
        }
      }
    }
    for (const Copy& c : views_) {
      InView& x = *c.view;
      const auto [B, H, N, D] = x.shape;
      x.stride = {H * N * D, N * D, D, 1};
      if (x.dtype == Dtype::f32)
        x.data = reinterpret_cast<const float*>(block_.data() + c.at);
      else
        x.bits = block_.data() + c.at;
    }
  }

 private:
  struct Copy {
    InView* view;  // rewritten by copy() to the copy at block_.data() + at
    i64 at;        // bytes into the buffer
  };
  std::vector<Copy> views_;
  i64 bytes_ = 0;  // of the copies taken so far (their total, under limit_)
  const i64 limit_ = strided_copy_limit_bytes();
  PooledBlock block_;
};

// K or V packed once per call where the kernel reads it packed (the 16-bit engine forward's
// Vᵀ, and fp16's K split into bf16 hi + lo: fast.hpp's forward_pack_layout) and enough items
// read each head's K and V (PackLayout::min_items): packed per item, each lane tile of a head would transpose
// the same V again (20 % of a bf16 forward's time at N = 4096, D = 64) and split the same K
// (15 % of an fp16 forward's). Each at most strided_copy_limit_bytes() (the same cap as the
// strided copies, for the same reason); above it the kernel packs per tile, with the same bits.
class OperandPack {
 public:
  OperandPack() = default;
  OperandPack(const OperandPack&) = delete;
  OperandPack& operator=(const OperandPack&) = delete;
  // limit: the bytes it may take (a KV-cache call's sequences share one strided_copy_limit_bytes()).
  void pack(const FastKernels& kern, const Problem& p, Tensors& t, PackedOperand which, i64 items_per_head, int workers,
            i64 limit = strided_copy_limit_bytes()) {
    const PackLayout layout = kern.forward_pack_layout(p, t, which);
    if (layout.per_head == 0 || items_per_head < layout.min_items) return;
    const i64 heads = p.B * p.Hkv, bytes = heads * layout.per_head * 2;
    if (bytes > limit) return;
    bytes_ = bytes;
    block_ = PooledBlock(bytes);
    std::byte* const data = block_.data();
    const i64 tiles = ceil_div(p.Nk, kTileCols);
    finite_.assign(static_cast<std::size_t>(heads * tiles), 0);
    std::vector<std::uint16_t> scratch(static_cast<std::size_t>(workers * layout.scratch));
#pragma omp parallel for num_threads(workers) schedule(static)
    for (i64 x = 0; x < heads * tiles; ++x) {
      const i64 head = x / tiles, b = head / p.Hkv, g = head % p.Hkv;
      finite_[static_cast<std::size_t>(x)] =
          kern.forward_pack_tile(p, t, which, b, g, x % tiles * kTileCols, data + head * layout.per_head * 2, layout.ld,
                                 scratch.data() + omp_get_thread_num() * layout.scratch);
    }
    (which == PackedOperand::k ? t.k_packed : t.v_packed) = {data, layout.ld, layout.per_head, tiles, finite_.data()};
  }
  bool packed() const { return bytes_ > 0; }
  i64 bytes() const { return bytes_; }

 private:
  i64 bytes_ = 0;  // of the packed operand, 0 until it is packed
  PooledBlock block_;
  std::vector<std::uint8_t> finite_;
};

// ∂L/∂sinks (merge.hpp's sink_grad per head, rows b-major): the keys' gradients need nothing
// more, as P recomputed from an lse that holds the sink is already the sink-aware softmax.
void sink_grads(const Problem& p, const View3<const float>& lse, const std::vector<float>& delta,
                const View1<float>& dsinks) {
  for (i64 h = 0; h < p.Hq; ++h)
    dsinks.data[h * dsinks.stride[0]] = static_cast<float>(sink_grad(
        p.sinks.data[h * p.sinks.stride[0]], p.B * p.Nq,
        [&](i64 r) { return lse.data[r / p.Nq * lse.stride[0] + h * lse.stride[1] + r % p.Nq * lse.stride[2]]; },
        [&](i64 r) { return delta[static_cast<std::size_t>((r / p.Nq * p.Hq + h) * p.Nq + r % p.Nq)]; }));
}

// Split-KV: with few items (decoding: a handful of query rows per kv head) the keys are
// cut into splits whose partial results are merged by their lse. Decided by the shape
// alone, never by the thread count, so the bits do not depend on the threads either; so
// the target is the item count a many-core CPU needs, not this machine's: 64 equal items
// keep 2, 4, 8, 16, 32 or 64 threads all busy (a decoding step's 8 kv heads, unsplit, keep
// 8 of 16 cores busy). What a split costs is its partial row and the merge's read of
// it: Dv floats per lane against the split's ≥ 2048 keys of K and V.
constexpr i64 kSplitItems = 64;   // split a call with fewer items than this, towards this many
constexpr i64 kSplitKeys = 2048;  // ... into splits of at least this many keys
constexpr i64 kMaxSplits = 16;

// The one-pass backward's scratch per worker (its dQ: group·Nq rows of Dk) at most this
// many floats (16 MiB): group·Nq up to 32768 rows at D = 128.
constexpr i64 kOnePassMaxFloats = i64{4} << 20;

i64 kv_splits(i64 Nk, i64 items) {
  if (items >= kSplitItems || Nk < 2 * kSplitKeys) return 1;
  return std::min(kMaxSplits, std::min(ceil_div(kSplitItems, items), Nk / kSplitKeys));
}

// Kv heads per forward item. On a tokens-major cache ((B, N, Hkv, D): a key's rows of every head
// side by side, each view's head stride under its row stride) an item of one head reads a few lines
// of each page, and the heads' items meet in a page only when the threads happen to take them close
// together; the decoding loop instead takes several heads' passes tile by tile in one item
// (ForwardItem::heads, kernel/decode.inl's heads_item), reading each tile's pages once, nearly front
// to back. Grouping moves no bit (each head's arithmetic is its own item's), so it may follow the
// thread count: the most heads, a divisor of Hkv (equal items) and at most kMaxItemHeads, that leave
// kItemsPerWorker of the call's head_items (items of one head each) to every thread.
// A heads-major paged cache ((blocks, Hkv, rows, D), vLLM's order) whose head pieces (a head's rows
// of a block) are short reads the same way: a grouped tile reads its blocks whole, front to back,
// where items of one head read a block's pieces far apart in time. Measured with 32 / 8 heads, 32768
// keys, two threads (docs/performance.md): on AMD Zen 3 pieces of 1 and 2 KiB decode 1.1-1.5x faster
// grouped, 4 KiB within noise to 1.1x, 8 and 16 KiB within noise to 0.9x; on an Intel Xeon (Sapphire
// Rapids class) 2 KiB 1.2x, 4 KiB 1.3x, 8 KiB 1.0-1.2x, 16 KiB 1.06-1.10x. So up to
// short_piece_bytes(): 16 KiB on Intel's CPUs, 4 KiB on the others (AMD's, and Arm's, unmeasured).
constexpr i64 kItemsPerWorker = 2;
i64 item_heads(const FastKernels& kern, const Problem& p, const Tensors& t, i64 head_items, int threads) {
  const bool tokens_major = t.k.stride[1] < t.k.stride[2] && t.v.stride[1] < t.v.stride[2];
  const i64 element_bytes = t.codes.kind != KvCodes::Kind::none ? 1 : t.k.element_bytes();  // codes: bytes
  const bool short_pieces =
      t.pages.table != nullptr && t.pages.rows * std::max(p.Dk, p.Dv) * element_bytes <= short_piece_bytes();
  // Where the decoding loop takes the item: kern.paged_lanes lanes (none: 0), blocks it reads (a
  // quantized cache's other blocks go to the tiled loop, one head at a time).
  const bool decoding =
      p.group * p.Nq <= kern.paged_lanes && (t.pages.table == nullptr || t.pages.rows % kDecodeBlockRows == 0);
  if (!(tokens_major || short_pieces) || !decoding) return 1;
  for (i64 heads = std::min(p.Hkv, kMaxItemHeads); heads > 1; --heads)
    if (p.Hkv % heads == 0 && head_items / heads >= kItemsPerWorker * threads) return heads;
  return 1;
}

// Row `row` = (b, kv head, lane) of a split call: its splits' partial results (part_out, part_lse:
// (splits, B, Hkv, lanes[, Dv])) merged by merge_row (attention/merge.hpp).
void merge_split_row(const Problem& p, const Tensors& t, i64 splits, i64 lanes, const float* part_out,
                     const float* part_lse, i64 row) {
  const i64 stride = p.B * p.Hkv * lanes;  // between splits, in lanes
  const i64 bg = row / lanes, lane = row % lanes, b = bg / p.Hkv, g = bg % p.Hkv;
  const i64 h = g * p.group + lane / p.Nq, i = lane % p.Nq;
  // A sink is one more part: lse = the sink's logit, out = 0 (no value), merged once.
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  const float sink = p.has_sinks ? p.sinks.data[h * p.sinks.stride[0]] : kNegInf;
  const float lse = merge_row(
      sink == kNegInf ? splits : splits + 1, p.Dv,
      [&](i64 s) { return s == splits ? sink : part_lse[s * stride + row]; },
      [&](i64 s, i64 e) { return s == splits ? 0.0f : part_out[(s * stride + row) * p.Dv + e]; },
      [&](i64 e, float x) { store_at(t.out_w, off4(t.out_w, b, h, i, e), x); });
  if (!t.lse_w.empty()) t.lse_w(b, h, i) = lse;
}

void merge_splits(const Problem& p, const Tensors& t, i64 splits, i64 lanes, const std::vector<float>& part_out,
                  const std::vector<float>& part_lse, int workers) {
  const i64 rows = p.B * p.Hkv * lanes;
#pragma omp parallel for num_threads(workers) schedule(static)
  for (i64 row = 0; row < rows; ++row) merge_split_row(p, t, splits, lanes, part_out.data(), part_lse.data(), row);
}

}  // namespace

i64 short_piece_bytes() { return cpu_features().intel ? 16384 : 4096; }  // why: item_heads
}  // namespace detail

BufferPoolBytes buffer_pool_bytes() { return detail::block_pool().bytes(); }
std::int64_t release_buffers() { return detail::block_pool().release(); }

namespace detail {
namespace {

// A 16-bit tensor widened into an fp32 one of the same (contiguous) shape, and back (rounded):
// the reference kernel on 16-bit calls, which runs the fp64 oracle on the widened inputs.
template <class H>
std::vector<float> widened(const View4<const H>& x) {
  std::vector<float> f(static_cast<std::size_t>(x.numel()));
  const auto [B, H_, N, D] = x.shape;
  std::size_t at = 0;
  for (i64 a = 0; a < B; ++a)
    for (i64 h = 0; h < H_; ++h)
      for (i64 n = 0; n < N; ++n)
        for (i64 d = 0; d < D; ++d) f[at++] = static_cast<float>(x(a, h, n, d));
  return f;
}
template <class H>
void round_into(const std::vector<float>& f, const View4<H>& x) {
  const auto [B, H_, N, D] = x.shape;
  std::size_t at = 0;
  for (i64 a = 0; a < B; ++a)
    for (i64 h = 0; h < H_; ++h)
      for (i64 n = 0; n < N; ++n)
        for (i64 d = 0; d < D; ++d) x(a, h, n, d) = H(f[at++]);
}

template <class T>
void forward_reference(View4<const T> q, View4<const T> k, View4<const T> v, View4<T> out, View3<float> lse,
                       const Options& opt) {
  if constexpr (std::is_same_v<T, float>) {
    reference::forward<float, double>(q, k, v, out, lse, opt);
  } else {
    validate_forward<T>(q, k, v, out, lse, opt);  // every check on the caller's views, before anything is written
    std::vector<float> qf = widened(q), kf = widened(k), vf = widened(v), of(static_cast<std::size_t>(out.numel()));
    reference::forward<float, double>(contiguous(qf.data(), q.shape), contiguous(kf.data(), k.shape),
                                      contiguous(vf.data(), v.shape), contiguous(of.data(), out.shape), lse, opt);
    round_into(of, out);
  }
}

template <class T>
void backward_reference(View4<const T> q, View4<const T> k, View4<const T> v, View4<const T> out,
                        View3<const float> lse, View4<const T> dout, View4<T> dq, View4<T> dk, View4<T> dv,
                        const Options& opt) {
  if constexpr (std::is_same_v<T, float>) {
    reference::backward<float, double>(q, k, v, out, lse, dout, dq, dk, dv, opt);
  } else {
    validate_backward<T>(q, k, v, out, lse, dout, dq, dk, dv, opt);
    std::vector<float> qf = widened(q), kf = widened(k), vf = widened(v), of = widened(out), df = widened(dout);
    std::vector<float> dqf(static_cast<std::size_t>(dq.numel())), dkf(static_cast<std::size_t>(dk.numel())),
        dvf(static_cast<std::size_t>(dv.numel()));
    reference::backward<float, double>(contiguous(qf.data(), q.shape), contiguous(kf.data(), k.shape),
                                       contiguous(vf.data(), v.shape), contiguous(of.data(), out.shape), lse,
                                       contiguous(df.data(), dout.shape), contiguous(dqf.data(), dq.shape),
                                       contiguous(dkf.data(), dk.shape), contiguous(dvf.data(), dv.shape), opt);
    round_into(dqf, dq);
    round_into(dkf, dk);
    round_into(dvf, dv);
  }
}

void run_forward(Problem& p, Tensors& t, const Options& opt, PlanRecord& record);

// The one forward for every dtype: T is float, bf16 or fp16; the kernel reads the dtype
// from the Problem and the Tensors.
template <class T>
void forward_any(View4<const T> q, View4<const T> k, View4<const T> v, View4<T> out, View3<float> lse,
                 const Options& opt) {
  PlanRecord record(opt, "forward", dtype_of<T>());
  if (opt.kernel == Kernel::reference) {
    forward_reference<T>(q, k, v, out, lse, opt);
    return record.finish();
  }
  Problem p = validate_forward<T>(q, k, v, out, lse, opt);
  Tensors t;
  t.q = q, t.k = k, t.v = v, t.out_w = out, t.lse_w = lse;
  run_forward(p, t, opt, record);
}

// The forward of a validated call: its work items over the threads, split-KV and its merge, the
// per-call copies and packings, and the plan. (A KV cache's sequences run in forward_cache_sequences.)
void run_forward(Problem& p, Tensors& t, const Options& opt, PlanRecord& record) {
  const FastKernels& kern = kernels_for(opt);

  // Items: ([a key split,] b, kv head, a tile of query lanes over the group's heads), split-major:
  // the threads take one key range of every head before the next range. Where a head's rows are
  // strided (a tokens-major (B, N, Hkv, D) cache: one head's row every Hkv·D elements), the heads
  // of one range share pages and are read close together in time; taken head by head, the items swept each
  // head's rows alone, a few lines of each page, and read them 1.2-1.6 × slower (docs/performance.md,
  // "Decoding from an 8-bit KV cache, and the cache's layout"). Each item is still done whole by one
  // thread and the splits merge in their order: the bits do not depend on the item order.
  // On a tokens-major cache an item may take several kv heads (item_heads), their lanes and keys
  // as they would be one by one. Decided on the strides as passed: the strided copies below start
  // at kCopyMinReads lane tiles, a grouped call has one.
  const i64 lanes = p.group * p.Nq, lane_tiles = ceil_div(lanes, kTileRows);
  const i64 splits = kv_splits(p.Nk, p.B * p.Hkv * lane_tiles);
  const i64 split_keys = ceil_div(ceil_div(p.Nk, kTileCols), splits) * kTileCols;
  const i64 heads = item_heads(kern, p, t, p.B * p.Hkv * lane_tiles * splits, resolve_threads(opt));
  const i64 head_groups = p.Hkv / heads;
  const i64 items = p.B * head_groups * lane_tiles * splits;
  std::vector<float> part_out, part_lse;  // (splits, B, Hkv, lanes[, Dv]) when split
  if (splits > 1) {
    part_out.resize(static_cast<std::size_t>(splits * p.B * p.Hkv * lanes * p.Dv));
    part_lse.resize(static_cast<std::size_t>(splits * p.B * p.Hkv * lanes));
  }
  // Under a causal mask without a left window a lane tile's keys grow with its rows: the
  // threads take each head's tiles last row first, so the items left when the queue runs
  // dry are the cheap ones, and no thread finishes one long tile while the others idle.
  // Each item is still done whole by one thread: the bits do not depend on the order.
  const bool longest_first = p.causal && p.window_left < 0;
  const int workers = workers_for(opt, items);
  // Every lane tile of a kv head reads all of its K and V. Q is read once, but its lanes
  // are gathered row by row, and from far-apart rows that gather cost more (2 % of the
  // samples) than the copy: Q goes with K and V. Offered in the order of what each saved
  // (V packed per tile 6.5 % of the samples, K 2.6 %, Q 1.6 %), for the memory cap.
  TightCopies copies;
  copies.add(t.v, lane_tiles), copies.add(t.k, lane_tiles), copies.add(t.q, lane_tiles);
  copies.copy(workers);
  OperandPack v_pack, k_pack;
  v_pack.pack(kern, p, t, PackedOperand::v, lane_tiles, workers);
  k_pack.pack(kern, p, t, PackedOperand::k, lane_tiles, workers);
  MaskRowTable mask_rows;  // what each explicit mask row lets through, read once (mask_rows.hpp)
  mask_rows.attach(p, workers);
  const ScratchBlocks blocks(workers, kern.forward_scratch(p, heads));
  std::vector<std::array<i64, 4>> loops(static_cast<std::size_t>(workers));  // [worker][ForwardLoop]
  parallel_items(items, workers, blocks, [&](i64 item, WorkerScratch s) {
    ForwardItem fi;
    const i64 per_split = p.B * head_groups * lane_tiles;
    const i64 sp = item / per_split, bg = item % per_split / lane_tiles, tile = item % lane_tiles;
    fi.b = bg / head_groups, fi.g = bg % head_groups * heads, fi.heads = heads;
    fi.l0 = (longest_first ? lane_tiles - 1 - tile : tile) * kTileRows;
    fi.j_begin = sp * split_keys, fi.j_end = std::min(p.Nk, fi.j_begin + split_keys);
    if (splits > 1) {
      const i64 base = (sp * p.B + fi.b) * p.Hkv + fi.g;
      fi.part_out = part_out.data() + base * lanes * p.Dv, fi.part_lse = part_lse.data() + base * lanes;
    }
    const ForwardLoop loop = kern.forward_item(p, t, fi, s);
    loops[static_cast<std::size_t>(omp_get_thread_num())][static_cast<std::size_t>(loop)] += heads;
  });
  if (splits > 1) merge_splits(p, t, splits, lanes, part_out, part_lse, workers);
  if (Plan* plan = record.get()) {
    plan_forward(*plan, opt, kern, p.dtype, workers, splits, loops);
    plan->heads_per_item = heads;
    plan->strided_copies = copies.count();
    plan->packed_operands = (v_pack.packed() ? 1 : 0) + (k_pack.packed() ? 1 : 0);
  }
  record.finish();
}

// Whether every value of a 16-bit tensor of `rows` rows (B·H·N) is finite: no exponent all ones.
bool all_finite_16(const InView& x, i64 rows, int workers) {
  const auto* bits = static_cast<const std::uint16_t*>(x.bits);
  const std::uint16_t exponent = x.dtype == Dtype::fp16 ? 0x7C00 : 0x7F80;
  const i64 H = x.shape[1], N = x.shape[2], D = x.shape[3];
  bool finite = true;
#pragma omp parallel for num_threads(workers) reduction(&& : finite) schedule(static)
  for (i64 row = 0; row < rows; ++row) {
    const std::uint16_t* r = bits + off4(x, row / (H * N), row / N % H, row % N, 0);
    std::uint16_t all = 0;  // OR over the row of the exponent bits that are all ones
    for (i64 d = 0; d < D; ++d) all |= static_cast<std::uint16_t>((r[d * x.stride[3]] & exponent) == exponent);
    finite = finite && all == 0;
  }
  return finite;
}

template <class T>
void backward_any(View4<const T> q, View4<const T> k, View4<const T> v, View4<const T> out, View3<const float> lse,
                  View4<const T> dout, View4<T> dq, View4<T> dk, View4<T> dv, const Options& opt) {
  PlanRecord record(opt, "backward", dtype_of<T>());
  if (opt.kernel == Kernel::reference) {
    backward_reference<T>(q, k, v, out, lse, dout, dq, dk, dv, opt);
    return record.finish();
  }
  Problem p = validate_backward<T>(q, k, v, out, lse, dout, dq, dk, dv, opt);
  const FastKernels& kern = kernels_for(opt);
  Tensors t;
  t.q = q, t.k = k, t.v = v, t.out = out, t.lse_in = lse, t.dout = dout, t.dq = dq, t.dk = dk, t.dv = dv;

  // delta_i = Σ_e dout_ie out_ie, accumulated in double: O(B·Hq·Nq) memory.
  const i64 rows = p.B * p.Hq * p.Nq;
  std::vector<float> delta(static_cast<std::size_t>(rows));
  {
    const int workers = workers_for(opt, rows);
#pragma omp parallel for num_threads(workers) schedule(static)
    for (i64 row = 0; row < rows; ++row) {
      const i64 b = row / (p.Hq * p.Nq), h = row / p.Nq % p.Hq, i = row % p.Nq;
      double acc = 0.0;
      for (i64 e = 0; e < p.Dv; ++e)
        acc += static_cast<double>(load_at(t.dout, off4(t.dout, b, h, i, e))) *
               static_cast<double>(load_at(t.out, off4(t.out, b, h, i, e)));
      delta[static_cast<std::size_t>(row)] = static_cast<float>(acc);
    }
  }

  if (!opt.dsinks.empty()) sink_grads(p, lse, delta, opt.dsinks);

  // fp16 on AMX tiles: its backward runs on them only for finite inputs (Problem::
  // inputs_finite); one read of each, O(N·D).
  if (engine_backward_needs_finite(kern.engine, p.dtype)) {
    const i64 kv_rows = p.B * p.Hkv * p.Nk;
    const int workers = workers_for(opt, rows);
    p.inputs_finite = all_finite_16(t.q, rows, workers) && all_finite_16(t.dout, rows, workers) &&
                      all_finite_16(t.k, kv_rows, workers) && all_finite_16(t.v, kv_rows, workers);
  }

  // One pass per (b, kv head) where there are items for every thread and its dQ buffer
  // stays small; else the two passes. Same bits either way (fast.hpp), so the choice may
  // depend on the thread count.
  const i64 items = p.B * p.Hkv;
  const i64 item_floats = kern.backward_item_scratch(p);
  const bool one_pass = items >= resolve_threads(opt) && item_floats <= kOnePassMaxFloats;
  const i64 kv_tiles = ceil_div(p.Nk, kTileCols), q_tiles = ceil_div(p.Nq, kTileRows);
  // Both schedules read a head's Q and dout rows once per key tile; the two passes read K
  // and V once per query tile (pass B). The one pass reads them once, but gathers each key
  // tile column by column (pack_transposed), which from far-apart rows cost more (2.5 % of
  // the samples at N = 1024) than the copy: they go with Q and dout there too.
  TightCopies copies;
  copies.add(t.q, kv_tiles), copies.add(t.dout, kv_tiles);
  copies.add(t.k, one_pass ? kv_tiles : q_tiles), copies.add(t.v, one_pass ? kv_tiles : q_tiles);
  copies.copy(workers_for(opt, rows));
  MaskRowTable mask_rows;  // what each explicit mask row lets through, read once (mask_rows.hpp)
  mask_rows.attach(p, workers_for(opt, rows));
  const i64 items_a = p.B * p.Hkv * kv_tiles, items_b = p.B * p.Hq * q_tiles;
  const int workers = one_pass ? workers_for(opt, items) : workers_for(opt, items_a > items_b ? items_a : items_b);
  std::vector<i64> on_engine(static_cast<std::size_t>(workers));  // [worker]: items whose products ran on it
  if (one_pass) {
    const ScratchBlocks blocks(workers, item_floats);
    parallel_items(items, workers, blocks, [&](i64 item, WorkerScratch s) {
      on_engine[static_cast<std::size_t>(omp_get_thread_num())] +=
          kern.backward_item(p, t, delta.data(), item / p.Hkv, item % p.Hkv, s);
    });
  } else {
    const ScratchBlocks blocks(workers, kern.backward_scratch(p));
    parallel_items(items_a, workers, blocks, [&](i64 item, WorkerScratch s) {  // dk, dv
      const i64 b = item / (p.Hkv * kv_tiles), g = item / kv_tiles % p.Hkv, j0 = item % kv_tiles * kTileCols;
      on_engine[static_cast<std::size_t>(omp_get_thread_num())] +=
          kern.backward_kv_tile(p, t, delta.data(), b, g, j0, s);
    });
    parallel_items(items_b, workers, blocks, [&](i64 item, WorkerScratch s) {  // dq
      const i64 b = item / (p.Hq * q_tiles), h = item / q_tiles % p.Hq, i0 = item % q_tiles * kTileRows;
      on_engine[static_cast<std::size_t>(omp_get_thread_num())] +=
          kern.backward_q_tile(p, t, delta.data(), b, h, i0, s);
    });
  }
  if (Plan* plan = record.get()) {
    plan_dispatch(*plan, opt, kern, p.dtype);
    plan->threads = workers;
    plan->one_pass = one_pass;
    plan->backward_items = one_pass ? items : items_a + items_b;
    for (i64 n : on_engine) plan->engine_items += n;
    plan->engine = plan->engine_items > 0 ? kern.engine : Engine16::widened;
    plan->strided_copies = copies.count();
  }
  record.finish();
}

}  // namespace

i64 forward_items(i64 B, i64 Hkv, i64 lanes, i64 Nk) {
  const i64 lane_tiles = ceil_div(lanes, kTileRows);
  return B * Hkv * lane_tiles * kv_splits(Nk, B * Hkv * lane_tiles);
}

// A float cache's sequence: the checks see a paged cache's K and V as one row per head (row stride
// 0: their shapes, strides and aliasing), since its rows do not lie at one stride; the cache and
// its block table are kvcache.cpp's to check.
template <class T>
CacheSequence cache_sequence(View4<const T> q, View4<const T> k, View4<const T> v, const KvPages& pages, View4<T> out,
                             View3<float> lse, const Options& opt) {
  View4<const T> k_row = k, v_row = v;
  if (pages.table != nullptr) k_row.stride[2] = v_row.stride[2] = 0;
  CacheSequence seq{validate_forward<T>(q, k_row, v_row, out, lse, opt), {}};
  seq.t.pages = pages;
  seq.t.q = q, seq.t.k = k, seq.t.v = v, seq.t.out_w = out, seq.t.lse_w = lse;
  return seq;
}
template CacheSequence cache_sequence<float>(View4<const float>, View4<const float>, View4<const float>, const KvPages&,
                                             View4<float>, View3<float>, const Options&);
template CacheSequence cache_sequence<bf16>(View4<const bf16>, View4<const bf16>, View4<const bf16>, const KvPages&,
                                            View4<bf16>, View3<float>, const Options&);
template CacheSequence cache_sequence<fp16>(View4<const fp16>, View4<const fp16>, View4<const fp16>, const KvPages&,
                                            View4<fp16>, View3<float>, const Options&);

// A quantized cache's sequence: validation sees K and V by their shapes alone (views of q's first
// element, every stride 0): it takes no byte codes, and kvcache.cpp checks the codes, their scales
// and their disjointness from out and lse.
template <class T>
CacheSequence cache_sequence(View4<const T> q, View4<const std::uint8_t> k, View4<const std::uint8_t> v,
                             const KvPages& pages, const KvCodes& codes, View4<T> out, View3<float> lse,
                             const Options& opt) {
  const View4<const T> k_shape{q.data, k.shape, {0, 0, 0, 0}}, v_shape{q.data, v.shape, {0, 0, 0, 0}};
  CacheSequence seq{validate_forward<T>(q, k_shape, v_shape, out, lse, opt), {}};
  seq.t.pages = pages;
  seq.t.codes = codes;
  auto bytes = [&](const View4<const std::uint8_t>& x) {  // the codes as an input whose `bits` the loop reads
    InView in;
    in.shape = x.shape, in.stride = x.stride, in.bits = x.data;
    in.dtype = seq.p.dtype;  // unread: KvCodes says what the bytes are
    return in;
  };
  seq.t.q = q, seq.t.k = bytes(k), seq.t.v = bytes(v), seq.t.out_w = out, seq.t.lse_w = lse;
  return seq;
}
template CacheSequence cache_sequence<float>(View4<const float>, View4<const std::uint8_t>, View4<const std::uint8_t>,
                                             const KvPages&, const KvCodes&, View4<float>, View3<float>,
                                             const Options&);
template CacheSequence cache_sequence<bf16>(View4<const bf16>, View4<const std::uint8_t>, View4<const std::uint8_t>,
                                            const KvPages&, const KvCodes&, View4<bf16>, View3<float>, const Options&);
template CacheSequence cache_sequence<fp16>(View4<const fp16>, View4<const std::uint8_t>, View4<const std::uint8_t>,
                                            const KvPages&, const KvCodes&, View4<fp16>, View3<float>, const Options&);

// Every sequence's items in one pool: (sequence, key split, kv head, lane tile), each sequence
// split by the rule sdpa::forward applies to it alone (kv_splits: its shape, never the thread
// count), its splits' parts in its own buffer, laid out as run_forward lays out a batch of one's,
// and merged the same way: each sequence's bits are its own, whatever the threads and the batch.
// The threads take the items costliest first, so a batch of very different lengths keeps every
// thread busy until the short items run out together.
void forward_cache_sequences(const std::vector<CacheSequence>& seqs, const Options& opt, Plan* plan) {
  const FastKernels& kern = kernels_for(opt);
  struct Parts {
    i64 lanes = 0, lane_tiles = 1, splits = 1, split_keys = 0;
    std::vector<float> out, lse;  // (splits, Hkv, lanes[, Dv]) when split
  };
  struct Item {
    std::size_t seq;
    i64 g, heads, l0, split, cost;
  };
  std::vector<Parts> parts(seqs.size());
  std::vector<Item> items;
  i64 scratch = 0, most_splits = 1, most_heads = 1, head_items = 0;
  for (std::size_t s = 0; s < seqs.size(); ++s) {
    const Problem& p = seqs[s].p;
    Parts& pt = parts[s];
    if (p.B != 1) __builtin_trap();  // one sequence each
    pt.lanes = p.group * p.Nq, pt.lane_tiles = ceil_div(pt.lanes, kTileRows);
    pt.splits = kv_splits(p.Nk, p.Hkv * pt.lane_tiles);
    pt.split_keys = ceil_div(ceil_div(p.Nk, kTileCols), pt.splits) * kTileCols;
    head_items += p.Hkv * pt.lane_tiles * pt.splits;
  }
  // Kv heads per item (item_heads: a tokens-major cache's, a paged one's short blocks), by the items of
  // the whole pool.
  const int threads = resolve_threads(opt);
  for (std::size_t s = 0; s < seqs.size(); ++s) {
    const Problem& p = seqs[s].p;
    Parts& pt = parts[s];
    if (pt.splits > 1) {
      pt.out.resize(static_cast<std::size_t>(pt.splits * p.Hkv * pt.lanes * p.Dv));
      pt.lse.resize(static_cast<std::size_t>(pt.splits * p.Hkv * pt.lanes));
    }
    const i64 heads = item_heads(kern, p, seqs[s].t, head_items, threads);
    for (i64 sp = 0; sp < pt.splits; ++sp)  // split-major, as run_forward's items (why: there)
      for (i64 g = 0; g < p.Hkv; g += heads)
        for (i64 l0 = 0; l0 < pt.lanes; l0 += kTileRows) {
          const i64 keys = std::min(p.Nk, (sp + 1) * pt.split_keys) - sp * pt.split_keys;
          items.push_back({s, g, heads, l0, sp, keys * std::min(kTileRows, pt.lanes - l0) * heads});
        }
    scratch = std::max(scratch, kern.forward_scratch(p, heads));
    most_heads = std::max(most_heads, heads);
    most_splits = std::max(most_splits, pt.splits);
  }
  std::stable_sort(items.begin(), items.end(), [](const Item& a, const Item& b) { return a.cost > b.cost; });
  const int workers = workers_for(opt, static_cast<i64>(items.size()));
  // A sequence whose lane tiles are many (a chunk of prefill) has its V, and an 8-bit cache's K,
  // packed once as run_forward packs a call's (OperandPack; the same bits as per tile): each lane
  // tile would otherwise transpose the same V and widen the same codes again.
  std::vector<Tensors> tensors;
  tensors.reserve(seqs.size());
  for (const CacheSequence& seq : seqs) tensors.push_back(seq.t);
  // All of them within the one cap on a call's copies, first come first packed.
  std::vector<OperandPack> packs(2 * seqs.size());
  i64 packed_operands = 0, packed_bytes = 0;
  for (std::size_t s = 0; s < 2 * seqs.size(); ++s) {
    const PackedOperand which = s % 2 == 0 ? PackedOperand::v : PackedOperand::k;
    packs[s].pack(kern, seqs[s / 2].p, tensors[s / 2], which, parts[s / 2].lane_tiles, workers,
                  strided_copy_limit_bytes() - packed_bytes);
    packed_operands += packs[s].packed() ? 1 : 0;
    packed_bytes += packs[s].bytes();
  }
  const ScratchBlocks blocks(workers, scratch);
  std::vector<std::array<i64, 4>> loops(static_cast<std::size_t>(workers));  // [worker][ForwardLoop]
  parallel_items(static_cast<i64>(items.size()), workers, blocks, [&](i64 x, WorkerScratch sc) {
    const Item& it = items[static_cast<std::size_t>(x)];
    const CacheSequence& seq = seqs[it.seq];
    Parts& pt = parts[it.seq];
    ForwardItem fi;
    fi.g = it.g, fi.heads = it.heads, fi.l0 = it.l0;
    fi.j_begin = it.split * pt.split_keys, fi.j_end = std::min(seq.p.Nk, fi.j_begin + pt.split_keys);
    if (pt.splits > 1) {
      const i64 base = it.split * seq.p.Hkv + it.g;
      fi.part_out = pt.out.data() + base * pt.lanes * seq.p.Dv, fi.part_lse = pt.lse.data() + base * pt.lanes;
    }
    const ForwardLoop loop = kern.forward_item(seq.p, tensors[it.seq], fi, sc);
    loops[static_cast<std::size_t>(omp_get_thread_num())][static_cast<std::size_t>(loop)] += it.heads;
  });
  std::vector<std::pair<std::size_t, i64>> rows;  // (sequence, row) of every split sequence
  for (std::size_t s = 0; s < seqs.size(); ++s)
    if (parts[s].splits > 1)
      for (i64 row = 0; row < seqs[s].p.Hkv * parts[s].lanes; ++row) rows.emplace_back(s, row);
  const auto merges = static_cast<i64>(rows.size());
#pragma omp parallel for num_threads(workers) schedule(static)
  for (i64 r = 0; r < merges; ++r) {
    const auto [s, row] = rows[static_cast<std::size_t>(r)];
    merge_split_row(seqs[s].p, seqs[s].t, parts[s].splits, parts[s].lanes, parts[s].out.data(), parts[s].lse.data(),
                    row);
  }
  if (plan != nullptr && !seqs.empty()) {
    plan_forward(*plan, opt, kern, seqs.front().p.dtype, workers, most_splits, loops);
    plan->heads_per_item = most_heads;
    plan->sequences = static_cast<i64>(seqs.size());
    plan->packed_operands = packed_operands;
  }
}
}  // namespace detail

void forward(View4<const float> q, View4<const float> k, View4<const float> v, View4<float> out, View3<float> lse,
             const Options& opt) {
  detail::forward_any<float>(q, k, v, out, lse, opt);
}
void forward(View4<const bf16> q, View4<const bf16> k, View4<const bf16> v, View4<bf16> out, View3<float> lse,
             const Options& opt) {
  detail::forward_any<bf16>(q, k, v, out, lse, opt);
}
void forward(View4<const fp16> q, View4<const fp16> k, View4<const fp16> v, View4<fp16> out, View3<float> lse,
             const Options& opt) {
  detail::forward_any<fp16>(q, k, v, out, lse, opt);
}

void backward(View4<const float> q, View4<const float> k, View4<const float> v, View4<const float> out,
              View3<const float> lse, View4<const float> dout, View4<float> dq, View4<float> dk, View4<float> dv,
              const Options& opt) {
  detail::backward_any<float>(q, k, v, out, lse, dout, dq, dk, dv, opt);
}
void backward(View4<const bf16> q, View4<const bf16> k, View4<const bf16> v, View4<const bf16> out,
              View3<const float> lse, View4<const bf16> dout, View4<bf16> dq, View4<bf16> dk, View4<bf16> dv,
              const Options& opt) {
  detail::backward_any<bf16>(q, k, v, out, lse, dout, dq, dk, dv, opt);
}
void backward(View4<const fp16> q, View4<const fp16> k, View4<const fp16> v, View4<const fp16> out,
              View3<const float> lse, View4<const fp16> dout, View4<fp16> dq, View4<fp16> dk, View4<fp16> dv,
              const Options& opt) {
  detail::backward_any<fp16>(q, k, v, out, lse, dout, dq, dk, dv, opt);
}

}  // namespace sdpa
