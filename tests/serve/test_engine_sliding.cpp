// The serving engine on a tiny random Olmo 3 model with sliding-window layers
// (docs/architecture.md §8, "Sliding-window KV (KV groups)"): six layers, two full and
// four sliding with a window of 8 — one full KV group and two sliding ones of two slots.
// Prompts longer than the window, prefilled in chunks and served in one batch, with the
// sliding groups' blocks released as the window passes (read through the paged path with
// −1 entries), give the greedy tokens of `generate` (a contiguous cache, nothing freed,
// the BLAS attention); also in a pool so small that sequences are pre-empted; prompts
// sharing a prefix longer than the window get the same bits with prefix caching (hits
// taking the full blocks and the sliding window before them) as without; and on the
// device (a GPU, label gpu, or the emulated device, label unit, there with the CPU's bits).
#include <gtest/gtest.h>

#include "ops/device_emulation.h"
#include "runtime/generation/generate.h"
#include "runtime/model/parameters.h"
#include "runtime/train/checkpoint.h"
#include "tests/ops/cuda/cuda_test_util.h"
#include "tests/serve/choices_fixture.h"
#include "tests/serve/engine_fixture.h"

namespace olmo2 {
namespace {

constexpr AttentionType F = AttentionType::Full, S = AttentionType::Sliding;

const Olmo2Model& model() {
  static const Olmo2Model m = [] {
    ModelConfig c;
    c.architecture = "Olmo3ForCausalLM";
    c.vocab_size = 512, c.hidden_size = 64, c.intermediate_size = 128, c.num_hidden_layers = 6;
    c.num_attention_heads = 4, c.num_key_value_heads = 2, c.head_dim = 16, c.max_position_embeddings = 256;
    c.rms_norm_eps = 1e-6, c.rope_theta = 10000, c.eos_token_ids = {511};
    c.layer_types = {S, S, F, S, S, F};
    c.sliding_window = 8;
    c.rope_full.theta = c.rope_sliding.theta = 10000;
    return Olmo2Model::random(c, 31, 0.2f);
  }();
  return m;
}

const Tokenizer& tokenizer() {
  static const Tokenizer t = Tokenizer::from_file(test::source_path("data/dolma2-tokenizer.json"));
  return t;
}

/// Four prompts of 9 to 30 tokens (all past the window).
std::vector<std::vector<int32_t>> prompts() {
  std::vector<std::vector<int32_t>> out;
  for (int n : {30, 9, 21, 17}) {
    std::vector<int32_t> p;
    for (int i = 0; i < n; ++i) p.push_back(static_cast<int32_t>((37 * i + 11 * n) % 500));
    out.push_back(p);
  }
  return out;
}

constexpr int64_t kMaxTokens = 14;

/// The prompts served greedily on `served` in one batch, in blocks of 4 and chunks of 16.
std::vector<test::Outcome> serve(const Olmo2Model& served, int64_t num_blocks) {
  std::vector<CompletionParams> requests;
  for (const auto& p : prompts()) requests.push_back(test::greedy_request(p, kMaxTokens));
  const SchedulerOptions so{.num_blocks = num_blocks, .block_size = 4, .max_running = 4, .max_batch_tokens = 16};
  return test::serve_all(served, &tokenizer(), EngineRanks{}, so, requests);
}

void expect_generates_tokens(int64_t num_blocks) {
  const KVLayout layout(model().config());
  ASSERT_EQ(layout.windows(), (std::vector<int64_t>{0, 8, 8}));
  const int64_t max_tokens = kMaxTokens;
  std::vector<CompletionParams> requests;
  for (const auto& p : prompts()) requests.push_back(test::greedy_request(p, max_tokens));
  const std::vector<test::Outcome> got = serve(model(), num_blocks);
  ASSERT_EQ(got.size(), requests.size());
  for (size_t i = 0; i < requests.size(); ++i) {
    const GenerateResult want = generate_greedy(model(), requests[i].prompt, max_tokens);
    std::vector<int32_t> ids;
    for (const SelectedToken& t : got[i].tokens) ids.push_back(t.id);
    EXPECT_EQ(ids, want.output_ids) << "request " << i << " (" << requests[i].prompt.size() << " prompt tokens), "
                                    << num_blocks << " blocks";
    EXPECT_TRUE(got[i].error.empty()) << got[i].error;
  }
}

TEST(EngineSliding, ServedGreedyTokensEqualGenerateWithChunksAndBatches) { expect_generates_tokens(200); }

TEST(EngineSliding, AndWhenSequencesArePreempted) {
  // One 44-token sequence needs at most 11 + 2 · 7 ids; the four together do not fit.
  expect_generates_tokens(48);
}

TEST(EngineSliding, PrefixCachingGivesTheSameBitsAsNone) {
  std::vector<CompletionParams> batch;
  for (int r = 0; r < 4; ++r) {  // a 22-token prefix (5 full blocks, past the window), then 3 + r own tokens
    std::vector<int32_t> p;
    for (int i = 0; i < 22; ++i) p.push_back(static_cast<int32_t>((29 * i + 5) % 500));
    for (int i = 0; i < 3 + r; ++i) p.push_back(static_cast<int32_t>(400 + 7 * r + i));
    batch.push_back(test::greedy_request(p, 6, 2));
  }
  std::vector<std::vector<test::Answer>> runs;  // caching on, off
  std::vector<std::string> scrapes;
  for (bool caching : {true, false}) {
    EngineOptions o;
    o.scheduler = {.num_blocks = 120, .block_size = 4, .max_running = 4, .max_batch_tokens = 16,
                   .prefix_caching = caching};
    monitoring::ServeMetrics metrics;
    ServingEngine engine(model(), &tokenizer(), &metrics, o, EngineRanks{});
    EXPECT_EQ(engine.prefix_caching(), caching);
    test::EngineThread running(engine);
    std::vector<test::Answer> answers;
    for (const CompletionParams& p : batch) answers.push_back(test::run_batch(engine, {p})[0]);  // one by one
    for (const test::Answer& a : test::run_batch(engine, batch)) answers.push_back(a);          // all at once
    running.stop();
    runs.push_back(std::move(answers));
    scrapes.push_back(metrics.scrape());
  }
  for (size_t i = 0; i < runs[0].size(); ++i) {
    ASSERT_TRUE(runs[0][i].error.empty() && runs[1][i].error.empty()) << runs[0][i].error << runs[1][i].error;
    test::expect_same_bits(runs[0][i].choices.at(0), runs[1][i].choices.at(0), "answer " + std::to_string(i));
  }
  const GenerateResult want = generate_greedy(model(), batch[3].prompt, 6);
  std::vector<int32_t> ids;
  for (const SelectedToken& t : runs[0][3].choices.at(0).tokens) ids.push_back(t.id);
  EXPECT_EQ(ids, want.output_ids);
  // One by one, every request after the first finds the prefix's 5 full blocks (20 tokens).
  EXPECT_GE(test::scraped(scrapes[0], "olmo2_serve_prefix_cache_hits_total"), 20.0 * 3) << scrapes[0];
  EXPECT_EQ(test::scraped(scrapes[1], "olmo2_serve_prefix_cache_hits_total"), 0);
}

TEST(EngineSliding, OnTheDevice) {
  OLMO2_REQUIRE_DEVICE();
  test::TempDir dir;
  CheckpointContents contents;
  contents.config = model().config();
  Olmo2Model copy = Olmo2Model::random(model().config(), 31, 0.2f);  // the same weights, written out
  contents.model_tensors = hf_named_tensors(copy.mutable_weights(), contents.config);
  contents.tokenizer_file = test::source_path("data/dolma2-tokenizer.json");
  const std::string path = save_checkpoint(dir.path(), 0, contents, 0);
  const Olmo2Model device =
      Olmo2Model::load(path, ShardSpec::whole(model().config()), std::nullopt, Device::CUDA);
  const std::vector<test::Outcome> got = serve(device, 48);
  const std::vector<test::Outcome> cpu = serve(model(), 48);
  for (size_t i = 0; i < got.size(); ++i) {
    const GenerateResult want = generate_greedy(model(), prompts()[i], kMaxTokens);
    std::vector<int32_t> ids;
    for (const SelectedToken& t : got[i].tokens) ids.push_back(t.id);
    EXPECT_EQ(ids, want.output_ids) << "request " << i;
    // The emulated device runs the CPU kernels: the CPU's bits.
    if (ops::device_emulated()) {
      EXPECT_EQ(test::bits(got[i].tokens), test::bits(cpu[i].tokens)) << "request " << i;
    }
  }
}

}  // namespace
}  // namespace olmo2
