// engine16_absent.cpp — engine16.hpp where its engines are not built: AMX tiles on every
// build without engine16.cpp (aarch64, other CPUs, and x86-64 without its AVX-512 path:
// SDPA_AVX512=OFF), and, except on aarch64 (engine16_neon.cpp), the dot engine and the
// packings too.
//
// The kernel's loops are one template over the table's engine; the widened instantiation
// still names the engines' functions on branches that run only when a call's items take an
// engine, and the engines below are never chosen there (select_dispatch: AMX on x86 alone, the
// dot engine on AVX-512 or aarch64's BF16). Each definition below is that branch's unreachable
// end: it aborts with a message instead of computing anything.
#include <cstdio>
#include <cstdlib>

#include "attention/engine16.hpp"

namespace sdpa::detail::engine16 {
namespace {
[[noreturn]] void absent(const char* what) {
  std::fprintf(stderr, "sdpa: internal error: %s called, but this build has no such engine\n", what);
  std::abort();
}
}  // namespace

namespace amx {
void configure() { absent("engine16::amx::configure"); }
void release() { absent("engine16::amx::release"); }
void gemm(i64, i64, i64, const bf16*, i64, const std::uint32_t*, i64, float*, i64, bool) {
  absent("engine16::amx::gemm");
}
}  // namespace amx

#if !defined(__aarch64__)
namespace dot {
void gemm(i64, i64, i64, const bf16*, i64, const std::uint32_t*, i64, float*, i64, bool) {
  absent("engine16::dot::gemm");
}
}  // namespace dot

void pack_transposed_bf16(const float*, i64, i64, i64, bf16*, i64) { absent("engine16::pack_transposed_bf16"); }
bool pack_rows_in_pairs(const bf16*, i64, i64, i64, i64, std::uint32_t*, i64) {
  absent("engine16::pack_rows_in_pairs");
}
bool pack_transposed_rows(const bf16*, i64, i64, i64, i64, bf16*, i64, std::uint16_t) {
  absent("engine16::pack_transposed_rows");
}
bool split_rows_fp16(const fp16*, i64, i64, i64, i64, i64, bf16*, i64, SplitOrder) {
  absent("engine16::split_rows_fp16");
}
void pack_rows_in_pairs_f32(const float*, i64, i64, i64, i64, std::uint32_t*, i64) {
  absent("engine16::pack_rows_in_pairs_f32");
}
void pack_pairs_transposed_split(const fp16*, i64, i64, i64, i64, std::uint32_t*, i64, SplitOrder) {
  absent("engine16::pack_pairs_transposed_split");
}
bool pack_rows_in_pairs_split(const fp16*, i64, i64, i64, i64, std::uint32_t*, i64, SplitOrder) {
  absent("engine16::pack_rows_in_pairs_split");
}
void pack_transposed_bf16_split(const float*, i64, i64, i64, bf16*, i64) {
  absent("engine16::pack_transposed_bf16_split");
}
void round_rows_bf16_split(const float*, i64, i64, i64, i64, i64, bf16*, i64) {
  absent("engine16::round_rows_bf16_split");
}
void pack_rows_in_pairs_f32_split(const float*, i64, i64, i64, i64, std::uint32_t*, i64) {
  absent("engine16::pack_rows_in_pairs_f32_split");
}
void transpose_f32(const float*, i64, i64, i64, float*, i64) { absent("engine16::transpose_f32"); }
void pack_pairs_transposed(const bf16*, i64, i64, i64, i64, std::uint32_t*, i64) {
  absent("engine16::pack_pairs_transposed");
}
void copy_rows_padded(const bf16*, i64, i64, i64, i64, i64, bf16*, i64) { absent("engine16::copy_rows_padded"); }
void round_rows_bf16(const float*, i64, i64, i64, i64, i64, bf16*, i64) { absent("engine16::round_rows_bf16"); }
#endif

}  // namespace sdpa::detail::engine16
