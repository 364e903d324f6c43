// convert_kernel.inl — bulk bf16/fp16 <-> float conversion, written once and included inside
// one namespace per ISA (convert_{avx2,avx512}.cpp, compiled with that ISA's flags) after the
// ISA's `HalfVec`: kLanes values per vector, and widen / narrow of one vector's worth between
// bf16 or fp16 and floats (half_<isa>.hpp's helpers), and the ISA's 8-bit row encoder
// (quantize_row: quantize_row_scalar where the ISA has none). The tail takes the scalar
// conversion, which rounds the same way (to nearest even).

namespace {
template <class H>
void widen_n(const H* src, float* dst, i64 n) {
  i64 i = 0;
  for (; i + HalfVec::kLanes <= n; i += HalfVec::kLanes) HalfVec::widen(src + i, dst + i);
  for (; i < n; ++i) dst[i] = static_cast<float>(src[i]);
}
template <class H>
void narrow_n(const float* src, H* dst, i64 n) {
  i64 i = 0;
  for (; i + HalfVec::kLanes <= n; i += HalfVec::kLanes) HalfVec::narrow(src + i, dst + i);
  for (; i < n; ++i) dst[i] = H(src[i]);
}
}  // namespace

const ConvertKernels& convert_table() {
  static constexpr ConvertKernels k{widen_n<bf16>, widen_n<fp16>, narrow_n<bf16>, narrow_n<fp16>,
                                    HalfVec::quantize_row};
  return k;
}
