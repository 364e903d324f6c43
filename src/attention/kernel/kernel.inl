// kernel.inl — the attention kernel, written once and compiled once per ISA: each
// fast_<isa>.cpp includes its ISA layer (isa_<isa>.hpp: `kIsa`, the vector type `Vec` of W
// floats, the 16-bit loads, the decoding loop's primitives `Ops`, and the SDPA_FUSED_DECODE /
// SDPA_ENGINE16 features it has), then this file inside namespace sdpa::detail::<isa>, so no
// inline function compiled for one ISA can reach another (kernel.isa_objects_share_no_inline_code).
//
// The pieces, in the order each needs the ones before it:
//   common.inl             visible keys, masks, dropout tiles, the online softmax step, the
//                          scratch arena, the write of a finished row
//   decode.inl             the fused decoding loop (one to eight query lanes), where the ISA has Ops
//   gemm.inl               the fp32 GEMM on Vec
//   operands.inl           score scale and soft-cap; operand rows in place or packed
//   forward_tiled.inl      the forward's general tile loop (FlashAttention-2 structure)
//   forward_few_lanes.inl  the forward for a few lanes where decode.inl does not apply
//   engine16.inl           what the 16-bit engines' loops share (operands, GEMM, tiles)
//   forward_engine16.inl   the forward's tile loop on a 16-bit engine (AMX tiles or vdpbf16ps)
//   forward.inl            the one choice of an item's forward loop
//   backward.inl           the backward's two schedules and their tiles
//   table.inl              the FastKernels tables this unit hands out
//
// Notation: a tile has `br` query rows (r) and `bc` keys (c); i = i0 + r, j = j0 + c.
// Vector dimensions are padded to a multiple of kPad with zeros.

#include "attention/kernel/common.inl"
#ifdef SDPA_FUSED_DECODE
namespace decode {
#include "attention/kernel/decode.inl"
}  // namespace decode
#endif
#include "attention/kernel/gemm.inl"
#include "attention/kernel/operands.inl"
#include "attention/kernel/forward_tiled.inl"
#include "attention/kernel/forward_few_lanes.inl"
#include "attention/kernel/engine16.inl"
#ifdef SDPA_ENGINE16
#include "attention/kernel/forward_engine16.inl"
#endif
#include "attention/kernel/forward.inl"
#include "attention/kernel/backward.inl"
#include "attention/kernel/table.inl"
