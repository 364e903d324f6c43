#!/usr/bin/env bash
# Fails if an ISA translation unit (fast_<isa>.cpp.o) defines a weak symbol outside
# namespace sdpa::detail::<isa>. Arguments: the library's object files (';'-separated ok).
set -euo pipefail
status=0 checked=0
for obj in $(echo "$*" | tr ';' ' '); do
  case "$(basename "$obj")" in
    fast_scalar.cpp.o) isa=scalar ;;
    fast_avx2.cpp.o) isa=avx2 ;;
    fast_avx512.cpp.o) isa=avx512 ;;
    *) continue ;;
  esac
  checked=$((checked + 1))
  # DW.ref.__gxx_personality_v0: a weak pointer to the C++ exception personality routine
  # that some builds (e.g. with sanitizers) emit per object; data, not ISA code.
  leaks=$(nm -C "$obj" | awk '$2 ~ /^[WVu]$/' | grep -v -e "sdpa::detail::${isa}::" -e 'DW\.ref\.__gxx_personality_v0$' || true)
  if [ -n "$leaks" ]; then
    echo "$obj: weak symbols outside sdpa::detail::${isa}:"; echo "$leaks"; status=1
  fi
done
[ "$checked" -eq 3 ] || { echo "expected 3 ISA objects, found $checked"; exit 1; }
[ "$status" -eq 0 ] && echo "3 ISA objects checked, no shared inline code"
exit $status
