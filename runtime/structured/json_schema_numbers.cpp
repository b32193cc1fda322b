// `integer` and `number` schemas with minimum/maximum/exclusiveMinimum/exclusiveMaximum
// → grammar expressions (json_schema_internal.h; docs/architecture.md §8).
//
// Integers are exact: a range of magnitudes becomes a few digit patterns per digit
// count ([lo, hi] split where the digits differ, e.g. 17..243 → 1[7-9] | [2-9][0-9] |
// 1[0-9]{2} | 2[0-3][0-9] | 24[0-3]), negative ranges as "-" and a range of
// magnitudes. Bounded numbers are written without an exponent: the integers in range,
// and fractions n.ddd where the whole interval [n, n+1] lies in range (so also after the
// validator's rounding to a double), plus, with at most 9 fraction digits, those next to
// an exclusive integer bound or within the unit interval of a non-integer bound (written
// with at most 9 decimals, |bound| < 10^6); bounds must lie within ±2^53.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "runtime/structured/json_schema_internal.h"

namespace olmo2::structured::detail {

namespace {

using u64 = unsigned long long;
constexpr double kMaxBound = 9007199254740992.0;  // 2^53

std::string digit_class(char a, char b) {
  if (a == b) return std::string(1, a);
  if (a == '0' && b == '9') return "[0-9]";
  return std::string("[") + a + "-" + b + "]";
}

// Digit patterns of the numbers in [a, b], both written with `a.size()` digits.
void same_length(const std::string& a, const std::string& b, const std::string& prefix,
                 std::vector<std::string>& out) {
  const size_t n = a.size();
  auto tail = [](size_t k) { return k == 0 ? std::string() : k == 1 ? " [0-9]" : " [0-9]{" + std::to_string(k) + "}"; };
  auto join = [](const std::string& p, const std::string& d) { return p.empty() ? d : p + " " + d; };
  if (n == 0) {
    out.push_back(prefix);
    return;
  }
  auto lit = [](char c) { return std::string("\"") + c + "\""; };
  if (a[0] == b[0]) {
    same_length(a.substr(1), b.substr(1), join(prefix, lit(a[0])), out);
    return;
  }
  const bool a_zeros = a.find_first_not_of('0', 1) == std::string::npos;
  const bool b_nines = b.find_first_not_of('9', 1) == std::string::npos;
  char lo = a[0], hi = b[0];
  if (!a_zeros) {
    same_length(a.substr(1), std::string(n - 1, '9'), join(prefix, lit(a[0])), out);
    ++lo;
  }
  if (!b_nines) --hi;
  if (lo <= hi) {
    const std::string d = digit_class(lo, hi);
    out.push_back(join(prefix, d.size() == 1 ? lit(d[0]) : d) + tail(n - 1));
  }
  if (!b_nines) same_length(std::string(n - 1, '0'), b.substr(1), join(prefix, lit(b[0])), out);
}

u64 pow10(size_t k) {
  u64 v = 1;
  while (k--) v *= 10;
  return v;
}

// Patterns of the magnitudes in [lo, hi] (hi empty: unbounded), no leading zeros.
std::vector<std::string> magnitude_range(u64 lo, std::optional<u64> hi) {
  std::vector<std::string> out;
  const size_t dlo = std::to_string(lo).size();
  const size_t dhi = hi ? std::to_string(*hi).size() : dlo;
  for (size_t d = dlo; d <= dhi && d <= 19; ++d) {
    const u64 first = d == 1 ? 0 : pow10(d - 1);
    const u64 last = pow10(d) - 1;
    const u64 a = std::max(lo, first), b = hi ? std::min(*hi, last) : last;
    if (a <= b) same_length(std::to_string(a), std::to_string(b), "", out);
  }
  // Unbounded above: at most 16 digits (as any_integer, docs/architecture.md §8).
  if (!hi && dlo < 16) out.push_back("[1-9] [0-9]{" + std::to_string(dlo) + ",15}");
  return out;
}

std::string alternatives(const std::vector<std::string>& alts) {
  if (alts.size() == 1) return alts[0];
  std::string out = "(";
  for (size_t i = 0; i < alts.size(); ++i) out += (i ? " | " : "") + alts[i];
  return out + ")";
}

// Patterns of the integers in [lo, hi] (either side open when empty); empty when none.
std::vector<std::string> integer_range(std::optional<long long> lo, std::optional<long long> hi) {
  std::vector<std::string> out;
  if (lo && hi && *lo > *hi) return out;
  if (!lo || *lo < 0) {  // negative part: magnitudes [max(1, −hi), −lo]
    const u64 mlo = hi && *hi < 0 ? u64(-(*hi + 1)) + 1 : 1;
    std::optional<u64> mhi;
    if (lo) mhi = u64(-(*lo + 1)) + 1;
    out.push_back("\"-\" " + alternatives(magnitude_range(mlo, mhi)));
  }
  if (!hi || *hi >= 0) {
    std::optional<u64> mhi;
    if (hi) mhi = u64(*hi);
    for (auto& p : magnitude_range(lo && *lo > 0 ? u64(*lo) : 0, mhi)) out.push_back(p);
  }
  return out;
}

struct Bounds {
  std::optional<double> lo, hi;
  bool lo_exclusive = false, hi_exclusive = false;
  std::string lo_text, hi_text;  // as the schema writes them (JSON number text)
};

Bounds read_bounds(const json& s, const std::string& pointer, double limit) {
  Bounds b;
  auto get = [&](const char* key) -> std::optional<double> {
    if (!s.contains(key)) return std::nullopt;
    const json& v = s.at(key);
    if (!v.is_number()) schema_fail(child(pointer, key), std::string(key) + " must be a number (draft 2020-12)");
    const double x = v.get<double>();
    if (!std::isfinite(x) || std::fabs(x) > limit)
      schema_fail(child(pointer, key), std::string(key) + " " + v.dump() + " is outside the supported range ±2^53");
    return x;
  };
  auto tighter_lo = [&](const char* key, bool excl) {
    const auto x = get(key);
    if (x && (!b.lo || *x > *b.lo || (*x == *b.lo && excl))) b.lo = x, b.lo_exclusive = excl, b.lo_text = s.at(key).dump();
  };
  auto tighter_hi = [&](const char* key, bool excl) {
    const auto x = get(key);
    if (x && (!b.hi || *x < *b.hi || (*x == *b.hi && excl))) b.hi = x, b.hi_exclusive = excl, b.hi_text = s.at(key).dump();
  };
  tighter_lo("minimum", false);
  tighter_lo("exclusiveMinimum", true);
  tighter_hi("maximum", false);
  tighter_hi("exclusiveMaximum", true);
  return b;
}

// The integers in range: [lo] and [hi] as integers, open sides empty.
std::pair<std::optional<long long>, std::optional<long long>> integer_bounds(const Bounds& b) {
  std::optional<long long> lo, hi;
  if (b.lo) lo = b.lo_exclusive ? (long long)std::floor(*b.lo) + 1 : (long long)std::ceil(*b.lo);
  if (b.hi) hi = b.hi_exclusive ? (long long)std::ceil(*b.hi) - 1 : (long long)std::floor(*b.hi);
  return {lo, hi};
}

void check_satisfiable(const std::vector<std::string>& alts, const std::string& pointer, const Bounds& b) {
  if (!alts.empty()) return;
  auto show = [](std::optional<double> v) { return v ? json(*v).dump() : std::string("none"); };
  schema_fail(pointer, "unsatisfiable: no value within minimum " + show(b.lo) + (b.lo_exclusive ? " (exclusive)" : "") +
                           " and maximum " + show(b.hi) + (b.hi_exclusive ? " (exclusive)" : ""));
}

// Fractions next to an exclusive integer bound, which the whole-interval rule leaves out
// (0 < x < 1 has no n with [n, n+1] inside): n.ddd with at most 9 digits, the last not 0
// where the value must stay above n, for |n| < 10^6 — there a double tells every such
// value from n and n+1, so the validator's rounding cannot reach the bound.
void boundary_fractions(const Bounds& b, std::vector<std::string>& alts) {
  constexpr double kLimit = 1e6;
  auto integral = [](std::optional<double> v) { return v && std::floor(*v) == *v && std::fabs(*v) < kLimit; };
  auto inside = [&](double v) {  // v is in range (its own bounds included as given)
    return (!b.lo || v > *b.lo || (v == *b.lo && !b.lo_exclusive)) && (!b.hi || v < *b.hi || (v == *b.hi && !b.hi_exclusive));
  };
  // Candidates: for a value n.f (sign s), the interval's ends are s·n and s·(n+1).
  std::vector<std::pair<long long, bool>> candidates;  // (n, negative)
  if (integral(b.lo) && b.lo_exclusive) {
    const long long l = (long long)*b.lo;
    if (l >= 0) candidates.emplace_back(l, false);
    else candidates.emplace_back(-l - 1, true);
  }
  if (integral(b.hi) && b.hi_exclusive) {
    const long long h = (long long)*b.hi;
    if (h >= 1) candidates.emplace_back(h - 1, false);
    else candidates.emplace_back(-h, true);
  }
  std::sort(candidates.begin(), candidates.end());
  candidates.erase(std::unique(candidates.begin(), candidates.end()), candidates.end());
  for (const auto& [n, negative] : candidates) {
    const double near = negative ? -double(n) : double(n), far = negative ? -double(n) - 1 : double(n) + 1;
    const bool near_open = !inside(near), far_open = !inside(far);
    // Strictly between near and far must be in range: both ends in range or open bounds.
    const double mid = (near + far) / 2;
    if (!inside(mid)) continue;
    if ((near_open && !(b.lo && near == *b.lo) && !(b.hi && near == *b.hi)) ||
        (far_open && !(b.lo && far == *b.lo) && !(b.hi && far == *b.hi)))
      continue;
    const std::string digits = near_open ? "[0-9]{0,8} [1-9]" : "[0-9]{1,9}";
    alts.push_back(std::string(negative ? "\"-\" " : "") + "\"" + std::to_string(n) + "\" \".\" " + digits);
  }
}

// Fraction digit strings f of 1–`room` digits (the first call: `first`) whose value 0.f
// compares with 0.g — at most (`at_most`) or at least — strictly when `strict`; g has no
// trailing zeros, `i` digits of it matched so far. Empty: no string; "\"\"": only the
// empty string (the caller's fraction ends here).
std::string fraction_compare(const std::string& g, size_t i, int room, bool first, bool at_most, bool strict) {
  std::vector<std::string> alts;
  bool can_end = false;
  auto any = [](int k) { return k <= 0 ? std::string() : " [0-9]{0," + std::to_string(k) + "}"; };
  if (i < g.size()) {
    can_end = !first && at_most;  // g has a non-zero digit further on
    if (room > 0) {
      const char d = g[i];
      auto digits = [](char a, char b) { return a == b ? std::string("\"") + a + "\"" : digit_class(a, b); };
      if (at_most && d > '0') alts.push_back(digits('0', char(d - 1)) + any(room - 1));
      if (!at_most && d < '9') alts.push_back(digits(char(d + 1), '9') + any(room - 1));
      const std::string rest = fraction_compare(g, i + 1, room - 1, false, at_most, strict);
      if (!rest.empty()) alts.push_back(std::string("\"") + d + "\"" + (rest == "\"\"" ? "" : " " + rest));
    }
  } else {  // equal so far: zeros keep it equal, a non-zero digit makes it greater
    can_end = !strict;
    if (room > 0) {
      if (at_most && !strict) alts.push_back("\"0\"{1," + std::to_string(room) + "}");
      if (!at_most) alts.push_back(strict ? (room == 1 ? std::string("[1-9]") : "[0-9]{0," + std::to_string(room - 1) + "} [1-9]")
                                          : "[0-9]{1," + std::to_string(room) + "}");
    }
  }
  if (alts.empty()) return can_end ? "\"\"" : "";
  std::string out = "(";
  for (size_t k = 0; k < alts.size(); ++k) out += (k ? " | " : "") + alts[k];
  return out + (can_end ? ")?" : ")");
}

// Values within the unit interval that holds a non-integer bound, on the side inside the
// range (lo = 2.25: 2.25 ≤ 2.f < 3 as f ≥ "25"), for bounds written with at most 9
// fraction digits, no exponent, |bound| < 10^6: the fractions written have at most 9
// digits, so a double keeps their order with the bound's.
void bound_fractions(const Bounds& b, std::vector<std::string>& alts) {
  auto split = [](const std::string& text, long long& whole, std::string& digits) {
    if (text.find_first_of("eE") != std::string::npos) return false;
    const size_t dot = text.find('.');
    if (dot == std::string::npos) return false;
    digits = text.substr(dot + 1);
    while (!digits.empty() && digits.back() == '0') digits.pop_back();
    const std::string int_part = text.substr(text[0] == '-' ? 1 : 0, dot - (text[0] == '-' ? 1 : 0));
    if (digits.empty() || digits.size() > 9 || int_part.size() > 6) return false;
    whole = std::stoll(int_part);  // |bound| = whole.digits
    return true;
  };
  auto piece = [&](bool negative, long long whole, const std::string& digits, bool at_most, bool strict) {
    const std::string f = fraction_compare(digits, 0, 9, true, at_most, strict);
    if (!f.empty() && f != "\"\"")
      alts.push_back(std::string(negative ? "\"-\" " : "") + "\"" + std::to_string(whole) + "\" \".\" " + f);
  };
  long long w;
  std::string g;
  if (b.lo && std::floor(*b.lo) != *b.lo && split(b.lo_text, w, g)) {
    if (*b.lo > 0 && (!b.hi || *b.hi >= double(w) + 1)) piece(false, w, g, false, b.lo_exclusive);  // w.f ≥ lo
    if (*b.lo < 0 && (!b.hi || *b.hi > -double(w) || (*b.hi == -double(w) && !b.hi_exclusive)))
      piece(true, w, g, true, b.lo_exclusive);  // −w.f ≥ lo: f ≤ g
  }
  if (b.hi && std::floor(*b.hi) != *b.hi && split(b.hi_text, w, g)) {
    if (*b.hi > 0 && (!b.lo || *b.lo < double(w) || (*b.lo == double(w) && !b.lo_exclusive)))
      piece(false, w, g, true, b.hi_exclusive);  // w.f ≤ hi
    if (*b.hi < 0 && (!b.lo || *b.lo <= -double(w) - 1)) piece(true, w, g, false, b.hi_exclusive);  // −w.f ≤ hi: f ≥ g
  }
}

}  // namespace

std::string integer_schema(const json& s, const std::string& pointer, Context& ctx) {
  const Bounds b = read_bounds(s, pointer, 9.0e18);
  if (!b.lo && !b.hi) return ctx.any_integer();
  const auto [lo, hi] = integer_bounds(b);
  const auto alts = integer_range(lo, hi);
  check_satisfiable(alts, pointer, b);
  std::string body;
  for (size_t i = 0; i < alts.size(); ++i) body += (i ? " | " : "") + alts[i];
  return ctx.rules.add("integer-range", body);
}

std::string number_schema(const json& s, const std::string& pointer, Context& ctx) {
  const Bounds b = read_bounds(s, pointer, kMaxBound);
  if (!b.lo && !b.hi) return ctx.any_number();
  const auto [ilo, ihi] = integer_bounds(b);
  std::vector<std::string> alts = integer_range(ilo, ihi);
  // n.ddd for n ≥ 0: [n, n+1] within range.
  std::optional<long long> plo, phi;
  plo = std::max(0LL, b.lo ? (b.lo_exclusive ? (long long)std::floor(*b.lo) + 1 : (long long)std::ceil(*b.lo)) : 0LL);
  if (b.hi) phi = b.hi_exclusive ? (long long)std::ceil(*b.hi) - 2 : (long long)std::floor(*b.hi) - 1;
  std::vector<std::string> fraction;
  if (!phi || *plo <= *phi)
    fraction.push_back(alternatives(magnitude_range(u64(*plo), phi ? std::optional<u64>(u64(*phi)) : std::nullopt)));
  // -n.ddd for n ≥ 0: [−(n+1), −n] within range.
  std::optional<long long> nlo, nhi;
  nlo = std::max(0LL, b.hi ? (b.hi_exclusive ? (long long)std::floor(-*b.hi) + 1 : (long long)std::ceil(-*b.hi)) : 0LL);
  if (b.lo) nhi = b.lo_exclusive ? (long long)std::ceil(-*b.lo) - 2 : (long long)std::floor(-*b.lo) - 1;
  if (!nhi || *nlo <= *nhi)
    fraction.push_back("\"-\" " +
                       alternatives(magnitude_range(u64(*nlo), nhi ? std::optional<u64>(u64(*nhi)) : std::nullopt)));
  for (const auto& f : fraction) alts.push_back(f + " \".\" [0-9]{1,16}");
  boundary_fractions(b, alts);
  bound_fractions(b, alts);
  check_satisfiable(alts, pointer, b);
  std::string body;
  for (size_t i = 0; i < alts.size(); ++i) body += (i ? " | " : "") + alts[i];
  return ctx.rules.add("number-range", body);
}

}  // namespace olmo2::structured::detail
