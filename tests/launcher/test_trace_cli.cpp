// `olmo2 trace` and `olmo2 generate --activations` (docs/architecture.md §12, §13): every
// named activation of the fixtures' sequences equals transformers' forward hooks
// (tests/golden/make_activation_fixtures.py) within 1e-4 (scaled by tests/trace/activation_fixture.h
// for entries beyond 50), on one process and under
// mpirun at tp 2, pp 2 and dp 2; generate reads the same rows while printing transformers'
// greedy continuation; bad prompts files and names are one error naming line and field.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "runtime/io/safetensors.h"
#include "runtime/trace/trace_spec.h"
#include "tests/test_util.h"
#include "tests/trace/activation_fixture.h"

namespace olmo2 {
namespace {

using json = nlohmann::json;
using ::testing::HasSubstr;

constexpr double kTolerance = 1e-4;

/// Runs `mpirun -np N olmo2 ARGS` (oversubscribed, as root allowed), with a session
/// directory of this process's own: Open MPI 4.1 makes its default one with a
/// check-then-mkdir that two concurrent tests' jobs can race on.
test::RunResult mpirun(int np, const std::string& args) {
  static const std::string session = [] {
    char name[] = "/tmp/olmo2-ompi-XXXXXX";
    const char* made = mkdtemp(name);
    return std::string(made ? made : "/tmp");
  }();
  return test::run_olmo2_with("env OMPI_MCA_orte_tmpdir_base=" + session + " " + OLMO2_MPIEXEC + " -np " +
                                  std::to_string(np) + " --oversubscribe --allow-run-as-root " + OLMO2_BINARY,
                              args);
}

/// A fixture model with its activations.{json,safetensors}.
struct Fixture {
  std::string dir;
  json meta;
  SafetensorsFile ref;
  explicit Fixture(const std::string& name)
      : dir(test::source_path("tests/golden/fixtures/" + name)),
        meta(json::parse(std::ifstream(dir + "/activations.json"))),
        ref(dir + "/activations.safetensors") {}
  std::vector<int> ids(const char* key) const { return meta[key].get<std::vector<int>>(); }
  int layers() const { return meta["dims"]["L"].get<int>(); }
};

/// Every name the fixtures hold, as --activations asks for them (reduce none, all positions).
std::string every_name() {
  json names = json::array();
  for (const char* n : {"layer_input", "attention_queries", "attention_keys", "attention_values",
                        "attention_probabilities", "attention_head_outputs", "attention_premix", "attention_output",
                        "layer_mid", "mlp_input", "mlp_neurons", "mlp_output", "layer_output"}) {
    names.push_back(std::string("layers.*.") + n);
  }
  for (const char* n : {"token_embeddings", "final_norm_output", "lm_head_output", "logits"}) names.push_back(n);
  return names.dump();
}

/// Largest |result − reference|, divided by test::tolerance_scale of the reference,
/// of read `key` against the fixture's tensor `ref_name`
/// (default "read.<key>"): the result is the reference's leading box (a prompt that is a
/// prefix of the fixture's sequence covers its first rows; attention probabilities its
/// first keys too). Adds a failure and returns infinity when the shapes do not fit.
double max_diff(const json& entry, const Fixture& fx, const std::string& key, std::string ref_name = "") {
  if (ref_name.empty()) ref_name = "read." + key;
  const TensorInfo& t = fx.ref.tensors().at(ref_name);
  const std::vector<int64_t> shape = entry["shape"].get<std::vector<int64_t>>();
  const std::vector<float> got = test::read_values(entry);
  int64_t count = 1;
  for (int64_t s : shape) count *= s;
  bool fits = shape.size() == t.shape.size() && count == static_cast<int64_t>(got.size()) &&
              entry["dtype"] == "float32" && entry["reduce"] == "none";
  for (size_t d = 0; fits && d < shape.size(); ++d) fits = shape[d] <= t.shape[d];
  if (!fits) {
    ADD_FAILURE() << key << ": result " << entry.dump().substr(0, 200) << " does not fit the reference shape";
    return INFINITY;
  }
  const float* want = reinterpret_cast<const float*>(fx.ref.data(t));
  double worst = 0, scale = 0;
  for (int64_t i = 0; i < count; ++i) {
    int64_t rest = i, at = 0, stride = 1;  // the same multi-index in the reference
    for (size_t d = shape.size(); d-- > 0;) {
      at += (rest % shape[d]) * stride;
      rest /= shape[d];
      stride *= t.shape[d];
    }
    worst = std::max(worst, ::olmo2::test::abs_diff(static_cast<double>(got[i]), want[at]));
    scale = std::max(scale, std::fabs(static_cast<double>(want[at])));
  }
  return worst / test::tolerance_scale(scale);
}

/// Largest relative difference of a norm read `entry` ([P]) from the L2 norms of the rows
/// of the fixture's 2-d tensor `ref_name` ([T, F], P ≤ T).
double max_norm_diff(const json& entry, const Fixture& fx, const std::string& ref_name) {
  const TensorInfo& t = fx.ref.tensors().at(ref_name);
  const std::vector<float> got = test::read_values(entry);
  if (entry["shape"].size() != 1 || got.size() > static_cast<size_t>(t.shape[0]) || got.empty()) {
    ADD_FAILURE() << ref_name << ": norm read " << entry.dump().substr(0, 200);
    return INFINITY;
  }
  const float* want = reinterpret_cast<const float*>(fx.ref.data(t));
  double worst = 0;
  for (size_t p = 0; p < got.size(); ++p) {
    double sq = 0;
    const float* row = want + p * t.shape[1];
    for (int64_t j = 0; j < t.shape[1]; ++j) sq += static_cast<double>(row[j]) * row[j];
    worst = std::max(worst, ::olmo2::test::abs_diff(got[p], std::sqrt(sq)) / std::max(1.0, std::sqrt(sq)));
  }
  return worst;
}

/// Steering case `c` of the fixture (activations.json's "steering") as --interventions
/// JSON: its interventions with the case's vector, base64.
std::string interventions_of(const Fixture& fx, const json& c) {
  json ivs = c["interventions"];
  for (json& iv : ivs) {
    if (iv["type"] != "add") continue;
    const TensorInfo& t = fx.ref.tensors().at("vector." + c["case"].get<std::string>());
    iv["vector"] = trace::base64_encode({fx.ref.data(t), static_cast<size_t>(t.end - t.begin)});
  }
  return ivs.dump();
}

/// Checks that `activations` holds exactly every read of the fixture, each within tolerance.
void expect_every_read(const json& activations, const Fixture& fx, const std::string& what) {
  size_t reads = 0;
  for (const auto& [name, t] : fx.ref.tensors()) {
    if (name.rfind("read.", 0) != 0) continue;
    ++reads;
    const std::string key = name.substr(5);
    ASSERT_TRUE(activations.contains(key)) << what << ": no " << key;
    EXPECT_LE(max_diff(activations[key], fx, key), kTolerance) << what << ": " << key;
  }
  EXPECT_EQ(activations.size(), reads) << what;
  EXPECT_EQ(reads, static_cast<size_t>(fx.layers() * 13 + 4)) << what;
}

/// A prompts file with one {"prompt_ids"} line per prompt.
std::string prompts_file(const test::TempDir& dir, const std::vector<std::vector<int>>& prompts) {
  std::ofstream out(dir.file("prompts.jsonl"));
  for (const auto& p : prompts) out << json{{"prompt_ids", p}}.dump() << "\n";
  return dir.file("prompts.jsonl");
}

std::vector<json> json_lines(const std::string& text) {
  std::vector<json> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(json::parse(line));
  return lines;
}

std::string csv(const std::vector<int>& ids) {
  std::string s;
  for (int id : ids) s += (s.empty() ? "" : ",") + std::to_string(id);
  return s;
}

const char* const kModels[] = {"gqa-f32", "olmo3-gqa-f32"};

TEST(TraceCli, EveryNameOfEveryLayerMatchesTransformers) {
  for (const char* name : kModels) {
    const Fixture fx(name);
    test::TempDir dir;
    const std::string prompts = prompts_file(dir, {fx.ids("sequence_ids")});
    const auto r = test::run_olmo2("trace --model " + fx.dir + " --prompts " + prompts + " --activations '" +
                                   every_name() + "' --output " + dir.file("out.jsonl"));
    ASSERT_EQ(r.status, 0) << r.err;
    EXPECT_EQ(r.out, "");
    std::ifstream in(dir.file("out.jsonl"));
    const auto lines = json_lines(std::string(std::istreambuf_iterator<char>(in), {}));
    ASSERT_EQ(lines.size(), 1u);
    EXPECT_EQ(lines[0]["index"], 0);
    EXPECT_EQ(lines[0]["prompt_ids"].get<std::vector<int>>(), fx.ids("sequence_ids"));
    expect_every_read(lines[0]["activations"], fx, name);
  }
}

TEST(TraceCli, BadPromptsAndNamesAreOneErrorNamingLineAndField) {
  const Fixture fx("gqa-f32");
  test::TempDir dir;
  {
    std::ofstream out(dir.file("bad.jsonl"));
    out << R"({"prompt_ids": [1, 2]})" << "\n\n" << R"({"prompt_ids": [1, 192]})" << "\n";
  }
  const std::string base = "trace --model " + fx.dir + " --activations '[\"logits\"]' --prompts ";
  auto r = test::run_olmo2(base + dir.file("bad.jsonl"));
  EXPECT_EQ(r.status, 1);
  EXPECT_THAT(r.err, HasSubstr("line 3: prompt_ids[1]: token id 192 is outside the vocabulary [0, 192)"));
  EXPECT_EQ(r.out, "");
  {
    std::ofstream out(dir.file("text.jsonl"));
    out << R"({"prompt": "no tokenizer here"})" << "\n";
  }
  r = test::run_olmo2(base + dir.file("text.jsonl"));
  EXPECT_EQ(r.status, 1);
  EXPECT_THAT(r.err, HasSubstr("line 1: \"prompt\" needs a tokenizer"));
  {
    std::ofstream out(dir.file("typo.jsonl"));
    out << R"({"prompt_ids": [1, 2], "max_tokens": 3})" << "\n";
  }
  r = test::run_olmo2(base + dir.file("typo.jsonl"));
  EXPECT_EQ(r.status, 1);
  EXPECT_THAT(r.err, HasSubstr("line 1: unknown key \"max_tokens\" (known: prompt, prompt_ids)"));
  // Text whose dolma2 ids lie past this tiny model's vocabulary of 192.
  r = test::run_olmo2(base + dir.file("text.jsonl") + " --tokenizer " + test::source_path("data/dolma2-tokenizer.json"));
  EXPECT_EQ(r.status, 1);
  EXPECT_THAT(r.err, HasSubstr("line 1: \"prompt\": the tokenizer gives token id 2201 at position 0"));
  EXPECT_THAT(r.err, HasSubstr("outside the model's vocabulary [0, 192)"));
  const std::string good = prompts_file(dir, {{1, 2, 3}});
  const std::string traced = "trace --model " + fx.dir + " --prompts " + good;
  r = test::run_olmo2(traced + " --activations '[\"layers.3.layer_output\"]'");
  EXPECT_EQ(r.status, 1);
  EXPECT_THAT(r.err, HasSubstr("activations[0]"));
  r = test::run_olmo2(traced + " --activations '[\"logits\"'");
  EXPECT_EQ(r.status, 2);
  EXPECT_THAT(r.err, HasSubstr("--activations: not JSON"));
  r = test::run_olmo2(traced);
  EXPECT_EQ(r.status, 2);
  EXPECT_THAT(r.err, HasSubstr("trace: --activations JSON is required"));
}

TEST(TraceCli, GenerateReadsTheRowsOfEveryPositionItFeeds) {
  const Fixture fx("gqa-f32");
  const std::vector<int> greedy = fx.ids("greedy_ids");
  const std::string args = "generate --model " + fx.dir + " --prompt-ids " + csv(fx.ids("prompt_ids")) +
                           " --max-tokens " + std::to_string(greedy.size()) +
                           " --activations '[\"layers.*.layer_output\", \"logits\"]'";
  const auto r = test::run_olmo2(args + " --format json");
  ASSERT_EQ(r.status, 0) << r.err;
  const json j = json::parse(r.out);
  EXPECT_EQ(j["output_ids"].get<std::vector<int>>(), greedy);
  ASSERT_EQ(j["activations"].size(), static_cast<size_t>(fx.layers() + 1));
  for (int l = 0; l <= fx.layers(); ++l) {  // the logits of every prompt row too (the prefill's)
    const std::string key = l < fx.layers() ? "layers." + std::to_string(l) + ".layer_output" : "logits";
    EXPECT_EQ(j["activations"][key]["shape"].get<std::vector<int64_t>>(), fx.ref.tensors().at("read." + key).shape)
        << key;
    EXPECT_LE(max_diff(j["activations"][key], fx, key), kTolerance) << key;
  }
  // Text output with --activations-out: the same object in the file, the text unchanged.
  test::TempDir dir;
  const auto text = test::run_olmo2(args + " --activations-out " + dir.file("reads.json"));
  ASSERT_EQ(text.status, 0) << text.err;
  EXPECT_EQ(text.out, "output_ids: " + csv(greedy) + "\nfinish_reason: length\n");
  std::ifstream in(dir.file("reads.json"));
  EXPECT_EQ(json::parse(in), j["activations"]);
}

// Every steering case of the fixture (adds to layer_output, attention_output at listed
// positions, mlp_output from a position on; a head ablated; two combined) gives
// transformers' steered logits and last layer output; generate steered by
// add_layer_output prints transformers' steered greedy continuation.
TEST(TraceCli, InterventionsSteerAsTransformersHooksDo) {
  const Fixture fx("gqa-f32");
  test::TempDir dir;
  const std::string prompts = prompts_file(dir, {fx.ids("sequence_ids")});
  const std::string last = "layers." + std::to_string(fx.layers() - 1) + ".layer_output";
  for (const json& c : fx.meta["steering"]) {
    const std::string name = c["case"].get<std::string>();
    const auto r = test::run_olmo2("trace --model " + fx.dir + " --prompts " + prompts +
                                   " --activations '[\"logits\", \"" + last + "\"]' --interventions '" +
                                   interventions_of(fx, c) + "'");
    ASSERT_EQ(r.status, 0) << name << ": " << r.err;
    const json a = json::parse(r.out)["activations"];
    EXPECT_LE(max_diff(a["logits"], fx, "logits", "steer." + name + ".logits"), kTolerance) << name;
    EXPECT_LE(max_diff(a[last], fx, last, "steer." + name + ".layer_output"), kTolerance) << name;
    EXPECT_GT(max_diff(a["logits"], fx, "logits"), 1e-2) << name << ": the logits moved";
  }
  const json& add = fx.meta["steering"][0];
  ASSERT_EQ(add["case"], "add_layer_output");
  const auto g = test::run_olmo2("generate --model " + fx.dir + " --prompt-ids " + csv(fx.ids("prompt_ids")) +
                                 " --max-tokens 6 --format json --interventions '" + interventions_of(fx, add) + "'");
  ASSERT_EQ(g.status, 0) << g.err;
  const json j = json::parse(g.out);
  EXPECT_EQ(j["output_ids"].get<std::vector<int>>(), add["greedy_ids"].get<std::vector<int>>());
  EXPECT_TRUE(add["greedy_differs_from_unsteered"].get<bool>());
  EXPECT_FALSE(j.contains("activations")) << "nothing was read";
}

// Under mpirun each layout records its share (heads, MLP rows, vocab rows on their TP
// ranks, layers on their stage) and rank 0 assembles the same values.
TEST(TraceUnderMpirun, EveryLayoutMatchesTransformers) {
  for (const char* name : kModels) {
    const Fixture fx(name);
    test::TempDir dir;
    const std::string prompts = prompts_file(dir, {fx.ids("sequence_ids")});
    for (const char* layout : {"--tp 2", "--pp 2"}) {
      const auto r = mpirun(2, "trace --model " + fx.dir + " --prompts " + prompts + " --activations '" +
                                   every_name() + "' " + layout);
      ASSERT_EQ(r.status, 0) << name << " " << layout << ": " << r.err;
      const auto lines = json_lines(r.out);  // printed once, by rank 0
      ASSERT_EQ(lines.size(), 1u) << name << " " << layout;
      expect_every_read(lines[0]["activations"], fx, std::string(name) + " " + layout);
    }
  }
}

// Steering applies on the ranks that hold what it changes: the combined case (an add to
// the replicated residual, a head ablated on its TP rank) at tp 2 and pp 2.
TEST(TraceUnderMpirun, InterventionsSteerInEveryLayout) {
  const Fixture fx("gqa-f32");
  test::TempDir dir;
  const std::string prompts = prompts_file(dir, {fx.ids("sequence_ids")});
  const json& combined = fx.meta["steering"][4];
  ASSERT_EQ(combined["case"], "combined");
  for (const char* layout : {"--tp 2", "--pp 2"}) {
    const auto r = mpirun(2, "trace --model " + fx.dir + " --prompts " + prompts +
                                 " --activations '[\"logits\"]' --interventions '" + interventions_of(fx, combined) +
                                 "' " + layout);
    ASSERT_EQ(r.status, 0) << layout << ": " << r.err;
    const json a = json::parse(r.out)["activations"];
    EXPECT_LE(max_diff(a["logits"], fx, "logits", "steer.combined.logits"), kTolerance) << layout;
  }
}

// Two data-parallel replicas take turns over three prompts (prefixes of the fixture's
// sequence: their rows are the reference's first rows); the lines come in file order.
TEST(TraceUnderMpirun, ReplicasTakeTurnsAndLinesKeepTheFileOrder) {
  const Fixture fx("gqa-f32");
  const std::vector<int> seq = fx.ids("sequence_ids");
  test::TempDir dir;
  const std::vector<std::vector<int>> prompts = {seq, {seq.begin(), seq.begin() + 5}, {seq.begin(), seq.begin() + 9}};
  const auto r = mpirun(2, "trace --model " + fx.dir + " --prompts " + prompts_file(dir, prompts) +
                               " --activations '[\"layers.*.attention_probabilities\", \"logits\"]' --dp 2");
  ASSERT_EQ(r.status, 0) << r.err;
  const auto lines = json_lines(r.out);
  ASSERT_EQ(lines.size(), prompts.size());
  for (size_t i = 0; i < prompts.size(); ++i) {
    EXPECT_EQ(lines[i]["index"], i);
    EXPECT_EQ(lines[i]["prompt_ids"].get<std::vector<int>>(), prompts[i]);
    const json& a = lines[i]["activations"];
    ASSERT_EQ(a.size(), static_cast<size_t>(fx.layers() + 1)) << i;
    const int64_t n = static_cast<int64_t>(prompts[i].size());
    EXPECT_EQ(a["logits"]["shape"].get<std::vector<int64_t>>(),
              (std::vector<int64_t>{n, fx.meta["dims"]["V"].get<int64_t>()}))
        << i;
    EXPECT_LE(max_diff(a["logits"], fx, "logits"), kTolerance) << i;
    EXPECT_LE(max_diff(a["layers.2.attention_probabilities"], fx, "layers.2.attention_probabilities"), kTolerance);
  }
}

// generate's data-parallel replicas compute the same tokens; only replica 0's reads are
// sent (a second copy would double a norm's sums of squares).
TEST(TraceUnderMpirun, GenerateReadsOnEveryRankAndPrintsOnce) {
  const Fixture fx("olmo3-gqa-f32");
  const std::vector<int> greedy = fx.ids("greedy_ids");
  for (const char* layout : {"--tp 2 --pp 2", "--pp 2 --dp 2"}) {
    const auto r = mpirun(4, "generate --model " + fx.dir + " --prompt-ids " + csv(fx.ids("prompt_ids")) +
                                 " --max-tokens " + std::to_string(greedy.size()) +
                                 " --activations '[\"layers.*.layer_output\", \"logits\", "
                                 "{\"name\": \"final_norm_output\", \"reduce\": \"norm\"}]' --format json " +
                                 layout);
    ASSERT_EQ(r.status, 0) << layout << ": " << r.err;
    const json j = json::parse(r.out);
    EXPECT_EQ(j["output_ids"].get<std::vector<int>>(), greedy) << layout;
    ASSERT_EQ(j["activations"].size(), static_cast<size_t>(fx.layers() + 2)) << layout;
    EXPECT_LE(max_norm_diff(j["activations"]["final_norm_output:norm"], fx, "read.final_norm_output"), 1e-5) << layout;
    for (int l = 0; l <= fx.layers(); ++l) {
      const std::string key = l < fx.layers() ? "layers." + std::to_string(l) + ".layer_output" : "logits";
      EXPECT_LE(max_diff(j["activations"][key], fx, key), kTolerance) << layout << " " << key;
    }
  }
}

// A bad line is found by every rank before any collective: one message, no hang.
TEST(TraceUnderMpirun, ABadLineIsReportedOnceAndNoRankHangs) {
  const Fixture fx("gqa-f32");
  test::TempDir dir;
  {
    std::ofstream out(dir.file("bad.jsonl"));
    out << R"({"prompt_ids": [1, 2]})" << "\n" << R"({"prompt_ids": [3], "prompt": "x"})" << "\n";
  }
  const auto r = mpirun(2, "trace --model " + fx.dir + " --prompts " + dir.file("bad.jsonl") +
                               " --activations '[\"logits\"]' --tp 2 --collective-timeout 20");
  EXPECT_EQ(r.status, 1);
  const std::string message = "line 2: give exactly one of \"prompt\" (text) and \"prompt_ids\" (token ids)";
  EXPECT_THAT(r.err, HasSubstr(message));
  EXPECT_EQ(r.err.find(message), r.err.rfind(message)) << r.err;
  EXPECT_EQ(r.out, "");
  // An output file rank 0 cannot write stops every rank before the model is loaded.
  const std::string good = prompts_file(dir, {{1, 2}});
  const std::string reads = " --activations '[\"logits\"]'";
  for (const std::string& args :
       {"trace --model " + fx.dir + " --prompts " + good + reads + " --output /nonexistent/o.jsonl",
        "generate --model " + fx.dir + " --prompt-ids 1,2" + reads + " --activations-out /nonexistent/o"}) {
    const auto w = mpirun(2, args + " --tp 2 --collective-timeout 20");
    EXPECT_EQ(w.status, 1) << args;
    EXPECT_THAT(w.err, HasSubstr("olmo2: error: rank 0: --")) << args;
    EXPECT_THAT(w.err, HasSubstr(": cannot write /nonexistent/o")) << args;
    EXPECT_EQ(w.out, "") << args;
  }
}

}  // namespace
}  // namespace olmo2
