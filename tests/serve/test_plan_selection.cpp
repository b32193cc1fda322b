// The step plan's selection fields (min_p, logits adjustments, banned ids, targets) and
// prompt-logprob fields cross ranks bit for bit, a sequence's trace spec with it
// (docs/architecture.md §13), and the step results carry the scored prompt positions
// after the sampled tokens (docs/architecture.md §8); a constraint's allowed-token mask crosses
// as its ids or its words, whichever is shorter (§8, "Structured outputs").
#include <gtest/gtest.h>

#include <bit>
#include <memory>
#include <tuple>

#include "core/error.h"
#include "runtime/serve/serve_plan.h"

namespace olmo2 {
namespace {

auto selection_fields(const PlannedSequence& s) {
  const SelectionRequest& r = s.selection;
  std::vector<std::pair<int32_t, uint32_t>> bias;  // floats by their bits
  for (const auto& [id, b] : r.adjust.logit_bias) bias.emplace_back(id, std::bit_cast<uint32_t>(b));
  return std::tuple(std::bit_cast<uint64_t>(r.params.min_p), r.target, std::bit_cast<uint64_t>(r.adjust.presence_penalty),
                    std::bit_cast<uint64_t>(r.adjust.frequency_penalty),
                    std::bit_cast<uint64_t>(r.adjust.repetition_penalty), bias, r.banned, r.prompt_ids,
                    r.output_counts, s.score_begin, s.score_end, s.prompt_logprobs, s.next_token, s.tokens, s.blocks);
}

TEST(PlanSelection, AdjustmentsAndPromptScoringRoundTripBitForBit) {
  StepPlan p;
  PlannedSequence a;
  a.seq_id = 3, a.tokens = {9, 8, 7, 6}, a.blocks = {1}, a.sample = true;
  a.selection.params = {.temperature = 0.9, .top_k = 0, .top_p = 1.0, .min_p = 0.1 + 0.2, .seed = 5};
  a.selection.adjust.logit_bias = {{0, -100.0f}, {17, 0.1f}, {100351, 3.3e-7f}};
  a.selection.adjust.presence_penalty = -1.9999999, a.selection.adjust.frequency_penalty = 0.3;
  a.selection.adjust.repetition_penalty = 1.0 / 3.0;
  a.selection.banned = {100257, 100265};
  a.selection.prompt_ids = {6, 7, 8, 9};
  a.selection.output_counts = {{4, 1}, {2000, 65536}};
  a.score_begin = 1, a.score_end = 4, a.prompt_logprobs = 20, a.next_token = 100000;
  PlannedSequence b;
  b.seq_id = 4, b.tokens = {2}, b.blocks = {0}, b.selection.target = 77;
  p.sequences = {a, b};
  const std::vector<int64_t> d = encode_plan(p);
  const StepPlan q = decode_plan(d);
  ASSERT_EQ(q.sequences.size(), 2u);
  EXPECT_EQ(selection_fields(q.sequences[0]), selection_fields(a));
  EXPECT_EQ(selection_fields(q.sequences[1]), selection_fields(b));
  EXPECT_EQ(q.sequences[0].selection.params.min_p, 0.1 + 0.2);
  // A plan without adjustments carries no lists: one fixed block per sequence (after
  // the header: shutdown, micro-batches, the copy count (no copies), the sequence count;
  // the entry's id, micro-batch, start, sample and draft count), an untraced sequence's
  // trace flag included.
  StepPlan plain;
  plain.sequences = {b};
  EXPECT_EQ(encode_plan(plain).size(), 4u + 5 + 16 + 7 + 2);
  // Truncated anywhere, a negative list length or a scored range past the chunk: refused.
  for (size_t cut = 0; cut < d.size(); cut += 7) {
    EXPECT_THROW(decode_plan(std::span<const int64_t>(d.data(), cut)), Error) << cut;
  }
  std::vector<int64_t> bad = encode_plan(plain);
  bad[4 + 5 + 11] = -1;  // the logit_bias count
  EXPECT_THROW(decode_plan(bad), Error);
  PlannedSequence past = b;
  past.score_end = 2;  // one token in the chunk
  plain.sequences = {past};
  EXPECT_THROW(decode_plan(encode_plan(plain)), Error);
}

TEST(PlanSelection, TracedSequencesCarryTheirSpecAndFirstRecordedPosition) {
  auto spec = std::make_shared<trace::TraceSpec>();
  spec->prompt_len = 4;
  spec->reads.resize(2);
  spec->reads[0].name = "layer_output", spec->reads[0].site = TapSite::LayerOutput, spec->reads[0].layers = {0, 2};
  spec->reads[1].name = "logits", spec->reads[1].site = TapSite::LmHeadOutput;
  spec->reads[1].reduce = trace::Reduce::Norm, spec->reads[1].positions.kind = trace::PositionSelector::Kind::Generated;
  trace::Intervention add;
  add.layers = {1};
  add.vector = {0.1f, -0.0f, 3.4e38f, 1e-45f};  // bits that a round trip through text would lose
  add.coefficient = 0.3f;
  add.positions.kind = trace::PositionSelector::Kind::List, add.positions.list = {0, 3};
  spec->interventions = {add};
  PlannedSequence a;
  a.seq_id = 1, a.tokens = {9, 8}, a.blocks = {1}, a.start = 2, a.sample = true;
  a.trace = spec, a.record_from = 3;
  PlannedSequence b;  // untraced, after a traced one
  b.seq_id = 2, b.tokens = {7}, b.blocks = {0}, b.next_token = 5;
  StepPlan p;
  p.sequences = {a, b};
  const std::vector<int64_t> d = encode_plan(p);
  const StepPlan q = decode_plan(d);
  ASSERT_EQ(q.sequences.size(), 2u);
  ASSERT_NE(q.sequences[0].trace, nullptr);
  EXPECT_EQ(q.sequences[0].record_from, 3);
  EXPECT_EQ(q.sequences[1].trace, nullptr);
  EXPECT_EQ((std::tuple(q.sequences[1].seq_id, q.sequences[1].tokens, q.sequences[1].next_token)),
            (std::tuple(int64_t{2}, std::vector<int32_t>{7}, 5)));
  const trace::TraceSpec& t = *q.sequences[0].trace;
  EXPECT_EQ(t.prompt_len, 4);
  ASSERT_EQ(t.reads.size(), 2u);
  EXPECT_EQ((std::tuple(t.reads[0].name, t.reads[0].site, t.reads[0].layers)),
            (std::tuple(std::string("layer_output"), TapSite::LayerOutput, std::vector<int64_t>{0, 2})));
  EXPECT_EQ((std::tuple(t.reads[1].name, t.reads[1].reduce, t.reads[1].positions.kind)),
            (std::tuple(std::string("logits"), trace::Reduce::Norm, trace::PositionSelector::Kind::Generated)));
  ASSERT_EQ(t.interventions.size(), 1u);
  EXPECT_EQ(t.intervention_key(), spec->intervention_key()) << "every intervention bit";
  std::vector<uint32_t> bits;
  for (float f : t.interventions[0].vector) bits.push_back(std::bit_cast<uint32_t>(f));
  EXPECT_EQ(bits, (std::vector<uint32_t>{std::bit_cast<uint32_t>(0.1f), 0x80000000u, std::bit_cast<uint32_t>(3.4e38f),
                                         1u}));
  EXPECT_EQ(t.interventions[0].positions.list, (std::vector<int64_t>{0, 3}));
  // The untraced sequence costs one word: the plan without a's trace is shorter by the
  // spec's words and record_from.
  std::vector<int64_t> words;
  spec->encode(words);
  PlannedSequence plain_a = a;
  plain_a.trace = nullptr;
  p.sequences = {plain_a, b};
  EXPECT_EQ(encode_plan(p).size() + words.size() + 1, d.size());
  // Truncated inside the spec, or a flag other than 0 and 1: refused.
  for (size_t cut = 4 + 5 + 16 + 5; cut < d.size(); cut += 3) {
    EXPECT_THROW(decode_plan(std::span<const int64_t>(d.data(), cut)), Error) << cut;
  }
  std::vector<int64_t> bad = d;
  bad[4 + 5 + 16 + 4] = 2;  // a's trace flag
  EXPECT_THROW(decode_plan(bad), Error);
}

TEST(PlanSelection, DraftedTokensCrossRanksAndEachVerifiedRowHasItsResult) {
  PlannedSequence s;
  s.seq_id = 8, s.tokens = {40, 7, 9}, s.blocks = {2, 5}, s.sample = true, s.draft = 2, s.lookahead = 4;
  s.selection.logprobs = 1;
  PlannedSequence t;
  t.seq_id = 9, t.tokens = {3}, t.blocks = {0}, t.sample = true;
  StepPlan p;
  p.sequences = {s, t};
  const StepPlan q = decode_plan(encode_plan(p));
  EXPECT_EQ(q.sequences[0].draft, 2);
  EXPECT_EQ(q.sequences[0].lookahead, 0);  // rank 0's bookkeeping does not travel
  EXPECT_EQ(q.sequences[1].draft, 0);
  EXPECT_EQ(q.chosen_rows(), 4);
  EXPECT_EQ(results_size(q), 3 * 2 + 1);
  std::vector<SelectedToken> rows = {{7, -0.5f, {{-0.5f, 7}}}, {9, -1.0f, {}}, {4, -2.0f, {{-2.0f, 4}}}, {1, -3.0f, {}}};
  const StepResults r = encode_results(q, rows);
  const std::vector<SelectedToken> back = decode_results(q, r.ids, r.logprobs);
  ASSERT_EQ(back.size(), 4u);
  for (size_t i = 0; i < 4; ++i) EXPECT_EQ(back[i].id, rows[i].id);
  EXPECT_EQ(back[2].logprob, -2.0f);
  // A draft count of the whole chunk, or on a sequence that samples nothing: refused.
  for (int32_t draft : {3, -1}) {
    p.sequences[0].draft = draft;
    EXPECT_THROW(decode_plan(encode_plan(p)), Error) << draft;
  }
  p.sequences[0].draft = 1, p.sequences[0].sample = false;
  EXPECT_THROW(decode_plan(encode_plan(p)), Error);
}

TEST(PlanSelection, ResultsCarryScoredPromptPositionsAfterTheTokens) {
  StepPlan p;
  p.sequences.resize(3);
  p.sequences[0].sample = true, p.sequences[0].selection.logprobs = 1;
  p.sequences[1].tokens = {1, 2, 3}, p.sequences[1].score_begin = 0, p.sequences[1].score_end = 2;
  p.sequences[1].prompt_logprobs = 2;
  p.sequences[2].sample = true;
  p.sequences[2].tokens = {4, 5}, p.sequences[2].score_begin = 1, p.sequences[2].score_end = 2;
  EXPECT_EQ(results_size(p), 2 + 1 + 2 * 3 + 1);
  const std::vector<SelectedToken> tokens = {{5, -0.5f, {{-0.5f, 5}}}, {6, -1.0f, {}}};
  const std::vector<std::vector<SelectedToken>> prompt = {
      {}, {{2, -2.0f, {{-0.1f, 9}, {-2.0f, 2}}}, {3, -3.0f, {{-0.2f, 8}}}}, {{5, -4.0f, {}}}};
  const StepResults d = encode_results(p, tokens, prompt);
  EXPECT_EQ(d.ids, (std::vector<int32_t>{5, 5, 6, 2, 9, 2, 3, 8, -1, 5}));
  EXPECT_EQ(d.logprobs, (std::vector<float>{-0.5f, -0.5f, -1.0f, -2.0f, -0.1f, -2.0f, -3.0f, -0.2f, 0.0f, -4.0f}));
  std::vector<std::vector<SelectedToken>> back;
  const std::vector<SelectedToken> out = decode_results(p, d.ids, d.logprobs, &back);
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[1].id, 6);
  ASSERT_EQ(back.size(), 3u);
  EXPECT_TRUE(back[0].empty());
  ASSERT_EQ(back[1].size(), 2u);
  EXPECT_EQ(back[1][1].id, 3);
  EXPECT_EQ(back[1][1].logprob, -3.0f);
  ASSERT_EQ(back[1][1].top.size(), 1u) << "the missing alternative is dropped";
  EXPECT_EQ(back[1][1].top[0].id, 8);
  ASSERT_EQ(back[2].size(), 1u);
  EXPECT_EQ(back[2][0].logprob, -4.0f);
  EXPECT_THROW(encode_results(p, tokens, {}), Error) << "scored positions without their results";
  EXPECT_THROW(encode_results(p, tokens, {{}, {prompt[1][0]}, prompt[2]}), Error) << "one position short";
}

TEST(PlanSelection, AllowedTokenMasksCrossAsIdsOrWords) {
  // A vocabulary of 100352 ids: 1568 words. Few allowed ids (a choice grammar's first
  // bytes) travel as ids, many (a string's inside) as the words; both decode to the mask.
  const size_t words = 100352 / 64;
  auto few = std::make_shared<std::vector<uint64_t>>(words, 0);
  for (int64_t id : {0, 63, 64, 100257, 100351}) (*few)[static_cast<size_t>(id / 64)] |= uint64_t{1} << (id % 64);
  auto many = std::make_shared<std::vector<uint64_t>>(words, ~uint64_t{0});
  (*many)[3] = 0x8000000000000001ull;
  (*many)[words - 1] = 0;
  StepPlan p;
  PlannedSequence a, b, c;
  a.seq_id = 1, a.tokens = {5}, a.blocks = {0}, a.sample = true, a.selection.allowed = few;
  b.seq_id = 2, b.tokens = {6}, b.blocks = {1}, b.sample = true, b.selection.allowed = many;
  c.seq_id = 3, c.tokens = {7}, c.blocks = {2}, c.sample = true;  // unconstrained
  p.sequences = {a, b, c};
  const std::vector<int64_t> d = encode_plan(p);
  const StepPlan q = decode_plan(d);
  ASSERT_EQ(q.sequences.size(), 3u);
  ASSERT_TRUE(q.sequences[0].selection.allowed && q.sequences[1].selection.allowed);
  EXPECT_EQ(*q.sequences[0].selection.allowed, *few);
  EXPECT_EQ(*q.sequences[1].selection.allowed, *many);
  EXPECT_FALSE(q.sequences[2].selection.allowed);
  EXPECT_TRUE(q.sequences[0].selection.adjusted());
  EXPECT_FALSE(q.sequences[2].selection.adjusted());
  // Sizes: no mask one word; 5 ids 3 + 5; the words 2 + 1568.
  StepPlan one;
  one.sequences = {c};
  const size_t base = encode_plan(one).size();
  one.sequences = {a};
  EXPECT_EQ(encode_plan(one).size(), base + 2 + 5);
  one.sequences = {b};
  EXPECT_EQ(encode_plan(one).size(), base + 1 + words);
  // Truncated inside a mask, an unknown form, an id past the words: refused.
  for (size_t cut = 4 + 5 + 15; cut < d.size(); cut += 97) {
    EXPECT_THROW(decode_plan(std::span<const int64_t>(d.data(), cut)), Error) << cut;
  }
  one.sequences = {a};
  std::vector<int64_t> bad = encode_plan(one);
  const size_t form = 4 + 5 + 15;
  ASSERT_EQ(bad[form], 1);
  bad[form] = 3;
  EXPECT_THROW(decode_plan(bad), Error);
  bad[form] = 1;
  bad[form + 3 + 4] = static_cast<int64_t>(words) * 64;  // the last id, one past the mask
  EXPECT_THROW(decode_plan(bad), Error);
}

}  // namespace
}  // namespace olmo2
