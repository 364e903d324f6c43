// nn/checkpoint.cpp — versioned, checksummed training checkpoints, written atomically.
#include <cstring>
#include <fstream>
#include <iterator>

#include "io/atomic_file.hpp"
#include "nn/train.hpp"

namespace sdpa::nn {

namespace {

constexpr char kMagic[8] = {'S', 'D', 'P', 'A', 'C', 'K', 'P', 'T'};

std::uint64_t fnv1a(const unsigned char* p, std::size_t n) {
  std::uint64_t h = 0xcbf29ce484222325ull;
  for (std::size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 0x100000001b3ull;
  return h;
}

template <class V>
void put(std::vector<unsigned char>& out, const V& v) {
  const auto* b = reinterpret_cast<const unsigned char*>(&v);
  out.insert(out.end(), b, b + sizeof(V));
}

struct Reader {
  const unsigned char* p;
  std::size_t n, at = 0;
  const std::string& path;
  void need(std::size_t k) const {
    if (k > n - at) throw Error("checkpoint '" + path + "': truncated (needs more bytes than the file holds)");
  }
  template <class V>
  V get() {
    need(sizeof(V));
    V v;
    std::memcpy(&v, p + at, sizeof(V));
    at += sizeof(V);
    return v;
  }
  template <class V>
  std::vector<V> vec(std::uint64_t count) {
    if (count > (n - at) / sizeof(V)) need(n + 1);
    std::vector<V> out(count);
    if (count) std::memcpy(out.data(), p + at, count * sizeof(V));
    at += count * sizeof(V);
    return out;
  }
};

}  // namespace

std::vector<unsigned char> encode_checkpoint(const Checkpoint& c) {
  std::vector<unsigned char> payload;
  put(payload, static_cast<std::uint64_t>(c.identity.size()));
  payload.insert(payload.end(), c.identity.begin(), c.identity.end());
  put(payload, static_cast<std::uint64_t>(c.step));
  put(payload, static_cast<std::uint64_t>(c.params.size()));
  for (const auto* a : {&c.params, &c.m, &c.v}) {
    const auto* b = reinterpret_cast<const unsigned char*>(a->data());
    payload.insert(payload.end(), b, b + a->size() * sizeof(float));
  }
  put(payload, static_cast<std::uint64_t>(c.score_ema.size()));
  const auto* e = reinterpret_cast<const unsigned char*>(c.score_ema.data());
  payload.insert(payload.end(), e, e + c.score_ema.size() * sizeof(double));

  // header: magic, version, reserved, payload size; then payload and checksum
  const std::uint32_t version = kCheckpointVersion, reserved = 0;
  const std::uint64_t len = payload.size(), sum = fnv1a(payload.data(), payload.size());
  std::vector<unsigned char> out(24 + payload.size() + 8);
  std::memcpy(out.data(), kMagic, 8);
  std::memcpy(out.data() + 8, &version, 4);
  std::memcpy(out.data() + 12, &reserved, 4);
  std::memcpy(out.data() + 16, &len, 8);
  std::memcpy(out.data() + 24, payload.data(), payload.size());
  std::memcpy(out.data() + 24 + payload.size(), &sum, 8);
  return out;
}

Checkpoint decode_checkpoint(const std::vector<unsigned char>& bytes, const std::string& path) {
  const std::string where = "checkpoint '" + path + "': ";
  if (bytes.size() < 24 || std::memcmp(bytes.data(), kMagic, 8) != 0)
    throw Error(where + "not an sdpa training checkpoint (bad magic)");
  Reader h{bytes.data(), bytes.size(), 8, path};
  const auto version = h.get<std::uint32_t>();
  if (version != kCheckpointVersion)
    throw Error(where + "format version " + std::to_string(version) + ", this sdpa reads version " +
                std::to_string(kCheckpointVersion));
  h.get<std::uint32_t>();
  const auto len = h.get<std::uint64_t>();
  if (len > bytes.size() || bytes.size() - 24 < len || bytes.size() - 24 - len != 8)
    throw Error(where + "truncated or padded: " + std::to_string(bytes.size()) + " bytes, header promises " +
                (len > bytes.size() ? std::string("more") : std::to_string(len + 32)));
  const unsigned char* payload = bytes.data() + 24;
  std::uint64_t sum;
  std::memcpy(&sum, payload + len, 8);
  if (sum != fnv1a(payload, len)) throw Error(where + "checksum mismatch (the file is corrupt)");
  Reader r{payload, len, 0, path};
  Checkpoint c;
  const auto idlen = r.get<std::uint64_t>();
  r.need(idlen);
  c.identity.assign(reinterpret_cast<const char*>(payload + r.at), idlen);
  r.at += idlen;
  c.step = static_cast<i64>(r.get<std::uint64_t>());
  const auto n = r.get<std::uint64_t>();
  c.params = r.vec<float>(n);
  c.m = r.vec<float>(n);
  c.v = r.vec<float>(n);
  c.score_ema = r.vec<double>(r.get<std::uint64_t>());
  if (r.at != len) throw Error(where + "payload has " + std::to_string(len - r.at) + " unexpected trailing bytes");
  return c;
}

void save_checkpoint(const std::string& path, const Checkpoint& c) {
  io::OutputSet out;
  out.add(path, encode_checkpoint(c));
  out.commit();
}

Checkpoint load_checkpoint(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw Error("checkpoint '" + path + "': cannot open for reading");
  std::vector<unsigned char> bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  return decode_checkpoint(bytes, path);
}

}  // namespace sdpa::nn
