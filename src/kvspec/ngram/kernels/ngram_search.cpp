// The n-gram drafters' searches in C++ (kvspec.ngram.native): suffix-array ranges of an
// infini-gram index, the continuations after them, and the request-local longest earlier
// suffix. Python drove the same searches through numpy, a few microseconds per call and
// dozens of calls per draft; right after a target forward has streamed its weights through
// the caches that cost the hybrid drafter ~0.6 ms a decoding step. Results are the Python
// versions' exactly (tests/ngram): bounds by binary search over ranks whose keys are sorted,
// counts sorted by token id, ties as documented at each function.
//
// Index layout (infini-gram v4 files, as kvspec.ngram.suffix_array describes): `tokens` holds
// the token stream, little-endian u16 or u32 ids with a separator of all bits set before
// each document; `table` holds, per rank, the byte offset of its suffix in `tokens` as
// `ptr_bytes` little-endian bytes. Suffixes are sorted by their raw bytes, so the sort key of
// a token is its byte-swapped value; a suffix that runs off the end sorts first (key -1).
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <optional>
#include <utility>
#include <vector>

namespace py = pybind11;
using Range = std::pair<int64_t, int64_t>;  // [lo, hi) ranks of one shard
using Segments = std::vector<Range>;        // one range per shard

namespace {

// The byte-order sort key of a token id (the formula of suffix_array._key, on int64).
int64_t sort_key(int64_t t, int width) {
  if (width == 2) return ((t & 0xFF) << 8) | (t >> 8);
  return ((t & 0xFF) << 24) | (((t >> 8) & 0xFF) << 16) | (((t >> 16) & 0xFF) << 8) | (t >> 24);
}

struct Shard {
  py::array_t<uint8_t> tokens_ref, table_ref;  // keep the memory maps alive
  const uint8_t* tokens;
  const uint8_t* table;
  int64_t n_tok;  // tokens in the stream
  int width;      // bytes per token: 2 or 4
  int ptr_bytes;  // bytes per suffix-array entry

  int64_t size() const { return n_tok == 0 ? 0 : ranks_; }
  int64_t ranks_ = 0;

  int64_t token(int64_t pos) const {  // raw id at a position inside the stream
    const uint8_t* p = tokens + pos * width;
    return width == 2 ? int64_t(p[0]) | int64_t(p[1]) << 8
                      : int64_t(p[0]) | int64_t(p[1]) << 8 | int64_t(p[2]) << 16 |
                            int64_t(p[3]) << 24;
  }
  int64_t separator() const { return width == 2 ? 0xFFFF : 0xFFFFFFFFLL; }
  int64_t position(int64_t rank) const {  // token position of the suffix at `rank`
    const uint8_t* p = table + rank * ptr_bytes;
    uint64_t v = 0;
    for (int i = 0; i < ptr_bytes; ++i) v |= uint64_t(p[i]) << (8 * i);
    return int64_t(v / uint64_t(width));
  }
  int64_t key_at(int64_t rank, int64_t depth) const {
    int64_t pos = position(rank) + depth;
    return pos < n_tok ? sort_key(token(pos), width) : -1;
  }
  // first rank in [lo, hi) whose key at `depth` is >= key (upper: > key); keys are sorted
  int64_t bound(int64_t lo, int64_t hi, int64_t depth, int64_t key, bool upper) const {
    while (lo < hi) {
      int64_t mid = lo + (hi - lo) / 2;
      int64_t k = key_at(mid, depth);
      if (k < key || (upper && k == key)) lo = mid + 1;
      else hi = mid;
    }
    return lo;
  }
  // the sub-range of [lo, hi) whose suffixes have `token` (an index id) at `depth`
  Range narrow(int64_t lo, int64_t hi, int64_t depth, int64_t token) const {
    if (hi <= lo) return {lo, lo};
    int64_t key = sort_key(token, width);
    int64_t left = bound(lo, hi, depth, key, false);
    return {left, bound(left, hi, depth, key, true)};
  }
};

// Continuations of a set of matches: row i holds the `m` ids after match i (model ids through
// the index's vocabulary map when it has one), -1 from a document end on.
class Rows {
 public:
  Rows(int64_t m) : m_(m) {}
  int64_t m_;
  std::vector<int64_t> data_;  // (n, m) row-major

  int64_t size() const { return m_ == 0 ? 0 : int64_t(data_.size()) / m_; }
  int64_t at(int64_t i, int64_t j) const { return data_[i * m_ + j]; }

