// `string` schemas → grammar expressions (json_schema_internal.h; docs/architecture.md
// §8): minLength/maxLength in code points (each escape is one code point: \u escapes
// of surrogates are not produced, so a pair never counts as two), `pattern` as a regex
// matched anywhere in the decoded content (re.search semantics; each character in its
// JSON encoding), and `format`:
//   date       RFC 3339 full-date, years 1000–9999, days checked against the month
//              (29 February in leap years only);
//   time       RFC 3339 full-time: HH:MM:SS, optional fraction, "Z" or ±HH:MM;
//   date-time  date "T" time;
//   uuid       8-4-4-4-12 hexadecimal digits (either case);
//   email      a practical subset of RFC 5322: dot-atom local part "@" domain labels
//              (letters, digits, inner hyphens) with at least one dot; lengths not limited.
// format cannot be combined with pattern or length bounds (refused); pattern with length
// bounds only as regex_expression_bounded (regex_compile.h) allows.
#include "runtime/structured/json_schema_internal.h"
#include "runtime/structured/regex_compile.h"

namespace olmo2::structured::detail {

namespace {

const char* const kQuote = "\"\\\"\"";  // the grammar literal of one "

std::string format_rule(const std::string& format, const std::string& pointer, Context& ctx) {
  RuleTable& r = ctx.rules;
  auto date = [&] {
    const std::string year = r.add("year", "[1-9] [0-9]{3}");
    const std::string leap = r.add(
        "leap-year", "[1-9] [0-9] ([02468] [48] | [13579] [26] | [2468] \"0\") | ([2468] [048] | [13579] [26]) \"00\"");
    return r.add("date", year + " \"-\" ((\"0\" [13578] | \"1\" [02]) \"-\" (\"0\" [1-9] | [12] [0-9] | \"3\" [01])"
                                " | (\"0\" [469] | \"11\") \"-\" (\"0\" [1-9] | [12] [0-9] | \"30\")"
                                " | \"02-\" (\"0\" [1-9] | \"1\" [0-9] | \"2\" [0-8])) | " +
                            leap + " \"-02-29\"");
  };
  auto time = [&] {
    const std::string hh = r.add("hour", "[01] [0-9] | \"2\" [0-3]");
    const std::string mm = r.add("minute", "[0-5] [0-9]");
    return r.add("time", hh + " \":\" " + mm + " \":\" " + mm + " (\".\" [0-9]+)? (\"Z\" | [+\\-] " + hh + " \":\" " +
                             mm + ")");
  };
  if (format == "date") return date();
  if (format == "time") return time();
  if (format == "date-time") return r.add("date-time", date() + " \"T\" " + time());
  if (format == "uuid") {
    const std::string h = "[0-9a-fA-F]";
    return r.add("uuid", h + "{8} \"-\" " + h + "{4} \"-\" " + h + "{4} \"-\" " + h + "{4} \"-\" " + h + "{12}");
  }
  if (format == "email") {
    const std::string atom = r.add("email-atom", "[A-Za-z0-9!#$%&'*+/=?\\^_`{|}~\\-]+");
    const std::string label = r.add("domain-label", "[A-Za-z0-9]+ (\"-\"+ [A-Za-z0-9]+)*");
    return r.add("email", atom + " (\".\" " + atom + ")* \"@\" " + label + " (\".\" " + label + ")+");
  }
  schema_fail(child(pointer, "format"), "unsupported format \"" + format +
                                            "\" (supported: date-time, date, time, uuid, email)");
}

}  // namespace

std::string string_schema(const json& s, const std::string& pointer, Context& ctx) {
  const auto min = count_keyword(s, "minLength", pointer, 100000);
  const auto max = count_keyword(s, "maxLength", pointer, 100000);
  if (min && max && *min > *max)
    schema_fail(pointer, "unsatisfiable: minLength " + std::to_string(*min) + " > maxLength " + std::to_string(*max));
  const bool lengths = min || max;
  if (s.contains("format")) {
    if (!s["format"].is_string()) schema_fail(child(pointer, "format"), "format must be a string");
    if (lengths || s.contains("pattern"))
      schema_fail(pointer, "format cannot be combined with minLength, maxLength or pattern (unsupported)");
    return std::string(kQuote) + " " + format_rule(s["format"].get<std::string>(), pointer, ctx) + " " + kQuote;
  }
  if (s.contains("pattern")) {
    if (!s["pattern"].is_string()) schema_fail(child(pointer, "pattern"), "pattern must be a string");
    RegexMode mode;
    mode.search = true;
    mode.json_content = true;
    mode.any_char = ctx.json_char();
    const std::string pattern = s["pattern"].get<std::string>();
    const std::string e = lengths ? regex_expression_bounded(pattern, mode, child(pointer, "pattern"), min.value_or(0),
                                                             max.value_or(-1))
                                  : regex_expression(pattern, mode, child(pointer, "pattern"));
    if (e == "\"\"") return ctx.rules.add("empty-string", std::string(kQuote) + " " + kQuote);
    return ctx.rules.add("pattern", std::string(kQuote) + " " + e + " " + kQuote);
  }
  if (!lengths) return ctx.any_string();
  const long long lo = min.value_or(0);
  std::string rep;
  if (!max) rep = lo == 0 ? "*" : lo == 1 ? "+" : "{" + std::to_string(lo) + ",}";
  else if (*max == 0) return ctx.rules.add("empty-string", std::string(kQuote) + " " + kQuote);
  else rep = lo == *max ? "{" + std::to_string(lo) + "}" : "{" + std::to_string(lo) + "," + std::to_string(*max) + "}";
  return ctx.rules.add("string", std::string(kQuote) + " " + ctx.json_char() + rep + " " + kQuote);
}

}  // namespace olmo2::structured::detail
