#include "runtime/serve/nonfinite_answer.h"

#include <cmath>
#include <cstdio>
#include <string>

namespace olmo2 {

namespace {
const char* site_name(TapSite site) {
  switch (site) {
    case TapSite::LayerOutput:
      return "layer_output";
    case TapSite::AttentionOutput:
      return "attention_output";
    case TapSite::MlpOutput:
      return "mlp_output";
    case TapSite::AttentionHeadOutputs:
      return "attention_head_outputs";
    default:
      return "another site";
  }
}

std::string layers_text(const std::vector<int64_t>& layers) {
  std::string out;
  for (size_t i = 0; i < layers.size() && i < 8; ++i) out += (i ? "," : "") + std::to_string(layers[i]);
  if (layers.size() > 8) out += ",…";
  return out;
}

std::string describe(const trace::Intervention& v, size_t index) {
  std::string s = "interventions[" + std::to_string(index) + "] ";
  if (v.kind == trace::Intervention::Kind::AblateHead) {
    return s + "ablate_head " + std::to_string(v.head) + " at layers " + layers_text(v.layers);
  }
  double norm = 0;
  for (float x : v.vector) norm += double(x) * x;
  char buf[96];
  std::snprintf(buf, sizeof buf, "coefficient %g × a vector of norm %.3g", double(v.coefficient), std::sqrt(norm));
  return s + "add at layers " + layers_text(v.layers) + " " + site_name(v.site) + ", " + buf;
}
}  // namespace

CompletionChunk nonfinite_answer(const CompletionParams& params, int64_t position, int64_t num_layers) {
  CompletionChunk c;
  const bool steered = params.trace && !params.trace->interventions.empty();
  if (steered) {
    std::string which;
    for (size_t i = 0; i < params.trace->interventions.size(); ++i) {
      which += (i ? "; " : "") + describe(params.trace->interventions[i], i);
    }
    c.error = "interventions: the model's activations became non-finite (NaN or infinity) at position " +
              std::to_string(position) + " under this request's interventions (" + which +
              "): the steered residual stream overflows f32; use smaller coefficients or vectors";
    c.error_status = 400;
    c.error_param = "interventions";
  } else {
    c.error = "internal server error: the model computed a non-finite value (NaN or infinity) for this request at "
              "position " + std::to_string(position) + ", seen in layers." + std::to_string(num_layers - 1) +
              ".layer_output (the residual stream entering the final norm): the checkpoint's weights or this "
              "input overflow f32";
    c.error_status = 500;
  }
  return c;
}

}  // namespace olmo2
