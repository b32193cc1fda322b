// Objects and arrays of a JSON Schema → grammar expressions (json_schema_internal.h;
// docs/architecture.md §8, "Structured outputs").
//
// Objects: the listed properties in `properties` order, required ones always, optional
// ones may be left out (no permutations, so the grammar grows linearly); extra
// properties (additionalProperties true or a schema) come after the listed ones, with
// keys that differ from every listed name: while an extra key still spells a prefix of
// a listed name its characters are written raw (no escapes), so no spelling of a
// listed name slips through. A required name missing from `properties` is listed last
// with the additionalProperties schema (any value when additionalProperties is not
// given: the strict default then still admits the required name).
// Arrays: prefixItems (or an `items` array with additionalItems, the older form) then
// `items` for the rest, with minItems/maxItems counted over all.
#include <memory>

#include "runtime/structured/json_schema_internal.h"

namespace olmo2::structured::detail {

namespace {

std::vector<char32_t> decode(const std::string& s) {
  std::vector<char32_t> out;
  for (size_t i = 0; i < s.size();) {
    const auto b = static_cast<unsigned char>(s[i]);
    const int n = b < 0x80 ? 1 : b < 0xE0 ? 2 : b < 0xF0 ? 3 : 4;
    char32_t c = n == 1 ? b : n == 2 ? (b & 0x1F) : n == 3 ? (b & 0x0F) : (b & 0x07);
    for (int k = 1; k < n && i + k < s.size(); ++k) c = (c << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
    out.push_back(c);
    i += n;
  }
  return out;
}

struct Trie {
  bool terminal = false;
  std::map<char32_t, std::unique_ptr<Trie>> kids;
};

// Rule of the rest of a key after its opening quote (closing quote included), for the
// keys other than the names in `trie`.
std::string other_keys(const Trie& node, Context& ctx) {
  const std::string close = "\"\\\"\"";
  std::vector<std::string> alts;
  if (!node.terminal) alts.push_back(close);
  CodeRanges banned = {{0, 0x1F}, {'"', '"'}, {'\\', '\\'}};
  for (const auto& [c, kid] : node.kids) banned.emplace_back(c, c);
  const CodeRanges free = without_surrogates(complement(normalize(banned)));
  alts.push_back(char_class(free) + " " + ctx.json_char() + "* " + close);
  for (const auto& [c, kid] : node.kids) {
    const std::string encoded = json(utf8(c)).dump();  // ", \ and controls escaped, as JSON writes them
    alts.push_back(literal(encoded.substr(1, encoded.size() - 2)) + " " + other_keys(*kid, ctx));
  }
  std::string body;
  for (size_t i = 0; i < alts.size(); ++i) body += (i ? " | " : "") + alts[i];
  return ctx.rules.add("key", body);
}

std::string count(long long lo, std::optional<long long> hi) {
  if (!hi) return lo == 0 ? "*" : lo == 1 ? "+" : "{" + std::to_string(lo) + ",}";
  if (lo == 0 && *hi == 1) return "?";
  if (lo == *hi) return lo == 1 ? "" : "{" + std::to_string(lo) + "}";
  return "{" + std::to_string(lo) + "," + std::to_string(*hi) + "}";
}

}  // namespace

std::string SchemaCompiler::object_schema(const json& s, const std::string& pointer) {
  Context& ctx = ctx_;
  const std::string w = ctx.ws();
  struct Prop {
    std::string name;
    json schema;
    std::string pointer;
    bool required = false;
  };
  std::vector<Prop> props;
  if (s.contains("properties")) {
    if (!s["properties"].is_object()) schema_fail(child(pointer, "properties"), "properties must be an object");
    for (const auto& [name, sub] : s["properties"].items())
      props.push_back({name, sub, child(child(pointer, "properties"), name)});
  }
  // additionalProperties: none (empty json), or the extras' schema.
  std::optional<json> extra;
  const bool addl_given = s.contains("additionalProperties");
  const json addl = addl_given ? s["additionalProperties"] : json(ctx.options.additional_properties_default);
  if (!addl.is_boolean() && !addl.is_object())
    schema_fail(child(pointer, "additionalProperties"), "additionalProperties must be a boolean or a schema");
  if (!(addl.is_boolean() && !addl.get<bool>())) extra = addl;
  if (s.contains("required")) {
    const json& req = s["required"];
    if (!req.is_array()) schema_fail(child(pointer, "required"), "required must be an array of strings");
    for (const json& r : req) {
      if (!r.is_string()) schema_fail(child(pointer, "required"), "required entries must be strings, not " + r.dump());
      const std::string name = r.get<std::string>();
      auto it = std::find_if(props.begin(), props.end(), [&](const Prop& p) { return p.name == name; });
      if (it == props.end()) {
        if (!extra && addl_given)
          schema_fail(child(pointer, "required"), "unsatisfiable: required property \"" + name +
                                                      "\" is not in properties and additionalProperties is false");
        // With additionalProperties left to the default, a required name outside
        // `properties` is listed with any value (JSON Schema's own default for it).
        props.push_back({name, extra.value_or(json(true)), child(pointer, "additionalProperties"), true});
      } else {
        it->required = true;
      }
    }
  }
  // Members "key" : value, each followed by whitespace.
  std::vector<std::string> members;
  std::vector<bool> required;
  auto trie = std::make_unique<Trie>();
  for (const Prop& p : props) {
    Trie* node = trie.get();
    for (const char32_t c : decode(p.name)) {
      auto& kid = node->kids[c];
      if (!kid) kid = std::make_unique<Trie>();
      node = kid.get();
    }
    node->terminal = true;
    if (p.schema.is_boolean() && !p.schema.get<bool>()) {
      if (p.required) schema_fail(p.pointer, "unsatisfiable: required property \"" + p.name + "\" has schema false");
      continue;
    }
    const std::string value = compile(p.schema, p.pointer);
    members.push_back(ctx.rules.add("kv-" + p.name, literal(json(p.name).dump()) + w + " \":\"" + w + " " + value + w));
    required.push_back(p.required);
  }
  std::string extra_member;
  if (extra) {
    const std::string key = props.empty() ? ctx.any_string() : "\"\\\"\" " + other_keys(*trie, ctx);
    const std::string value = compile(*extra, child(pointer, "additionalProperties"));
    extra_member = ctx.rules.add("kv-extra", key + w + " \":\"" + w + " " + value + w);
  }
  // rest: what may follow once a member is written; first: a non-empty member list.
  const std::string comma = "\",\"" + w + " ";
  std::string rest = extra ? ctx.rules.add("rest", "(" + comma + extra_member + ")*") : "";
  std::string first = extra ? extra_member + (rest.empty() ? "" : " " + rest) : "";
  bool any_required = false;
  for (size_t i = members.size(); i-- > 0;) {
    const std::string seq = members[i] + (rest.empty() ? "" : " " + rest);
    any_required |= required[i];
    const std::string first_body = required[i] || first.empty() ? seq : seq + " | " + first;
    first = ctx.rules.add("first", first_body);
    rest = ctx.rules.add("rest", required[i] ? comma + seq
                                             : "(" + comma + members[i] + ")?" + (rest.empty() ? "" : " " + rest));
  }
  std::string body = "\"{\"" + w;
  if (!first.empty()) body += any_required ? " " + first : " (" + first + ")?";
  return ctx.rules.add("object", body + " \"}\"");
}

std::string SchemaCompiler::array_schema(const json& s, const std::string& pointer) {
  Context& ctx = ctx_;
  const std::string w = ctx.ws();
  json prefix = json::array();
  std::optional<json> rest = json(true);
  std::string rest_pointer = child(pointer, "items");
  std::string prefix_key = "prefixItems";
  if (s.contains("prefixItems")) {
    prefix = s["prefixItems"];
    if (!prefix.is_array()) schema_fail(child(pointer, "prefixItems"), "prefixItems must be an array");
    if (s.contains("items")) rest = s["items"];
  } else if (s.contains("items") && s["items"].is_array()) {
    prefix = s["items"];
    prefix_key = "items";
    rest_pointer = child(pointer, "additionalItems");
    if (s.contains("additionalItems")) rest = s["additionalItems"];
  } else if (s.contains("items")) {
    rest = s["items"];
  }
  if (rest->is_boolean() && !rest->get<bool>()) rest.reset();
  // A `false` entry admits no item there: the array ends before it.
  for (size_t i = 0; i < prefix.size(); ++i)
    if (prefix[i].is_boolean() && !prefix[i].get<bool>()) {
      prefix.erase(prefix.begin() + long(i), prefix.end());
      rest.reset();
    }
  const long long n = static_cast<long long>(prefix.size());
  const long long min = count_keyword(s, "minItems", pointer, 10000).value_or(0);
  std::optional<long long> max = count_keyword(s, "maxItems", pointer, 10000);
  if (!rest) max = std::min(max.value_or(n), n);
  if (max && min > *max)
    schema_fail(pointer, "unsatisfiable: minItems " + std::to_string(min) + " > the most items allowed, " +
                             std::to_string(*max));
  if (max && *max == 0) return ctx.rules.add("empty-array", "\"[\"" + w + " \"]\"");
  std::vector<std::string> elements;
  for (long long i = 0; i < n && (!max || i < *max); ++i)
    elements.push_back(compile(prefix[i], child(child(pointer, prefix_key), std::to_string(i))) + w);
  const std::string item = rest ? compile(*rest, rest_pointer) + w : "";
  const std::string comma = "\",\"" + w + " ";
  // tail(i): what follows i ≥ 1 elements.
  std::string tail;
  const long long np = static_cast<long long>(elements.size());
  if (rest) {
    const long long lo = std::max(min - std::max(np, 1LL), 0LL);
    std::optional<long long> hi;
    if (max) hi = *max - std::max(np, 1LL);
    if (!hi || *hi > 0) tail = "(" + comma + item + ")" + count(lo, hi);
  }
  for (long long i = np - 1; i >= 1; --i) {
    const std::string seq = comma + elements[i] + (tail.empty() ? "" : " " + tail);
    tail = i >= min ? "(" + seq + ")?" : seq;
  }
  const std::string first = np > 0 ? elements[0] : item;
  const std::string content = first + (tail.empty() ? "" : " " + tail);
  return ctx.rules.add("array", "\"[\"" + w + (min == 0 ? " (" + content + ")?" : " " + content) + " \"]\"");
}

}  // namespace olmo2::structured::detail
