// olmo2_random_model: writes a model directory with N(0, std²) weights for a given
// config.json (e.g. the 1B configuration) and a tokenizer, for serving benchmarks of
// model shapes too large to train here, in f32 or bf16. Not a test.
#include <iostream>
#include <string>

#include "runtime/train/checkpoint.h"
#include "runtime/model/model.h"
#include "runtime/model/parameters.h"

int main(int argc, char** argv) {
  using namespace olmo2;
  if (argc < 4 || argc > 6) {
    std::cerr << "usage: olmo2_random_model CONFIG.json TOKENIZER.json OUTPUT_DIR [STD (default 0.02)] [fp32|bf16]\n"
                 "writes OUTPUT_DIR/step-00000000 (config.json, model.safetensors, tokenizer.json)\n";
    return 2;
  }
  try {
    const ModelConfig c = ModelConfig::load_file(argv[1]);
    const float std = argc >= 5 ? std::stof(argv[4]) : 0.02f;
    const Precision precision = argc == 6 ? parse_precision(argv[5], "the dtype argument") : Precision::FP32;
    Olmo2Model m = Olmo2Model::random(c, 1, std, precision);
    ModelWeights& w = m.mutable_weights();
    CheckpointContents contents;
    contents.config = c;
    contents.model_tensors = hf_named_tensors(w, c);
    contents.tokenizer_file = argv[2];
    std::cout << save_checkpoint(argv[3], 0, contents, 0) << "\n";
  } catch (const std::exception& e) {
    std::cerr << "olmo2_random_model: error: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
