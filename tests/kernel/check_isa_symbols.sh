#!/usr/bin/env bash
# Fails if an ISA translation unit defines a weak symbol outside its own namespace:
# the attention kernel's fast_<isa>.cpp.o outside sdpa::detail::<isa>, the projections'
# linear_<isa>.cpp.o outside sdpa::nn::<isa>, convert_<isa>.cpp.o outside sdpa::detail::<isa>
# (convert_avx512bf16.cpp.o: sdpa::detail::avx512bf16, where it has none), the 16-bit engines
# (x86-64's engine16.cpp.o, aarch64's engine16_neon.cpp.o) outside sdpa::detail::engine16, and
# the kernel tests' fast_w16_on_avx2.cpp.o outside sdpa::detail::w16.
# Arguments: the object files of the libraries that hold them (';'-separated ok); every one
# of the build's ISA_OBJECTS (default 10: on x86-64 scalar, avx2, avx512, avx512bf16 and
# engine16; aarch64: scalar, neon, sve256, sve512 and engine16; 5 on x86-64 with
# SDPA_AVX512=OFF) must be among them; other objects are skipped. NM: the nm that reads them
# (a cross build's own).
set -euo pipefail
status=0 checked=0 extra=""
for obj in $(echo "$*" | tr ';' ' '); do
  isa=""  # the namespace's last part where it is not the file name's ISA suffix
  case "$(basename "$obj")" in
    fast_scalar.cpp.o | fast_avx2.cpp.o | fast_avx512.cpp.o) space=detail ;;
    fast_neon.cpp.o | fast_sve256.cpp.o | fast_sve512.cpp.o) space=detail ;;  # sve: with its conversions
    convert_avx2.cpp.o | convert_avx512.cpp.o | convert_neon.cpp.o) space=detail ;;  # the bf16/fp16 helpers
    convert_avx512bf16.cpp.o) space=detail ;;
    linear_scalar.cpp.o | linear_avx2.cpp.o | linear_avx512.cpp.o) space=nn ;;
    linear_neon.cpp.o | linear_sve256.cpp.o | linear_sve512.cpp.o) space=nn ;;
    engine16.cpp.o | engine16_neon.cpp.o) space=detail isa=engine16 ;;
    fast_w16_on_avx2.cpp.o) space=detail ;;  # test-only: checked, not counted among the 10
    *) continue ;;
  esac
  [ -n "$isa" ] || { isa=$(basename "$obj" .cpp.o); isa=${isa#*_}; }
  case "$isa" in
    w16_on_avx2) isa=w16 extra=" (and the tests' W = 16 object)" ;;
    *) checked=$((checked + 1)) ;;
  esac
  # DW.ref.__gxx_personality_v0: a weak pointer to the C++ exception personality routine
  # that some builds (e.g. with sanitizers) emit per object; data, not ISA code.
  # A name the demangler cannot read (GCC 12's c++filt does not know the SVE fixed-length
  # types, __SVE_VLS) stays mangled: its namespace is then the prefix 4sdpa<n><space><n><isa>.
  mangled="4sdpa${#space}${space}${#isa}${isa}"
  leaks=$("${NM:-nm}" -C "$obj" | awk '$2 ~ /^[WVu]$/' |
    grep -v -e "sdpa::${space}::${isa}::" -e "$mangled" -e 'DW\.ref\.__gxx_personality_v0$' || true)
  if [ -n "$leaks" ]; then
    echo "$obj: weak symbols outside sdpa::${space}::${isa}:"; echo "$leaks"; status=1
  fi
done
expected=${ISA_OBJECTS:-10}
[ "$checked" -eq "$expected" ] || { echo "expected $expected ISA objects, found $checked"; exit 1; }
[ "$status" -eq 0 ] && echo "$expected ISA objects${extra} checked, no shared inline code"
exit $status
