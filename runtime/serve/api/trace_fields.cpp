#include "runtime/serve/api/trace_fields.h"

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <string>

#include "runtime/generation/request_rules.h"
#include "runtime/serve/api/api_error.h"

namespace olmo2 {

using nlohmann::json;

namespace {

/// The field path a parser message starts with ("activations[2].name: …"), when it
/// starts with `field`; else `field` itself.
std::string param_of(const std::string& message, const std::string& field) {
  size_t end = 0;
  while (end < message.size()) {
    const char c = message[end];
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' || c == '[' || c == ']')) break;
    ++end;
  }
  while (end > 0 && message[end - 1] == '.') --end;  // a sentence's full stop is not part of the path
  const std::string path = message.substr(0, end);
  const bool nested = path.size() > field.size() && (path[field.size()] == '[' || path[field.size()] == '.');
  return path.rfind(field, 0) == 0 && (path.size() == field.size() || nested) ? path : field;
}

/// One field's part of the spec: parse_trace_request with the other field absent.
trace::TraceSpec parse_one(const json* value, bool activations, const ServedModel& served) {
  const std::string field = activations ? "activations" : "interventions";
  try {
    return activations ? trace::parse_trace_request(value, nullptr, served.config)
                       : trace::parse_trace_request(nullptr, value, served.config);
  } catch (const InputError& e) {
    throw ApiError(400, param_of(e.what(), field), e.what());
  }
}

}  // namespace

std::shared_ptr<const trace::TraceSpec> read_trace_fields(Fields& f, const ServedModel& served, int32_t n,
                                                          int32_t best_of) {
  const json* activations = f.get("activations");
  const json* interventions = f.get("interventions");
  if (!activations && !interventions) return nullptr;
  trace::TraceSpec spec;
  if (activations) spec.reads = parse_one(activations, true, served).reads;
  if (interventions) spec.interventions = parse_one(interventions, false, served).interventions;
  if (spec.empty()) return nullptr;
  if (const RuleVerdict v = reads_choices_rule(!spec.reads.empty(), std::max(n, best_of))) f.fail(v->field, v->reason);
  return std::make_shared<const trace::TraceSpec>(std::move(spec));
}

std::shared_ptr<const trace::TraceSpec> trace_for_prompt(const std::shared_ptr<const trace::TraceSpec>& spec,
                                                         const CompletionParams& p, const ServedModel& served,
                                                         const std::string& label, int64_t& request_bytes) {
  if (!spec) return nullptr;
  std::shared_ptr<const trace::TraceSpec> out = spec->for_prompt(static_cast<int64_t>(p.prompt.size()));
  if (!out->reads.empty()) {
    const int64_t own = trace::activation_bytes(*out, served.config, out->prompt_len, p.max_tokens);
    // The request's total over its prompts (activation_bytes caps at INT64_MAX).
    const int64_t bytes = own > INT64_MAX - request_bytes ? INT64_MAX : request_bytes + own;
    request_bytes = bytes;
    if (bytes > served.max_activation_bytes) {
      throw ApiError(400, "activations",
                     "activations: this request could return " + std::to_string(bytes) +
                         " bytes, over the server's --max-activation-bytes " +
                         std::to_string(served.max_activation_bytes) + " (" + label + " of " +
                         std::to_string(out->prompt_len) + " tokens, max_tokens " + std::to_string(p.max_tokens) +
                         "): ask for fewer names, layers or positions, a reduction, or fewer tokens");
    }
  }
  return out;
}

}  // namespace olmo2
