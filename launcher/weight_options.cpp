#include "launcher/weight_options.h"

#include <string>

#include "launcher/options.h"

namespace olmo2 {

namespace po = boost::program_options;

void add_weight_options(po::options_description& d) {
  d.add_options()("weights", po::value<std::string>(),
                  "auto (default: the checkpoint's weights in the precision's dtype), int8 or int4: the decoder "
                  "layers' linear weights quantized at load, the lm_head int8 per channel (CPU only)")(
      "weight-group", po::value<int64_t>(),
      "elements per quantization scale along each weight's input dimension (int8: a multiple of 32, "
      "default 128 where the model's sizes allow it, else 64 or 32; int4: 32 (default) or 64)");
}

std::optional<WeightQuantization> read_weight_options(const po::variables_map& vm, Device device) {
  const std::string text = vm.count("weights") ? vm["weights"].as<std::string>() : "auto";
  if (text == "auto") {
    if (vm.count("weight-group")) OLMO2_THROW(UsageError, "--weight-group needs --weights int8 or int4");
    return std::nullopt;
  }
  if (text != "int8" && text != "int4") {
    OLMO2_THROW(UsageError, "--weights must be auto, int8 or int4, got \"", text, "\"");
  }
  WeightQuantization q;
  q.format = parse_quant_format(text, "--weights");
  q.group = vm.count("weight-group") ? vm["weight-group"].as<int64_t>() : 0;  // 0: the model's default
  const bool int4 = q.format == ops::QuantFormat::Int4;
  if (vm.count("weight-group") && (int4 ? q.group != 32 && q.group != 64 : q.group <= 0 || q.group % 32 != 0)) {
    OLMO2_THROW(UsageError, "--weight-group ", q.group, " for --weights ", text, ": ",
                int4 ? "int4 takes 32 or 64" : "int8 takes a positive multiple of 32");
  }
  if (device != Device::CPU) {
    OLMO2_THROW(UsageError, "quantized weights run on the CPU only; the GPU path does not have them yet");
  }
  return q;
}

}  // namespace olmo2
