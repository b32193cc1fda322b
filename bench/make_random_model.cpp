// olmo2_random_model: writes a model directory with N(0, std²) weights for a given
// config.json (e.g. the 1B configuration) and a tokenizer, for serving benchmarks of
// model shapes too large to train here and for the tests' tiny models, in f32 or bf16.
// With --olmo3 the config becomes an Olmo 3 one (sliding-window and full layers, YaRN on
// the full ones when --yarn is given; docs/architecture.md §3). Not a test.
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include "core/error.h"
#include "runtime/train/checkpoint.h"
#include "runtime/model/model.h"
#include "runtime/model/parameters.h"

namespace {

constexpr const char* kUsage =
    "usage: olmo2_random_model [--olmo3 WINDOW [--layer-types PATTERN] [--yarn FACTOR,ORIGINAL[,ATTENTION_FACTOR]]]\n"
    "                          CONFIG.json TOKENIZER.json OUTPUT_DIR [STD (default 0.02)] [fp32|bf16]\n"
    "writes OUTPUT_DIR/step-00000000 (config.json, model.safetensors, tokenizer.json)\n"
    "  --olmo3 WINDOW          an Olmo 3 model of CONFIG's sizes: sliding layers see the last WINDOW positions\n"
    "  --layer-types PATTERN   S (sliding) / F (full) per layer, repeated over the layers (default: every 4th F)\n"
    "  --yarn F,N[,A]          YaRN on the full layers: factor F over an original context of N, attention factor A\n";

/// "8,8192" or "8,8192,1.2": YaRN's factor, original context and optional attention factor.
olmo2::RopeParameters parse_yarn(const std::string& s) {
  std::vector<std::string> parts(1);
  for (char ch : s) {
    if (ch == ',') parts.emplace_back();
    else parts.back() += ch;
  }
  if (parts.size() < 2 || parts.size() > 3) {
    OLMO2_THROW(olmo2::InputError, "--yarn \"", s, "\" must be FACTOR,ORIGINAL[,ATTENTION_FACTOR]");
  }
  olmo2::RopeParameters p;
  p.type = "yarn";
  try {
    p.factor = std::stod(parts[0]);
    p.original_max_position_embeddings = std::stoll(parts[1]);
    if (parts.size() == 3) p.attention_factor = std::stod(parts[2]);
  } catch (const std::exception&) {
    OLMO2_THROW(olmo2::InputError, "--yarn \"", s, "\" must be FACTOR,ORIGINAL[,ATTENTION_FACTOR] (numbers)");
  }
  return p;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace olmo2;
  try {
    std::vector<std::string> args(argv + 1, argv + argc);
    std::optional<int64_t> window;
    std::string pattern;
    std::optional<RopeParameters> yarn;
    while (!args.empty() && args[0].rfind("--", 0) == 0) {
      if (args.size() < 2) OLMO2_THROW(InputError, args[0], " needs a value");
      const std::string flag = args[0], value = args[1];
      args.erase(args.begin(), args.begin() + 2);
      if (flag == "--olmo3") {
        try {
          window = std::stoll(value);
        } catch (const std::exception&) {
          OLMO2_THROW(InputError, "--olmo3 \"", value, "\" must be a window (a positive integer)");
        }
      } else if (flag == "--layer-types") {
        pattern = value;
      } else if (flag == "--yarn") {
        yarn = parse_yarn(value);
      } else {
        OLMO2_THROW(InputError, "unknown option ", flag);
      }
    }
    if ((!pattern.empty() || yarn) && !window) OLMO2_THROW(InputError, "--layer-types and --yarn need --olmo3 WINDOW");
    if (args.size() < 3 || args.size() > 5) {
      std::cerr << kUsage;
      return 2;
    }
    ModelConfig c = ModelConfig::load_file(args[0]);
    if (window) c = olmo3_config(c, *window, pattern, yarn);
    const float std = args.size() >= 4 ? std::stof(args[3]) : 0.02f;
    const Precision precision = args.size() == 5 ? parse_precision(args[4], "the dtype argument") : Precision::FP32;
    Olmo2Model m = Olmo2Model::random(c, 1, std, precision);
    ModelWeights& w = m.mutable_weights();
    CheckpointContents contents;
    contents.config = c;
    contents.model_tensors = hf_named_tensors(w, c);
    contents.tokenizer_file = args[1];
    std::cout << save_checkpoint(args[2], 0, contents, 0) << "\n";
  } catch (const std::exception& e) {
    std::cerr << "olmo2_random_model: error: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
