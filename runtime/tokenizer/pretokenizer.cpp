#include "runtime/tokenizer/pretokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <algorithm>
#include <utility>

#include "core/error.h"
#include "runtime/tokenizer/utf8.h"

namespace olmo2 {

namespace {

struct CodePointRange {
  uint32_t first, last;
};
#include "runtime/tokenizer/unicode_classes.inc"

pcre2_code* compile(const std::string& pattern, uint32_t extra = 0) {
  int err = 0;
  PCRE2_SIZE offset = 0;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                   PCRE2_UTF | PCRE2_UCP | extra, &err, &offset, nullptr);
  if (!code) {
    PCRE2_UCHAR msg[256];
    pcre2_get_error_message(err, msg, sizeof msg);
    OLMO2_THROW(InputError, "tokenizer regex does not compile at offset ", offset, ": ",
                reinterpret_cast<const char*>(msg));
  }
  pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);  // falls back to the interpreter on failure
  return code;
}

/// Per-thread match data and JIT stack, shared by every pattern on that thread.
struct MatchState {
  pcre2_match_data* data = pcre2_match_data_create(1, nullptr);
  pcre2_jit_stack* stack = pcre2_jit_stack_create(32 * 1024, 1024 * 1024, nullptr);
  pcre2_match_context* context = pcre2_match_context_create(nullptr);
  MatchState() { pcre2_jit_stack_assign(context, nullptr, stack); }
  ~MatchState() {
    pcre2_match_context_free(context);
    pcre2_jit_stack_free(stack);
    pcre2_match_data_free(data);
  }
};
MatchState& match_state() {
  thread_local MatchState state;
  return state;
}

bool whole_match(pcre2_code* code, const std::string& s) {
  MatchState& m = match_state();
  return pcre2_match(code, reinterpret_cast<PCRE2_SPTR>(s.data()), s.size(), 0, 0, m.data,
                     m.context) >= 0;
}

// Stand-ins of each class by UTF-8 length (index 2..4), all in Unicode 14.0.
constexpr uint32_t kLetterStandIn[5] = {0, 0, 0x00E9, 0x30A2, 0x10400};
constexpr uint32_t kNumberStandIn[5] = {0, 0, 0x00B2, 0xFF10, 0x104A0};

/// A character of class `kind` whose UTF-8 form has `len` bytes: 'L' letter, 'N'
/// number, 'S' white space (U+00A0), 'O' other (U+200B, format character).
uint32_t stand_in(char kind, size_t len) {
  switch (kind) {
    case 'L': return kLetterStandIn[len];
    case 'N': return kNumberStandIn[len];
    case 'S': return 0x00A0;
    default: return 0x200B;
  }
}

}  // namespace

Pretokenizer::Pretokenizer(const std::string& pattern) {
  code_ = compile(pattern);
  // Keep only the stand-ins this PCRE2 needs: ask it about every listed code point.
  pcre2_code* letter = compile("^\\p{L}$");
  pcre2_code* number = compile("^\\p{N}$");
  pcre2_code* space = compile("^\\s$");
  auto add = [&](const CodePointRange* ranges, size_t n, char kind, pcre2_code* test) {
    for (size_t r = 0; r < n; ++r) {
      for (uint32_t cp = ranges[r].first; cp <= ranges[r].last; ++cp) {
        std::string s;
        utf8_append(s, cp);
        if (whole_match(test, s)) continue;
        if (!stand_ins_.empty() && stand_ins_.back().kind == kind && stand_ins_.back().last + 1 == cp) {
          stand_ins_.back().last = cp;
        } else {
          stand_ins_.push_back({cp, cp, kind});
        }
      }
    }
  };
  add(kNewLetters, std::size(kNewLetters), 'L', letter);
  add(kNewNumbers, std::size(kNewNumbers), 'N', number);
  const CodePointRange nel[] = {{0x85, 0x85}};
  add(nel, 1, 'S', space);
  // U+180E lost White_Space in Unicode 6.3, but PCRE2 10.42 still counts it in \s.
  std::string mvs;
  utf8_append(mvs, 0x180E);
  if (whole_match(space, mvs)) stand_ins_.push_back({0x180E, 0x180E, 'O'});
  std::sort(stand_ins_.begin(), stand_ins_.end(),
            [](const StandIn& a, const StandIn& b) { return a.first < b.first; });
  pcre2_code_free(letter);
  pcre2_code_free(number);
  pcre2_code_free(space);
}

Pretokenizer::Pretokenizer(Pretokenizer&& o) noexcept
    : code_(std::exchange(o.code_, nullptr)), stand_ins_(std::move(o.stand_ins_)) {}

Pretokenizer& Pretokenizer::operator=(Pretokenizer&& o) noexcept {
  std::swap(code_, o.code_);
  std::swap(stand_ins_, o.stand_ins_);
  return *this;
}

Pretokenizer::~Pretokenizer() { pcre2_code_free(static_cast<pcre2_code*>(code_)); }

const Pretokenizer::StandIn* Pretokenizer::find_stand_in(uint32_t cp) const {
  auto it = std::upper_bound(stand_ins_.begin(), stand_ins_.end(), cp,
                             [](uint32_t v, const StandIn& s) { return v < s.first; });
  if (it == stand_ins_.begin()) return nullptr;
  --it;
  return cp <= it->last ? &*it : nullptr;
}

void Pretokenizer::split(std::string_view text, std::vector<std::string_view>& pieces) const {
  // The subject the regex sees: the text itself, or a copy with stand-ins of equal
  // byte length, so that match offsets are offsets into `text`.
  std::string shadow;
  if (!stand_ins_.empty()) {
    const auto* s = reinterpret_cast<const unsigned char*>(text.data());
    for (size_t i = 0; i < text.size();) {
      if (s[i] < 0x80) {
        ++i;
        continue;
      }
      const size_t len = std::max<size_t>(1, utf8_sequence_length(s + i, text.size() - i));
      if (len >= 2) {
        if (const StandIn* st = find_stand_in(utf8_decode(s + i, len))) {
          if (shadow.empty()) shadow.assign(text);
          std::string rep;
          utf8_append(rep, stand_in(st->kind, len));
          shadow.replace(i, len, rep);
        }
      }
      i += len;
    }
  }
  const std::string_view subject = shadow.empty() ? text : std::string_view(shadow);
  auto* code = static_cast<pcre2_code*>(code_);
  MatchState& m = match_state();
  const auto* base = reinterpret_cast<PCRE2_SPTR>(subject.data());
  size_t pos = 0;
  while (pos < subject.size()) {
    const int rc = pcre2_match(code, base, subject.size(), pos, PCRE2_NO_UTF_CHECK, m.data, m.context);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) {
      PCRE2_UCHAR msg[256];
      pcre2_get_error_message(rc, msg, sizeof msg);
      OLMO2_THROW(Error, "tokenizer regex failed: ", reinterpret_cast<const char*>(msg));
    }
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(m.data);
    if (ov[1] > ov[0]) pieces.push_back(text.substr(ov[0], ov[1] - ov[0]));
    // An empty match moves on by one character.
    size_t next = ov[1];
    if (ov[1] == ov[0]) {
      next = ov[1] + std::max<size_t>(1, utf8_sequence_length(reinterpret_cast<const unsigned char*>(subject.data()) + ov[1], subject.size() - ov[1]));
    }
    pos = next;
  }
}

}  // namespace olmo2