  // (ids ascending, counts) of column j, document ends counted as `eos`
  std::pair<std::vector<int64_t>, std::vector<int64_t>> column(int64_t j, int64_t eos) const {
    std::vector<int64_t> col(size());
    for (int64_t i = 0; i < size(); ++i) col[i] = at(i, j) < 0 ? eos : at(i, j);
    std::sort(col.begin(), col.end());
    std::vector<int64_t> ids, counts;
    for (size_t i = 0; i < col.size(); ++i) {
      if (ids.empty() || ids.back() != col[i]) {
        ids.push_back(col[i]);
        counts.push_back(0);
      }
      ++counts.back();
    }
    return {ids, counts};
  }
  // keep the rows whose column j holds `token` (a row that ended there never does)
  void keep(int64_t j, int64_t token) {
    std::vector<int64_t> out;
    for (int64_t i = 0; i < size(); ++i)
      if (at(i, j) == token) out.insert(out.end(), data_.begin() + i * m_, data_.begin() + (i + 1) * m_);
    data_.swap(out);
  }
  std::vector<int64_t> row(int64_t i, int64_t from) const {
    return std::vector<int64_t>(data_.begin() + i * m_ + from, data_.begin() + (i + 1) * m_);
  }
  py::array_t<int64_t> array() const {
    py::array_t<int64_t> out({size(), m_});
    if (!data_.empty()) std::memcpy(out.mutable_data(), data_.data(), data_.size() * sizeof(int64_t));
    return out;
  }
};

class Index {
 public:
  Index(const std::vector<std::tuple<py::array_t<uint8_t>, int, py::array_t<uint8_t>>>& shards,
        std::optional<py::array_t<int64_t>> lut) {
    for (const auto& [tok, width, table] : shards) {
      Shard s;
      s.tokens_ref = tok;
      s.table_ref = table;
      s.tokens = tok.data();
      s.table = table.data();
      s.width = width;
      s.n_tok = tok.size() / width;
      s.ptr_bytes = s.n_tok == 0 ? 1 : int(table.size() / s.n_tok);
      s.ranks_ = s.n_tok == 0 ? 0 : table.size() / s.ptr_bytes;
      shards_.push_back(s);
    }
    if (lut) {
      lut_ref_ = *lut;
      lut_ = lut_ref_.data();
      lut_size_ = lut_ref_.size();
    }
  }

  std::vector<int64_t> sizes() const {
    std::vector<int64_t> out;
    for (const auto& s : shards_) out.push_back(s.size());
    return out;
  }

  Segments find(const std::vector<int64_t>& query) const {
    Segments out;
    for (const auto& s : shards_) out.push_back(walk_down(s, {0, s.size()}, 0, query));
    return out;
  }

  // the ranges of query + tail from the ranges of a query of length `depth`
  Segments extend(const Segments& segments, int64_t depth, const std::vector<int64_t>& tail) const {
    Segments out;
    for (size_t i = 0; i < shards_.size(); ++i)
      out.push_back(walk_down(shards_[i], segments.at(i), depth, tail));
    return out;
  }

  // The longest suffix of `ctx` (index ids) shorter than `below` (all lengths when below < 0)
  // that has a match: doubling its length, then bisecting (a suffix that matches has every
  // shorter suffix matching). (length, ranges); length 0 is the whole index.
  std::pair<int64_t, Segments> longest_suffix(const std::vector<int64_t>& ctx, int64_t below) const {
    int64_t n = int64_t(ctx.size());
    int64_t limit = below < 0 ? n : std::min(below - 1, n);
    std::pair<int64_t, Segments> best = {0, find({})};
    int64_t lo = 0, hi = 1;
    while (hi <= limit) {
      Segments found = find(std::vector<int64_t>(ctx.end() - hi, ctx.end()));
      if (count(found) == 0) break;
      best = {hi, found};
      lo = hi;
      hi *= 2;
    }
    hi = std::min(hi, limit + 1);
    while (hi - lo > 1) {
      int64_t mid = (lo + hi) / 2;
      Segments found = find(std::vector<int64_t>(ctx.end() - mid, ctx.end()));
      if (count(found) == 0) hi = mid;
      else {
        best = {mid, found};
        lo = mid;
      }
    }
    return best;
  }

  // the m ids after every match of a `depth`-token query (after the matches at global
  // `ranks` only, when given: ranks count through the shards' ranges in order)
  Rows rows(const Segments& segments, int64_t depth, int64_t m,
            std::optional<std::vector<int64_t>> ranks) const {
    Rows out(m);
    int64_t offset = 0;
    for (size_t i = 0; i < shards_.size(); ++i) {
      auto [lo, hi] = segments.at(i);
      if (ranks) {
        for (int64_t r : *ranks)
          if (r >= offset && r < offset + hi - lo) read(shards_[i], lo + r - offset, depth, m, out);
      } else {
        for (int64_t r = lo; r < hi; ++r) read(shards_[i], r, depth, m, out);
      }
      offset += std::max<int64_t>(hi - lo, 0);
    }
    return out;
  }

 private:
  std::vector<Shard> shards_;
  py::array_t<int64_t> lut_ref_;
  const int64_t* lut_ = nullptr;
  int64_t lut_size_ = 0;

