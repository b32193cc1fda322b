// The named-activation options of `olmo2 generate` and `olmo2 trace` (docs/architecture.md
// §12, §13), declared for Boost.Program_options.
#pragma once

#include <optional>
#include <string>

#include <boost/program_options.hpp>
#include <nlohmann/json.hpp>

#include "runtime/model/config.h"
#include "runtime/trace/trace_spec.h"

namespace olmo2 {

struct TraceOptions {
  /// --activations JSON: the API's `activations` list (trace_spec.h); unset: no reads.
  std::optional<nlohmann::json> activations;
  /// --interventions JSON: the API's `interventions` list; unset: none.
  std::optional<nlohmann::json> interventions;
  std::string activations_out;  ///< generate --activations-out FILE ("": with the generated output)
  std::string prompts;          ///< trace --prompts FILE (JSON Lines)
  std::string output;           ///< trace --output FILE ("": standard output)
  /// Whether anything is read or changed.
  bool any() const { return activations.has_value() || interventions.has_value(); }
  /// The spec of the options, checked against `config` (trace::parse_trace_request).
  /// Throws InputError naming the field ("activations[2].name") and the value.
  trace::TraceSpec spec(const ModelConfig& config) const;
};

/// Adds the options of `command` ("generate": --activations, --interventions,
/// --activations-out; "trace": --prompts, --activations, --interventions, --output).
void add_trace_options(boost::program_options::options_description& d, const std::string& command);

/// Reads them. The JSON of --activations and --interventions is only parsed here (names,
/// layers and vectors are checked against the model once it is known); throws
/// UsageError naming the option for text that is not JSON, trace without --prompts or
/// --activations, and --activations-out without --activations.
TraceOptions read_trace_options(const boost::program_options::variables_map& vm, const std::string& command);

}  // namespace olmo2
