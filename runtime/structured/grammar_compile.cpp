// Parsed grammar → the byte-level grammar the matcher runs (docs/architecture.md §8,
// "Structured outputs"): literals become one terminal per byte, classes UTF-8 byte-set
// sequences, groups and repetitions rules of their own (x* ::= x x* | "", x{m,n} as m
// copies and a chain of n−m optional ones); then the checks that keep the matcher
// finite and the per-position tables it reads (fewest bytes to the end, expansions).
#include <algorithm>
#include <limits>
#include <map>

#include "runtime/structured/grammar_impl.h"

namespace olmo2::structured {
namespace {

constexpr int64_t kInf = std::numeric_limits<int64_t>::max() / 4;
/// Bounds on the compiled size; past them the grammar is refused.
constexpr size_t kMaxElements = size_t{4} << 20;
constexpr size_t kMaxClosure = size_t{16} << 20;

struct RuleDef {
  std::string name;    // for messages: the user rule, or "user-rule-N" for generated ones
  std::string origin;  // the user rule it came from
  int line = 0;
  std::vector<std::vector<uint32_t>> alts;  // kTerm set / kRef rule elements
};

class Lowering {
 public:
  explicit Lowering(const std::vector<AstRule>& ast) : ast_(ast) {}

  void run(Grammar::Impl& g) {
    for (const auto& r : ast_) {
      if (ids_.count(r.name))
        OLMO2_CONSTRAINT_ERROR("grammar line " + std::to_string(r.line), "grammar line ", r.line, ": rule '", r.name,
                               "' is defined twice");
      ids_[r.name] = static_cast<uint32_t>(rules_.size());
      rules_.push_back({r.name, r.name, r.line, {}});
    }
    if (!ids_.count("root")) OLMO2_CONSTRAINT_ERROR("grammar", "grammar: no rule 'root' (the start rule)");
    for (size_t i = 0; i < ast_.size(); ++i) {
      current_ = i;
      std::vector<std::vector<uint32_t>> alts;
      for (const auto& seq : ast_[i].alternatives) alts.push_back(lower_sequence(seq));
      rules_[i].alts = std::move(alts);
    }
    check_and_emit(g);
  }

 private:
  [[noreturn]] void fail_rule(size_t rule, const std::string& why) const {
    const RuleDef& r = rules_[rule];
    const std::string where = "grammar line " + std::to_string(r.line);
    OLMO2_CONSTRAINT_ERROR(where, where, ", rule '", r.origin, "': ", why);
  }

  uint32_t term(const ByteSet& s) {
    auto [it, fresh] = set_ids_.emplace(s, static_cast<uint32_t>(sets_.size()));
    if (fresh) sets_.push_back(s);
    return kTerm | it->second;
  }

  uint32_t new_rule(std::vector<std::vector<uint32_t>> alts) {
    const auto id = static_cast<uint32_t>(rules_.size());
    const RuleDef& parent = rules_[current_];
    rules_.push_back({parent.origin + "-" + std::to_string(id), parent.origin, parent.line, std::move(alts)});
    count(rules_.back().alts);
    return kRef | id;
  }

  void count(const std::vector<std::vector<uint32_t>>& alts) {
    for (const auto& a : alts) elements_ += a.size() + 1;
    if (elements_ > kMaxElements) fail_rule(current_, "the grammar expands to too many elements (repetition counts too large)");
  }

  std::vector<uint32_t> lower_atom(const AstElement& e) {
    switch (e.kind) {
      case AstElement::Kind::Literal: {
        std::vector<uint32_t> out;
        for (unsigned char c : e.text) {
          ByteSet s{};
          s[c >> 6] |= uint64_t{1} << (c & 63);
          out.push_back(term(s));
        }
        return out;
      }
      case AstElement::Kind::Class: {
        auto key = std::make_pair(e.ranges, e.negated);
        if (auto it = class_ids_.find(key); it != class_ids_.end()) return {it->second};
        const auto seqs = utf8_sequences(e.ranges, e.negated);
        uint32_t elem;
        if (seqs.size() == 1 && seqs[0].size() == 1) {
          elem = term(seqs[0][0]);
        } else {
          std::vector<std::vector<uint32_t>> alts;
          for (const auto& seq : seqs) {
            std::vector<uint32_t> a;
            for (const auto& s : seq) a.push_back(term(s));
            alts.push_back(std::move(a));
          }
          elem = new_rule(std::move(alts));  // an empty class: a rule without alternatives
        }
        class_ids_.emplace(std::move(key), elem);
        return {elem};
      }
      case AstElement::Kind::Ref: {
        auto it = ids_.find(e.text);
        if (it == ids_.end()) fail_rule(current_, "undefined rule '" + e.text + "'");
        return {kRef | it->second};
      }
      case AstElement::Kind::Group: {
        std::vector<std::vector<uint32_t>> alts;
        for (const auto& seq : e.alternatives) alts.push_back(lower_sequence(seq));
        if (alts.size() == 1) return std::move(alts[0]);
        return {new_rule(std::move(alts))};
      }
    }
    return {};
  }

