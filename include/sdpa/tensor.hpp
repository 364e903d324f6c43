// sdpa/tensor.hpp — a tiny non-owning strided view.
//
// A View is a pointer, a logical shape and element strides. Attention reads
// q/k/v as [B, H, N, D] views; because strides are free, a [B, N, H, D]
// buffer (the layout most models keep) is the same data seen through other
// strides, and no copy is made.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

namespace sdpa {

template <class T, std::size_t Rank>
struct View {
  T* data = nullptr;
  std::array<std::int64_t, Rank> shape{};   // elements per dimension
  std::array<std::int64_t, Rank> stride{};  // in elements, not bytes

  static constexpr std::size_t rank = Rank;

  /// Element at the given indices (no bounds check).
  template <class... I>
  T& operator()(I... idx) const {
    static_assert(sizeof...(I) == Rank, "one index per dimension");
    const std::array<std::int64_t, Rank> ix{static_cast<std::int64_t>(idx)...};
    std::int64_t off = 0;
    for (std::size_t d = 0; d < Rank; ++d) off += ix[d] * stride[d];
    return data[off];
  }

  /// Number of logical elements.
  std::int64_t numel() const {
    std::int64_t n = 1;
    for (auto s : shape) n *= s;
    return n;
  }

  bool empty() const { return data == nullptr; }

  /// A view of const elements over the same memory.
  operator View<const T, Rank>() const { return {data, shape, stride}; }
};

template <class T>
using View1 = View<T, 1>;  // (H): one value per head, e.g. the attention sinks
template <class T>
using View4 = View<T, 4>;  // (B, H, N, D) or a mask (B, H, Nq, Nk)
template <class T>
using View3 = View<T, 3>;  // (B, H, N): the log-sum-exp

/// Row-major (C-order) view of a contiguous buffer.
template <class T, std::size_t R>
View<T, R> contiguous(T* data, const std::array<std::int64_t, R>& shape) {
  View<T, R> v{data, shape, {}};
  std::int64_t s = 1;
  for (std::size_t d = R; d-- > 0;) {
    v.stride[d] = s;
    s *= shape[d];
  }
  return v;
}

/// Same, with the shape written in braces: contiguous(ptr, {B, H, N, D}).
template <class T, std::size_t R>
View<T, R> contiguous(T* data, const std::int64_t (&shape)[R]) {
  std::array<std::int64_t, R> s{};
  for (std::size_t d = 0; d < R; ++d) s[d] = shape[d];
  return contiguous(data, s);
}

/// The [B, H, N, D] view of a contiguous [B, N, H, D] buffer (no copy).
template <class T>
View4<T> from_bnhd(T* data, std::int64_t B, std::int64_t N, std::int64_t H, std::int64_t D) {
  return {data, {B, H, N, D}, {N * H * D, D, H * D, 1}};
}

/// "[2, 8, 128, 64]" — for error messages.
template <std::size_t R>
std::string shape_str(const std::array<std::int64_t, R>& shape) {
  std::string s = "[";
  for (std::size_t d = 0; d < R; ++d) {
    if (d) s += ", ";
    s += std::to_string(shape[d]);
  }
  return s + "]";
}

}  // namespace sdpa
