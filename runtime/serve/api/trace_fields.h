// The request fields that read and change named activations, `activations` and
// `interventions` (docs/architecture.md §13), as /v1/completions and /v1/chat/completions
// read them: parsed against the served model, refused with the field named.
#pragma once

#include <cstdint>
#include <memory>

#include "runtime/serve/api/json_fields.h"
#include "runtime/serve/api/served_model.h"
#include "runtime/serve/serve_request.h"
#include "runtime/trace/trace_spec.h"

namespace olmo2 {

/// Reads `activations` and `interventions` (either may be absent or null) with
/// trace::parse_trace_request against served.config; each field is parsed on its own, so
/// that a refusal names the field it came from (the parser's path, e.g.
/// "activations[2].name", when its message starts with one). Reads need one choice: with
/// activations, `n` and `best_of` must both be 1. Returns null when neither field asks
/// for anything (absent, null, or empty lists); else the spec with prompt_len 0
/// (trace_for_prompt sets it). Throws ApiError 400 naming the field and the value.
std::shared_ptr<const trace::TraceSpec> read_trace_fields(Fields& f, const ServedModel& served, int32_t n,
                                                          int32_t best_of);

/// One prompt's spec: a copy of `spec` with prompt_len = p.prompt.size() (null: null).
/// Adds the worst case of its reads, trace::activation_bytes for the prompt and
/// p.max_tokens, to `request_bytes` (the request's total over its prompts so far) and
/// checks the total against served.max_activation_bytes: over it, ApiError 400 naming
/// "activations" with both numbers. `label` names the prompt in a batch ("prompt 2").
std::shared_ptr<const trace::TraceSpec> trace_for_prompt(const std::shared_ptr<const trace::TraceSpec>& spec,
                                                         const CompletionParams& p, const ServedModel& served,
                                                         const std::string& label, int64_t& request_bytes);

}  // namespace olmo2