  std::vector<uint32_t> lower_sequence(const std::vector<AstElement>& seq) {
    std::vector<uint32_t> out;
    for (const auto& e : seq) {
      std::vector<uint32_t> base = lower_atom(e);
      if (e.min == 1 && e.max == 1) {
        out.insert(out.end(), base.begin(), base.end());
        continue;
      }
      const uint32_t unit = base.size() == 1 ? base[0] : new_rule({base});
      for (int64_t k = 0; k < e.min; ++k) out.push_back(unit);
      if (e.max < 0) {
        const uint32_t star = new_rule({});
        rules_[star & ~kKindMask].alts = {{unit, star}, {}};
        out.push_back(star);
      } else if (e.max > e.min) {
        uint32_t chain = new_rule({{unit}, {}});
        for (int64_t k = e.min + 1; k < e.max; ++k) chain = new_rule({{unit, chain}, {}});
        out.push_back(chain);
      }
      elements_ += static_cast<size_t>(e.min);
      if (elements_ > kMaxElements) fail_rule(current_, "the grammar expands to too many elements (repetition counts too large)");
    }
    return out;
  }

  /// Fewest bytes per rule (kInf: derives no finite string), by relaxation to a fixpoint.
  std::vector<int64_t> min_lengths() const {
    std::vector<int64_t> len(rules_.size(), kInf);
    for (bool changed = true; changed;) {
      changed = false;
      for (size_t r = 0; r < rules_.size(); ++r) {
        for (const auto& alt : rules_[r].alts) {
          int64_t sum = 0;
          for (uint32_t e : alt) sum = std::min(kInf, sum + ((e & kKindMask) == kTerm ? 1 : len[e & ~kKindMask]));
          if (sum < len[r]) len[r] = sum, changed = true;
        }
      }
    }
    return len;
  }

  /// Refuses left recursion: a rule that reaches itself through references preceded
  /// only by elements that can match nothing.
  void check_left_recursion(const std::vector<int64_t>& len) const {
    std::vector<std::vector<uint32_t>> first(rules_.size());
    for (size_t r = 0; r < rules_.size(); ++r)
      for (const auto& alt : rules_[r].alts)
        for (uint32_t e : alt) {
          if ((e & kKindMask) == kTerm) break;
          first[r].push_back(e & ~kKindMask);
          if (len[e & ~kKindMask] != 0) break;
        }
    std::vector<uint8_t> color(rules_.size(), 0);  // 0 new, 1 on the path, 2 done
    for (size_t start = 0; start < rules_.size(); ++start) {
      if (color[start]) continue;
      std::vector<std::pair<uint32_t, size_t>> path{{static_cast<uint32_t>(start), 0}};
      color[start] = 1;
      while (!path.empty()) {
        auto& [r, next] = path.back();
        if (next == first[r].size()) {
          color[r] = 2;
          path.pop_back();
          continue;
        }
        const uint32_t s = first[r][next++];
        if (color[s] == 1)
          fail_rule(s, "left recursion: rule '" + rules_[s].name +
                           "' can reach itself without consuming a byte (a repetition of something that can be empty is one)");
        if (color[s] == 0) {
          color[s] = 1;
          path.emplace_back(s, 0);
        }
      }
    }
  }

  void check_and_emit(Grammar::Impl& g) {
    const auto len = min_lengths();
    for (size_t r = 0; r < rules_.size(); ++r)
      if (len[r] >= kInf) fail_rule(r, "rule '" + rules_[r].name + "' derives no finite string");
    check_left_recursion(len);

    g.sets = std::move(sets_);
    g.elems = {kRef | ids_.at("root"), kEnd};
    g.alts.assign(rules_.size(), {});
    for (size_t r = 0; r < rules_.size(); ++r) {
      g.rule_names.push_back(rules_[r].name);
      for (const auto& alt : rules_[r].alts) {
        g.alts[r].push_back(static_cast<uint32_t>(g.elems.size()));
        g.elems.insert(g.elems.end(), alt.begin(), alt.end());
        g.elems.push_back(kEnd);
      }
    }
    const size_t n = g.elems.size();
    g.suffix_min.assign(n, 0);
    for (size_t p = n; p-- > 0;) {
      const uint32_t e = g.elems[p];
      if ((e & kKindMask) == kEnd) continue;
      g.suffix_min[p] = g.suffix_min[p + 1] + ((e & kKindMask) == kTerm ? 1 : len[e & ~kKindMask]);
    }
    build_closures(g);
  }

