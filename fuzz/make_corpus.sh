#!/usr/bin/env bash
# make_corpus.sh — (re)writes the seed corpus fuzz/corpus/npy/: a few small .npy
# files, valid and invalid, built byte by byte (no NumPy needed). Deterministic:
# running it again gives the same files.
set -euo pipefail
out=$(cd "$(dirname "$0")" && pwd)/corpus/npy
mkdir -p "$out"

# npy FILE MAJOR HEADER DATA [raw]
#   HEADER is padded with spaces and given its '\n' so the data starts at a multiple
#   of 64, unless a fifth argument "raw" says to use it as it is. DATA is printf
#   escapes, e.g. '\x00\x00\x80\x3f'.
npy() {
  local file=$1 major=$2 header=$3 data=$4 raw=${5:-}
  local prefix=10
  [ "$major" -ne 1 ] && prefix=12
  if [ -z "$raw" ]; then
    while [ $(( (prefix + ${#header} + 1) % 64 )) -ne 0 ]; do header+=' '; done
    header+=$'\n'
  fi
  local n=${#header}
  {
    printf '\x93NUMPY'
    printf "\\x$(printf %02x "$major")\\x00"
    printf "\\x$(printf %02x $((n & 255)))\\x$(printf %02x $(((n >> 8) & 255)))"
    if [ "$major" -ne 1 ]; then
      printf "\\x$(printf %02x $(((n >> 16) & 255)))\\x$(printf %02x $(((n >> 24) & 255)))"
    fi
    printf '%s' "$header"
    printf "$data"
  } > "$out/$file"
}
dict() { echo "{'descr': '$1', 'fortran_order': ${3:-False}, 'shape': $2, }"; }

one_f32='\x00\x00\x80\x3f'
six_f32='\x00\x00\x00\x00\x00\x00\x80\x3f\x00\x00\x00\x40\x00\x00\x40\x40\x00\x00\x80\x40\x00\x00\xa0\x40'
four_f32='\x00\x00\x80\x3f\x00\x00\x00\x40\x00\x00\x40\x40\x00\x00\x80\x40'

# Valid.
npy f32_2x3.npy 1 "$(dict '<f4' '(2, 3)')" "$six_f32"
npy f64_scalar.npy 1 "$(dict '<f8' '()')" '\x00\x00\x00\x00\x00\x00\xf8\x3f'
npy bool_5.npy 1 "$(dict '|b1' '(5,)')" '\x01\x00\x01\x01\x00'
npy v2_f32_4d.npy 2 "$(dict '<f4' '(1, 2, 2, 1)')" "$four_f32"
npy v3_u8.npy 3 "$(dict '|u1' '(3,)')" '\x01\x02\x03'
npy empty_0x3.npy 1 "$(dict '<f4' '(0, 3)')" ''
npy old_style.npy 1 "{\"shape\": (2L, 2L), \"fortran_order\": False, \"descr\": \"<f4\"}" "$four_f32"
npy unpadded.npy 1 "{'descr':'<f4','fortran_order':False,'shape':(1,)}"$'\n' "$one_f32" raw
# Invalid, each for one reason.
npy bigendian.npy 1 "$(dict '>f4' '(1,)')" '\x3f\x80\x00\x00'
npy fortran.npy 1 "$(dict '<f4' '(2, 2)' True)" "$four_f32"
npy truncated.npy 1 "$(dict '<f8' '(4,)')" '\x00\x00\x00\x00\x00\x00\xf0\x3f\x00\x00\x00\x00\x00\x00\x00\x40'
npy too_long.npy 1 "$(dict '<f4' '(1,)')" "$four_f32"
npy hostile_shape.npy 1 "$(dict '<f4' '(4611686018427387904, 4)')" "$one_f32"
npy structured.npy 1 "{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (1,), }" "$one_f32"
npy extra_key.npy 1 "{'descr': '<f4', 'fortran_order': False, 'shape': (1,), 'x': (1, 2)}" "$one_f32"
npy header_past_end.npy 2 "$(dict '<f4' '(1,)')" ''
printf '\xff\xff' | dd of="$out/header_past_end.npy" bs=1 seek=10 conv=notrunc status=none
echo "wrote $(ls "$out" | wc -l) seed files to $out"
