// A small random OLMo 2 model with the dolma2 tokenizer, written as a checkpoint that
// `olmo2 serve` loads, and a running server with an HTTP client for it.
#pragma once

#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <sstream>
#include <string>

#include <httplib.h>
#include <nlohmann/json.hpp>

#include "runtime/train/checkpoint.h"
#include "runtime/model/model.h"
#include "runtime/model/parameters.h"
#include "tests/launcher/background.h"
#include "tests/launcher/metrics_text.h"
#include "tests/test_util.h"

namespace olmo2::test {

/// 2 layers, hidden 64, 4 query / 2 kv heads, context 128, the dolma2 vocabulary;
/// weights N(0, 0.2²) (wide logits: greedy choices are far from ties).
struct ServeModel {
  TempDir dir;
  std::string path;
  ServeModel() {
    ModelConfig c;
    c.vocab_size = 100352, c.hidden_size = 64, c.intermediate_size = 128, c.num_hidden_layers = 2;
    c.num_attention_heads = 4, c.num_key_value_heads = 2, c.head_dim = 16, c.max_position_embeddings = 128;
    c.rms_norm_eps = 1e-6, c.rope_theta = 10000, c.eos_token_ids = {100257};
    Olmo2Model m = Olmo2Model::random(c, 11, 0.2f);
    ModelWeights& w = m.mutable_weights();
    CheckpointContents contents;
    contents.config = c;
    contents.model_tensors = hf_named_tensors(w, c);
    contents.tokenizer_file = source_path("data/dolma2-tokenizer.json");
    path = save_checkpoint(dir.path(), 0, contents, 0);
  }
};

/// `olmo2 serve` (or `mpirun … olmo2 serve`) in the background on a free port; waits
/// until /health answers.
struct Server {
  int port = free_port();
  TempDir logs;
  Background process;
  Server(const std::string& model, const std::string& extra, const std::string& launcher = "")
      : process((launcher.empty() ? std::string() : launcher + " ") + OLMO2_BINARY + " serve --model " + model +
                " --threads 1 --port " + std::to_string(port) + " " + extra + " > " + logs.file("out.txt") +
                " 2> " + logs.file("err.txt")) {
    httplib::Client c("127.0.0.1", port);
    for (int i = 0; i < 600; ++i) {
      if (auto r = c.Get("/health"); r && r->status == 200) return;
      if (process.wait_for(0.1) >= 0) break;
    }
    ADD_FAILURE() << "the server did not come up: " << log();
  }
  std::string log() const {
    std::ifstream in(logs.file("err.txt"));
    return std::string(std::istreambuf_iterator<char>(in), {});
  }
  httplib::Client client() const {
    httplib::Client c("127.0.0.1", port);
    c.set_read_timeout(300);
    return c;
  }
  /// POST /v1/completions; status and parsed body (null when not JSON).
  std::pair<int, nlohmann::json> complete(const std::string& body, const httplib::Headers& headers = {}) const {
    auto r = client().Post("/v1/completions", headers, body, "application/json");
    if (!r) return {0, nlohmann::json{{"client_error", httplib::to_string(r.error())}}};
    return {r->status, nlohmann::json::parse(r->body, nullptr, false)};
  }
  std::map<std::string, double> metrics() const {
    auto r = client().Get("/metrics");
    return r ? parse_metrics(r->body) : std::map<std::string, double>{};
  }
};

}  // namespace olmo2::test