  /// closure(p): the stacks (bottom → top, relative to the frame holding p) that
  /// replace position p when the matcher expands it until a terminal is on top. A
  /// post-order walk with an explicit stack (no recursion, however deep the grammar): a
  /// reference's closure needs its alternatives' first positions, and when one of them
  /// can be empty, the position after the reference.
  void build_closures(Grammar::Impl& g) {
    const size_t n = g.elems.size();
    std::vector<std::vector<uint32_t>> clos(n);  // [len, frames…] runs
    std::vector<uint8_t> state(n, 0);            // 0 new, 1 in progress, 2 done
    g.nullable.assign(n, 0);
    auto kind = [&](uint32_t p) { return g.elems[p] & kKindMask; };
    for (uint32_t p = 0; p < n; ++p)
      if (kind(p) != kRef) g.nullable[p] = kind(p) == kEnd, state[p] = 2;
    size_t total = 0;
    std::vector<std::pair<uint32_t, int>> work;  // (position, phase)
    for (uint32_t root = 0; root < n; ++root) {
      if (state[root] == 2) continue;
      work.emplace_back(root, 0);
      while (!work.empty()) {
        auto [p, phase] = work.back();
        const auto& alts = g.alts[g.elems[p] & ~kKindMask];
        const uint32_t ret = p + 1;
        if (phase == 0 && state[p] == 2) {  // pushed twice, done since
          work.pop_back();
          continue;
        }
        if (phase == 0) {  // first the alternatives' first positions
          state[p] = 1;
          work.back().second = 1;
          for (uint32_t a : alts) {
            if (state[a] == 1) OLMO2_CONSTRAINT_ERROR("grammar", "grammar: left recursion at rule '", g.rule_names[g.elems[p] & ~kKindMask], "'");
            if (state[a] == 0) work.emplace_back(a, 0);
          }
          continue;
        }
        bool any_empty = false;
        for (uint32_t a : alts) any_empty |= g.nullable[a] != 0;
        if (phase == 1) {  // then, when the reference can match nothing, what follows it
          work.back().second = 2;
          if (any_empty && state[ret] == 1) OLMO2_CONSTRAINT_ERROR("grammar", "grammar: left recursion after a reference that can be empty");
          if (any_empty && state[ret] == 0) work.emplace_back(ret, 0);
          continue;
        }
        work.pop_back();
        auto& out = clos[p];
        const bool push_ret = kind(ret) != kEnd;  // a tail call pushes nothing
        auto add = [&](const uint32_t* frames, uint32_t count) {
          out.push_back(count + (push_ret ? 1 : 0));
          if (push_ret) out.push_back(ret);
          out.insert(out.end(), frames, frames + count);
        };
        for (uint32_t a : alts) {
          if (kind(a) == kTerm) {
            add(&a, 1);
          } else {
            const auto& c = clos[a];
            for (size_t i = 0; i < c.size(); i += c[i] + 1) add(&c[i + 1], c[i]);
          }
        }
        if (any_empty) {
          if (kind(ret) == kTerm) {
            out.insert(out.end(), {1, ret});
          } else {
            out.insert(out.end(), clos[ret].begin(), clos[ret].end());
          }
          g.nullable[p] = g.nullable[ret];
        }
        total += out.size();
        if (total > kMaxClosure)
          OLMO2_CONSTRAINT_ERROR("grammar", "grammar: too ambiguous (its expansions exceed ", kMaxClosure, " entries)");
        state[p] = 2;
      }
    }
    g.closure_begin.assign(n + 1, 0);
    for (size_t p = 0; p < n; ++p) {
      g.closure_begin[p] = static_cast<uint32_t>(g.closure_pool.size());
      g.closure_pool.insert(g.closure_pool.end(), clos[p].begin(), clos[p].end());
    }
    g.closure_begin[n] = static_cast<uint32_t>(g.closure_pool.size());
  }

  const std::vector<AstRule>& ast_;
  std::vector<RuleDef> rules_;
  std::map<std::string, uint32_t> ids_;
  std::map<ByteSet, uint32_t> set_ids_;
  std::vector<ByteSet> sets_;
  std::map<std::pair<std::vector<std::pair<uint32_t, uint32_t>>, bool>, uint32_t> class_ids_;
  size_t current_ = 0;
  size_t elements_ = 0;
};

}  // namespace

void compile_grammar(const std::vector<AstRule>& rules, Grammar::Impl& g) { Lowering(rules).run(g); }

}  // namespace olmo2::structured