  static int64_t count(const Segments& segments) {
    int64_t n = 0;
    for (auto [lo, hi] : segments) n += hi - lo;
    return n;
  }
  static Range walk_down(const Shard& s, Range r, int64_t depth, const std::vector<int64_t>& tail) {
    for (size_t i = 0; i < tail.size() && r.first < r.second; ++i)
      r = s.narrow(r.first, r.second, depth + int64_t(i), tail[i]);
    if (r.second <= r.first) return {r.first, r.first};
    return r;
  }
  void read(const Shard& s, int64_t rank, int64_t depth, int64_t m, Rows& out) const {
    int64_t start = s.position(rank) + depth;
    bool ended = false;
    for (int64_t j = 0; j < m; ++j) {
      int64_t pos = start + j;
      int64_t raw = pos < s.n_tok ? s.token(pos) : -1;
      ended = ended || raw < 0 || raw == s.separator();
      int64_t id = raw;
      if (!ended && lut_ != nullptr) id = raw < lut_size_ ? lut_[raw] : -1;
      out.data_.push_back(ended ? -1 : id);
    }
  }
};

// (n, ends): the longest n <= max_match such that the last n tokens of ctx also end at the
// earlier positions `ends` (ascending, each < len - 1 so that a continuation exists).
std::pair<int64_t, std::vector<int64_t>> earlier_matches(const std::vector<int64_t>& ctx,
                                                         int64_t max_match) {
  int64_t last = int64_t(ctx.size()) - 1;
  std::vector<int64_t> ends;
  for (int64_t i = 0; i < last; ++i)
    if (ctx[i] == ctx[last]) ends.push_back(i);
  int64_t n = ends.empty() ? 0 : 1;
  while (!ends.empty() && n < max_match && last - n >= 0) {
    std::vector<int64_t> longer;
    for (int64_t e : ends)
      if (e >= n && ctx[e - n] == ctx[last - n]) longer.push_back(e);
    if (longer.empty()) break;
    ends.swap(longer);
    ++n;
  }
  return {n, ends};
}

// A request-local draft (kvspec.ngram.drafters.RequestSuffixDrafter): follow the earlier
// occurrences of the context's longest earlier suffix, each token the continuation most of the
// surviving ones share (a tie to the one whose first survivor comes first), keeping those that
// continue with it. The context is read as extended by the draft so far, so a copy that reaches
// the present goes on with the tokens it has just drafted (inside a loop of period p the draft
// repeats the loop instead of stopping after p tokens); every occurrence thus has a next token.
// Returns (n, occurrences, tokens, per token (ids in first-seen order, their counts)).
py::tuple suffix_draft(const std::vector<int64_t>& ctx, int64_t max_match, int64_t min_match,
                       int64_t k) {
  auto [n, ends] = earlier_matches(ctx, max_match);
  std::vector<int64_t> tokens;
  std::vector<std::vector<int64_t>> dist_ids, dist_counts;
  if (n >= min_match && k > 0 && !ends.empty()) {
    std::vector<int64_t> s = ctx;  // ctx + the draft so far; each end < ctx.size() - 1
    s.reserve(ctx.size() + size_t(k));
    std::vector<int64_t> alive = ends;
    for (int64_t j = 1; j <= k; ++j) {
      std::vector<int64_t> ids, counts;  // first-seen order
      for (int64_t a : alive) {
        int64_t t = s[size_t(a + j)];
        auto it = std::find(ids.begin(), ids.end(), t);
        if (it == ids.end()) {
          ids.push_back(t);
          counts.push_back(1);
        } else {
          ++counts[it - ids.begin()];
        }
      }
      size_t best = 0;
      for (size_t i = 1; i < ids.size(); ++i)
        if (counts[i] > counts[best]) best = i;
      int64_t pick = ids[best];
      tokens.push_back(pick);
      dist_ids.push_back(ids);
      dist_counts.push_back(counts);
      std::vector<int64_t> kept;
      for (int64_t a : alive)
        if (s[size_t(a + j)] == pick) kept.push_back(a);
      alive.swap(kept);
      s.push_back(pick);
    }
  }
  return py::make_tuple(n, int64_t(ends.size()), tokens, dist_ids, dist_counts);
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  py::class_<Rows>(m, "Rows")
      .def("__len__", &Rows::size)
      .def("column", &Rows::column, "(ids ascending, counts) of column j, ends counted as eos")
      .def("keep", &Rows::keep, "keep the rows holding `token` in column j")
      .def("row", &Rows::row, "row i from column `from` on")
      .def("array", &Rows::array, "the rows as an (n, m) int64 array");
  py::class_<Index>(m, "Index")
      .def(py::init<const std::vector<std::tuple<py::array_t<uint8_t>, int, py::array_t<uint8_t>>>&,
                    std::optional<py::array_t<int64_t>>>())
      .def("sizes", &Index::sizes)
      .def("find", &Index::find)
      .def("extend", &Index::extend)
      .def("longest_suffix", &Index::longest_suffix)
      .def("rows", &Index::rows, py::arg("segments"), py::arg("depth"), py::arg("m"),
           py::arg("ranks") = std::nullopt);
  m.def("earlier_matches", &earlier_matches);
  m.def("suffix_draft", &suffix_draft);
}
