// sweep_share.cpp — see sweep_share.hpp.
#include "distributed/sweep_share.hpp"

#include <climits>
#include <cstdint>
#include <cstring>

#include "distributed/ring.hpp"

namespace sdpa::dist {
namespace {

// Rank 0 receives every rank's strings, in rank order. Each rank packs its own as
// [u64 count][u64 length × count][bytes], one MPI_Gatherv.
std::vector<std::string> gather_strings(MPI_Comm comm, const std::vector<std::string>& mine) {
  int rank = 0, size = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  std::vector<char> packed;
  auto put = [&](const void* p, std::size_t n) {
    packed.insert(packed.end(), static_cast<const char*>(p), static_cast<const char*>(p) + n);
  };
  const std::uint64_t count = mine.size();
  put(&count, sizeof count);
  for (const auto& s : mine) {
    const std::uint64_t len = s.size();
    put(&len, sizeof len);
  }
  for (const auto& s : mine) put(s.data(), s.size());
  if (packed.size() > INT_MAX)
    throw Error("sweep: rank " + std::to_string(rank) + "'s runs are " + std::to_string(packed.size()) +
                " bytes, more than one MPI message may hold");
  const int bytes = static_cast<int>(packed.size());
  std::vector<int> sizes(static_cast<std::size_t>(size)), offsets(static_cast<std::size_t>(size));
  MPI_Gather(&bytes, 1, MPI_INT, sizes.data(), 1, MPI_INT, 0, comm);
  std::vector<char> all;
  if (rank == 0) {
    long long total = 0;
    for (int p = 0; p < size; ++p) {
      offsets[static_cast<std::size_t>(p)] = static_cast<int>(total);
      total += sizes[static_cast<std::size_t>(p)];
    }
    if (total > INT_MAX) throw Error("sweep: the ranks' runs are more bytes than one MPI gather may hold");
    all.resize(static_cast<std::size_t>(total));
  }
  MPI_Gatherv(packed.data(), bytes, MPI_CHAR, all.data(), sizes.data(), offsets.data(), MPI_CHAR, 0, comm);
  std::vector<std::string> out;
  if (rank != 0) return out;
  for (int p = 0; p < size; ++p) {
    const char* at = all.data() + offsets[static_cast<std::size_t>(p)];
    std::uint64_t n = 0;
    std::memcpy(&n, at, sizeof n);
    std::vector<std::uint64_t> lens(n);
    std::memcpy(lens.data(), at + sizeof n, n * sizeof(std::uint64_t));
    const char* body = at + sizeof n + n * sizeof(std::uint64_t);
    for (std::uint64_t len : lens) {
      out.emplace_back(body, len);
      body += len;
    }
  }
  return out;
}

}  // namespace

nn::SweepShare sweep_share(MPI_Comm comm) {
  nn::SweepShare s;
  MPI_Comm_rank(comm, &s.rank);
  MPI_Comm_size(comm, &s.ranks);
  MPI_Comm node;
  MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
  MPI_Comm_size(node, &s.ranks_on_node);
  MPI_Comm_free(&node);
  s.agree = [comm](const std::string& what, const std::string& text) { require_agreement(comm, what, text); };
  s.gather = [comm](const std::vector<std::string>& mine) {
    idle_barrier(comm);
    return gather_strings(comm, mine);
  };
  return s;
}

}  // namespace sdpa::dist
