// sve_width.hpp — the names of one SVE build: each vector length (SDPA_SVE_BITS, 256 or 512) is
// compiled once per per-ISA piece (attention/fast_sve<bits>.cpp, nn/linear_sve<bits>.cpp, with
// -msve-vector-bits=<bits>: src/CMakeLists.txt), into namespace ...::sve<bits>, exporting
// <name>_sve<bits> for the PerIsa tables (common/per_isa.hpp), from one body written once
// (attention/fast_sve.inl, nn/linear_sve.inl).
#pragma once

#if SDPA_SVE_BITS == 256
#define SDPA_SVE_NAMESPACE sve256
#define SDPA_SVE_NAMED(name) name##_sve256
#elif SDPA_SVE_BITS == 512
#define SDPA_SVE_NAMESPACE sve512
#define SDPA_SVE_NAMED(name) name##_sve512
#else
#error "SDPA_SVE_BITS: 256 or 512"
#endif
#if !defined(__ARM_FEATURE_SVE_BITS) || __ARM_FEATURE_SVE_BITS != SDPA_SVE_BITS
#error "compile with -msve-vector-bits equal to SDPA_SVE_BITS"
#endif
