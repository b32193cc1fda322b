// Speculative decoding is exact (docs/architecture.md §8): with a draft model that agrees
// (the target's own weights), one that does not (other random weights) and prompt lookup,
// every request of every sampling mode gets the bits plain decoding gives — tokens,
// log-probabilities and alternatives, text, finish reason — in one batch and alone, with
// pre-emption, prefix caching and chunked prefills, in fp32 and bf16, on OLMo 2 and on an
// Olmo 3 model with sliding windows. Also: the verification rows, the acceptance rule,
// prompt lookup, and the scheduler's room for drafts and its rollback.
#include <gtest/gtest.h>

#include "runtime/serve/nonfinite_answer.h"
#include "runtime/serve/scheduler.h"
#include "runtime/serve/speculative/verification.h"
#include "runtime/trace/trace_spec.h"
#include "tests/serve/speculative_fixture.h"

namespace olmo2 {
namespace {

using test::Answer;

ModelConfig olmo2_config() {
  ModelConfig c;
  c.vocab_size = 512, c.hidden_size = 64, c.intermediate_size = 128, c.num_hidden_layers = 2;
  c.num_attention_heads = 4, c.num_key_value_heads = 2, c.head_dim = 16, c.max_position_embeddings = 256;
  c.rms_norm_eps = 1e-6, c.rope_theta = 10000, c.eos_token_ids = {511};
  return c;
}

ModelConfig olmo3_config() {
  ModelConfig c = olmo2_config();
  c.architecture = "Olmo3ForCausalLM";
  c.num_hidden_layers = 4;
  c.layer_types = {AttentionType::Sliding, AttentionType::Sliding, AttentionType::Full, AttentionType::Sliding};
  c.sliding_window = 8;
  c.rope_full.theta = c.rope_sliding.theta = 10000;
  return c;
}

/// Proposers for a target of `config` (seed 5, std 0.2, `precision`).
std::vector<test::ProposerCase> proposers(const ModelConfig& config, Precision precision) {
  auto draft = [config, precision](uint64_t seed) {
    return [config, precision, seed]() -> std::shared_ptr<Proposer> {
      return std::make_shared<DraftModelProposer>(
          std::make_unique<Olmo2Model>(Olmo2Model::random(config, seed, 0.2f, precision)), 256, 4);
    };
  };
  return {{"a draft that agrees (the target's weights)", draft(5), 1},
          {"a draft that disagrees (other weights)", draft(99), -1},
          {"prompt lookup of 2-grams", [] { return std::make_shared<NgramProposer>(2); }, 0}};
}

/// Serves speculative_requests() on a random target of `config` without and with each
/// proposer (K = `k`), in one batch and alone, and checks every answer's bits.
void expect_exact(const ModelConfig& config, Precision precision, const SchedulerOptions& so, int32_t k,
                  bool alone_too, bool preempts = false) {
  const Olmo2Model target = Olmo2Model::random(config, 5, 0.2f, precision);
  std::vector<CompletionParams> batch = test::speculative_requests();
  const std::vector<Answer> plain = test::serve_speculative(target, so, nullptr, batch);
  // A stop string from the middle of a plain answer: the text must stop there either way.
  CompletionParams stopped = batch[0];
  const std::string& text = plain[0].choices[0].text;
  ASSERT_GE(text.size(), 8u);
  stopped.stop = {text.substr(text.size() / 2, 3)};
  batch.push_back(stopped);
  // A prompt that continues request 1 with its own answer: served after it (alone), its
  // prompt hits the blocks that request's verified positions filled.
  CompletionParams follow = batch[1];
  for (size_t t = 0; t < 12; ++t) follow.prompt.push_back(plain[1].choices[0].tokens.at(t).id);
  follow.max_tokens = 10;
  batch.push_back(follow);
  const std::vector<Answer> want = test::serve_speculative(target, so, nullptr, batch);
  EXPECT_EQ(want[want.size() - 2].choices[0].finish_reason, "stop");
  SchedulerOptions spec = so;
  spec.num_speculative_tokens = k;
  for (const test::ProposerCase& pc : proposers(config, precision)) {
    std::string scrape;
    const std::vector<Answer> got = test::serve_speculative(target, spec, pc.make(), batch, false, &scrape);
    test::expect_same_answers(got, want, pc.name + ", one batch");
    const double proposed = test::scraped(scrape, "olmo2_serve_spec_proposed_tokens_total");
    const double accepted = test::scraped(scrape, "olmo2_serve_spec_accepted_tokens_total");
    EXPECT_GT(proposed, 0) << pc.name;
    if (preempts) EXPECT_GT(test::scraped(scrape, "olmo2_serve_preemptions_total"), 0) << pc.name;
    EXPECT_LE(accepted, proposed) << pc.name;
    if (pc.agreement < 0) EXPECT_LT(accepted, proposed / 10) << pc.name;
    if (pc.agreement > 0) {  // plain greedy requests: every drafted token is the target's own choice
      std::string greedy;
      test::serve_speculative(target, spec, pc.make(), {batch[0], batch[1]}, false, &greedy);
      EXPECT_GT(test::scraped(greedy, "olmo2_serve_spec_proposed_tokens_total"), 0);
      EXPECT_EQ(test::scraped(greedy, "olmo2_serve_spec_accepted_tokens_total"),
                test::scraped(greedy, "olmo2_serve_spec_proposed_tokens_total"));
    }
    std::cout << "[speculative] " << pc.name << ": " << accepted << " of " << proposed << " drafted tokens accepted\n";
    if (alone_too) {
      std::string one_by_one;
      test::expect_same_answers(test::serve_speculative(target, spec, pc.make(), batch, true, &one_by_one), want,
                                pc.name + ", each request alone");
      if (so.prefix_caching) EXPECT_GE(test::scraped(one_by_one, "olmo2_serve_prefix_cache_hits_total"), 32) << pc.name;
    }
  }
}

const SchedulerOptions kRoomy{.num_blocks = 400, .block_size = 4, .max_running = 16, .max_batch_tokens = 40};

TEST(SpeculativeDecoding, ExactInFp32InABatchAndAlone) { expect_exact(olmo2_config(), Precision::FP32, kRoomy, 4, true); }

TEST(SpeculativeDecoding, ExactInBf16) { expect_exact(olmo2_config(), Precision::BF16, kRoomy, 3, false); }

TEST(SpeculativeDecoding, ExactWhenSequencesArePreemptedAndWithoutPrefixCaching) {
  SchedulerOptions small{.num_blocks = 28, .block_size = 4, .max_running = 16, .max_batch_tokens = 24,
                         .prefix_caching = false};
  expect_exact(olmo2_config(), Precision::FP32, small, 5, false, true);
}

TEST(SpeculativeDecoding, ExactOnOlmo3WithSlidingWindows) {
  expect_exact(olmo3_config(), Precision::FP32, kRoomy, 6, false);
}

/// `p` with `activations` and `interventions` (JSON as the API takes them; null: none).
CompletionParams traced(CompletionParams p, const ModelConfig& c, const nlohmann::json* activations,
                        const nlohmann::json* interventions) {
  auto spec = std::make_shared<trace::TraceSpec>(trace::parse_trace_request(activations, interventions, c));
  spec->prompt_len = static_cast<int64_t>(p.prompt.size());
  p.trace = spec;
  return p;
}

TEST(SpeculativeDecoding, InterventionsApplyToAcceptedPositionsAsWithoutAndReadsDoNotSpeculate) {
  using nlohmann::json;
  const ModelConfig c = olmo2_config();
  const Olmo2Model target = Olmo2Model::random(c, 5, 0.2f);
  std::vector<float> v(static_cast<size_t>(c.hidden_size));
  for (size_t i = 0; i < v.size(); ++i) v[i] = 0.05f * static_cast<float>(static_cast<int>(i % 7) - 3);
  std::vector<uint8_t> bytes(v.size() * 4);
  std::memcpy(bytes.data(), v.data(), bytes.size());
  const json steer = json::array({{{"type", "add"}, {"name", "layers.1.layer_output"}, {"coefficient", 4.0},
                                   {"vector", trace::base64_encode(bytes)}, {"positions", "generated"}},
                                  {{"type", "ablate_head"}, {"layer", 0}, {"head", 1},
                                   {"positions", {{"from", 14}}}}});
  const json reads = json::array({"layers.0.layer_output"});
  std::vector<CompletionParams> batch = {
      traced(test::request(test::repeated(test::ids(5, 41), 2), 1, 0.0, 1, 16), c, nullptr, &steer),
      traced(test::request(test::ids(8, 42), 1, 0.9, 2, 16, 30), c, nullptr, &steer),
      traced(test::request(test::ids(6, 43), 1, 0.0, 3, 10), c, &reads, nullptr)};
  const std::vector<Answer> want = test::serve_speculative(target, kRoomy, nullptr, batch);
  SchedulerOptions spec = kRoomy;
  spec.num_speculative_tokens = 4;
  for (const test::ProposerCase& pc : proposers(c, Precision::FP32)) {
    std::string scrape;
    const std::vector<Answer> got = test::serve_speculative(target, spec, pc.make(), batch, false, &scrape);
    test::expect_same_answers(got, want, pc.name + ", steered");
    if (pc.agreement != 0) EXPECT_GT(test::scraped(scrape, "olmo2_serve_spec_proposed_tokens_total"), 0);
    // The request that reads activations decodes without drafts: alone, nothing is proposed.
    test::serve_speculative(target, spec, pc.make(), {batch[2]}, false, &scrape);
    EXPECT_EQ(test::scraped(scrape, "olmo2_serve_spec_proposed_tokens_total"), 0) << pc.name;
  }
}

TEST(SpeculativeVerification, RowsAskWhatPlainDecodingWouldAsk) {
  PlannedSequence p;
  p.seq_id = 3;
  p.sample = true;
  p.tokens = {40, 7, 9, 7};  // the pending token 40, then drafts 7, 9, 7
  p.draft = 3;
  p.selection.draw = 5;
  p.selection.adjust.frequency_penalty = 0.5;
  p.selection.output_counts = {{7, 1}, {40, 2}};
  const std::vector<SelectionRequest> rows = verification_requests(p);
  ASSERT_EQ(rows.size(), 4u);
  using Counts = std::vector<std::pair<int32_t, int32_t>>;
  EXPECT_EQ(rows[0].draw, 5u);
  EXPECT_EQ(rows[0].output_counts, (Counts{{7, 1}, {40, 2}}));
  EXPECT_EQ(rows[1].draw, 6u);
  EXPECT_EQ(rows[1].output_counts, (Counts{{7, 2}, {40, 2}}));
  EXPECT_EQ(rows[2].output_counts, (Counts{{7, 2}, {9, 1}, {40, 2}}));
  EXPECT_EQ(rows[3].draw, 8u);
  EXPECT_EQ(rows[3].output_counts, (Counts{{7, 3}, {9, 1}, {40, 2}}));
  // Without penalties no counts are carried.
  p.selection.adjust.frequency_penalty = 0;
  p.selection.output_counts.clear();
  for (const SelectionRequest& r : verification_requests(p)) EXPECT_TRUE(r.output_counts.empty());
}

TEST(SpeculativeVerification, AcceptsUpToTheFirstDifferenceAndEmitsTheTargetsChoice) {
  PlannedSequence p;
  p.sample = true;
  p.tokens = {40, 7, 9, 7};
  p.draft = 3;
  auto ids = [&](std::vector<int32_t> chosen) {
    std::vector<SelectedToken> rows;
    for (int32_t id : chosen) rows.push_back({id, -0.5f, {}});
    std::vector<int32_t> out;
    for (const SelectedToken& t : accept_drafts(p, rows)) out.push_back(t.id);
    return out;
  };
  EXPECT_EQ(ids({8, 9, 7, 1}), (std::vector<int32_t>{8}));            // the first draft rejected
  EXPECT_EQ(ids({7, 9, 2, 1}), (std::vector<int32_t>{7, 9, 2}));      // two accepted, then the target's 2
  EXPECT_EQ(ids({7, 9, 7, 11}), (std::vector<int32_t>{7, 9, 7, 11}));  // all accepted, plus the bonus token
  EXPECT_TRUE(ids({7, kNonFiniteToken, 7, 1}).empty());               // redone without drafts
  p.tokens = {40};
  p.draft = 0;
  EXPECT_EQ(ids({kNonFiniteToken}), (std::vector<int32_t>{kNonFiniteToken}));  // plain decoding's error path
  EXPECT_THROW(ids({1, 2}), Error);
}

TEST(PromptLookup, ProposesWhatFollowedTheLatestEarlierOccurrence) {
  const std::vector<int32_t> t = {1, 2, 3, 4, 9, 1, 2, 3, 5, 6, 1, 2, 3};
  EXPECT_EQ(ngram_lookup(t, 3, 4), (std::vector<int32_t>{5, 6, 1, 2}));  // the latest, not the first
  EXPECT_EQ(ngram_lookup(t, 3, 1), (std::vector<int32_t>{5}));
  EXPECT_EQ(ngram_lookup(t, 4, 4), (std::vector<int32_t>{}));            // 6 1 2 3 occurs only at the end
  EXPECT_EQ(ngram_lookup(std::vector<int32_t>{5, 5, 5}, 1, 3), (std::vector<int32_t>{5}));     // overlapping: what follows the middle 5
  EXPECT_TRUE(ngram_lookup(std::vector<int32_t>{1, 2}, 2, 3).empty());
}

TEST(SpeculativeScheduling, RoomWithinMaxTokensAndMinTokensAndRollbackOfRejectedBlocks) {
  Scheduler s({.num_blocks = 40, .block_size = 4, .max_running = 4, .max_batch_tokens = 32,
               .num_speculative_tokens = 6});
  SchedSequence a;
  a.id = 1;
  a.tokens = {1, 2, 3, 4, 5};
  a.prompt_len = 5;
  a.speculate = true;
  a.max_tokens = 5;
  a.min_tokens = 3;
  s.add(a);
  StepPlan p = s.schedule();  // the prompt: no room for drafts
  ASSERT_EQ(p.sequences.size(), 1u);
  EXPECT_EQ(p.sequences[0].lookahead, 0);
  s.step_done(p, std::vector<SelectedToken>{{10, 0.0f, {}}});
  p = s.schedule();  // generated 1 < min_tokens 3: rows at draws 1 … 2 only, so one draft
  EXPECT_EQ(p.sequences[0].lookahead, 1);
  EXPECT_EQ(p.sequences[0].blocks.size(), 2u);  // positions 5 … 6
  p.sequences[0].tokens.push_back(11);
  p.sequences[0].draft = 1;
  s.step_done(p, std::vector<std::vector<SelectedToken>>{{{11, 0.0f, {}}, {12, 0.0f, {}}}});  // accepted + bonus
  EXPECT_EQ(s.find(1)->computed, 7);
  EXPECT_EQ(s.find(1)->tokens.size(), 8u);
  p = s.schedule();  // generated 3 of max_tokens 5: one draft at most
  EXPECT_EQ(p.sequences[0].lookahead, 1);
  const int64_t free_before = s.free_blocks();
  p.sequences[0].tokens.push_back(30);
  p.sequences[0].draft = 1;
  s.step_done(p, std::vector<std::vector<SelectedToken>>{{{31, 0.0f, {}}}});  // rejected: the target's 31
  EXPECT_EQ(s.find(1)->computed, 8);
  EXPECT_EQ(s.find(1)->tokens.back(), 31);
  EXPECT_EQ(s.find(1)->blocks.size(), 2u);  // positions 0 … 7: the block of the rejected position 8 is released
  EXPECT_EQ(s.free_blocks(), free_before + 1);
}

}  // namespace
}  // namespace olmo2
