// The rank session (launcher/rank_session.h, docs/architecture.md §12 "The rank
// session"): one process is its 1 × 1 × 1 case (no MPI, the thread placement of
// place_single_process, the whole model), and a layout a job or a model cannot take is
// one message naming the numbers, the same for every command that takes the layout
// options (parsed once, by read_layout_options through parse_command_line).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "launcher/options.h"
#include "launcher/rank_session.h"
#include "parallel/node_ranks.h"
#include "tests/parallel/mpi_test_util.h"
#include "tests/test_util.h"

namespace olmo2 {
namespace {

using ::testing::HasSubstr;
using parallel::test::message_of;

const std::string kModel = test::source_path("tests/golden/fixtures/mha-f32");
const std::string kConfigs = test::source_path("tests/golden/fixtures/configs");

CliConfig parse(const std::vector<std::string>& args) {
  std::vector<const char*> argv{"olmo2"};
  for (const std::string& a : args) argv.push_back(a.c_str());
  return parse_command_line(static_cast<int>(argv.size()), argv.data());
}

/// The command line of `command` with its required options and `layout` appended.
std::vector<std::string> command_line(const std::string& command, const std::string& model,
                                      const std::vector<std::string>& layout) {
  std::vector<std::string> args{command};
  if (command == "train") {
    args.insert(args.end(), {"--model-config", model + "/config.json", "--data", "x.npy", "--seq-len", "8",
                             "--global-batch", "4", "--steps", "1"});
  } else {
    args.insert(args.end(), {"--model", model});
  }
  if (command == "generate") args.insert(args.end(), {"--prompt-ids", "1"});
  if (command == "trace") args.insert(args.end(), {"--prompts", "p.jsonl", "--activations", "[\"logits\"]"});
  args.insert(args.end(), layout.begin(), layout.end());
  return args;
}

/// The commands that start ranks, each with the dp it may run (serve: one server per
/// replica), as their run_* functions give it to the session.
struct Command {
  std::string name;
  int max_dp;
};
const Command kCommands[] = {{"generate", 0}, {"trace", 0}, {"train", 0}, {"serve", 1}};


void expect_same_fields(const ShardSpec& a, const ShardSpec& b) {
  EXPECT_EQ(a.chunks, b.chunks);
  EXPECT_EQ(a.q_heads, b.q_heads);
  EXPECT_EQ(a.kv_heads, b.kv_heads);
  EXPECT_EQ(a.mlp_rows, b.mlp_rows);
  EXPECT_EQ(a.vocab_rows, b.vocab_rows);
  EXPECT_EQ(a.vocab_real, b.vocab_real);
  EXPECT_EQ(a.embedding, b.embedding);
  EXPECT_EQ(a.final_norm, b.final_norm);
  EXPECT_EQ(a.k_counts, b.k_counts);
  EXPECT_EQ(a.kv_replicas, b.kv_replicas);
  EXPECT_EQ(a.kv_replica, b.kv_replica);
  EXPECT_EQ(a.padded_vocab, b.padded_vocab);
}

TEST(RankSession, OneProcessIsTheOneByOneByOneCase) {
  RankSessionSpec spec;
  spec.layout = parse(command_line("generate", kModel, {"--tp", "1", "--dp", "1"})).layout;  // given, not split
  spec.threads = 2;
  spec.model = kModel;
  int checks = 0, bodies = 0;
  spec.checks = [&](const ModelConfig& c, const ModelDirectoryFindings&) {
    EXPECT_EQ(bodies, 0) << "the checks come before the body";
    EXPECT_EQ(c.vocab_size, ModelConfig::load(kModel).vocab_size);
    ++checks;
  };
  run_rank_session(spec, [&](RankSession& s) {
    ++bodies;
    EXPECT_FALSE(s.distributed());
    EXPECT_EQ(s.groups, nullptr);
    EXPECT_EQ(s.world(), nullptr);
    EXPECT_EQ(s.rank(), 0);
    EXPECT_EQ(s.world_size(), 1);
    EXPECT_EQ(s.topology.layout(), (parallel::Layout{1, 1, 1}));
    EXPECT_EQ(s.coords(), (parallel::Coords{0, 0, 0}));
    EXPECT_EQ(s.parallel_context().tp, nullptr);
    EXPECT_EQ(s.parallel_context().pp, nullptr);
    // The thread placement of one process, as the start lines of train and serve say it.
    EXPECT_EQ(s.placement, "1 process on " + parallel::host_name() + ", 2 threads from --threads");
    EXPECT_EQ(s.device.device, Device::CPU);
    ASSERT_TRUE(s.config.has_value());
    ASSERT_TRUE(s.plan.has_value());
    EXPECT_EQ(s.plan->ranks.size(), 1u);
    // The shard of a 1 × 1 × 1 plan is the whole model, field for field.
    expect_same_fields(s.shard, ShardSpec::whole(*s.config));
  });
  EXPECT_EQ(checks, 1);
  EXPECT_EQ(bodies, 1);
}

TEST(RankSession, OneProcessWithoutAModelPlansNothing) {
  RankSessionSpec spec;  // train: the Trainer plans the config it resolves
  spec.threads = 1;
  bool checked = false, ran = false;
  spec.checks = [&](const ModelConfig&, const ModelDirectoryFindings&) { checked = true; };
  run_rank_session(spec, [&](RankSession& s) {
    ran = true;
    EXPECT_FALSE(s.config.has_value());
    EXPECT_FALSE(s.plan.has_value());
    EXPECT_EQ(s.topology.world(), 1);
    EXPECT_EQ(s.placement, "1 process on " + parallel::host_name() + ", 1 thread from --threads");
  });
  EXPECT_TRUE(ran);
  EXPECT_FALSE(checked);
}

TEST(RankSession, OneProcessErrorsPassThroughUnchangedBeforeTheBody) {
  RankSessionSpec spec;
  spec.model = "/nonexistent/dir";
  bool ran = false;
  EXPECT_THAT(message_of<InputError>([&] { run_rank_session(spec, [&](RankSession&) { ran = true; }); }),
              HasSubstr("cannot open /nonexistent/dir/config.json"));
  spec.model = kModel;
  spec.checks = [](const ModelConfig&, const ModelDirectoryFindings&) { OLMO2_THROW(InputError, "prompt id 500 is outside the vocabulary"); };
  EXPECT_EQ(message_of<InputError>([&] { run_rank_session(spec, [&](RankSession&) { ran = true; }); }),
            "prompt id 500 is outside the vocabulary");
  EXPECT_FALSE(ran);
}

TEST(RankLayout, EachCommandParsesTheLayoutOptionsAlike) {
  for (const Command& c : kCommands) {
    const LayoutOptions l =
        parse(command_line(c.name, kModel, {"--tp", "2", "--pp-layers", "1,1", "--collective-timeout", "7"})).layout;
    EXPECT_EQ(l.tp, 2) << c.name;
    EXPECT_EQ(l.pp, 2) << c.name << ": --pp-layers' entry count";
    EXPECT_EQ(l.dp, 0) << c.name << ": not given";
    EXPECT_EQ(l.pp_layers, (std::vector<int64_t>{1, 1})) << c.name;
    EXPECT_EQ(l.collective_timeout, 7) << c.name;
    EXPECT_TRUE(l.given && l.splits()) << c.name;
    EXPECT_FALSE(parse(command_line(c.name, kModel, {})).layout.given) << c.name;
    // One message per malformed value, whichever command reads it.
    for (const auto& [args, message] :
         {std::pair<std::vector<std::string>, std::string>{{"--tp", "0"}, "--tp must be at least 1, got 0"},
          {{"--pp", "-2"}, "--pp must be at least 1, got -2"},
          {{"--collective-timeout", "-1"}, "--collective-timeout must be at least 0 seconds, got -1"},
          {{"--pp-layers", "2,0"}, "--pp-layers: \"0\" is not a layer count"}}) {
      EXPECT_THAT(message_of<UsageError>([&] { parse(command_line(c.name, kModel, args)); }), HasSubstr(message))
          << c.name;
    }
  }
  // serve does not take --dp: refused when it asks for more than one replica.
  EXPECT_EQ(message_of<UsageError>([&] { parse(command_line("serve", kModel, {"--dp", "2"})); }),
            "serve: --dp is not supported (run one server per replica)");
  EXPECT_EQ(parse(command_line("info", kModel, {"--pp", "2"})).layout.pp, 2);
}

TEST(RankLayout, AWrongLayoutIsOneMessageNamingTheNumbersForEveryCommand) {
  for (const Command& c : kCommands) {
    const LayoutOptions tp3 = parse(command_line(c.name, kModel, {"--tp", "3"})).layout;
    EXPECT_EQ(message_of<InputError>([&] { rank_topology(tp3, 4, c.max_dp); }),
              c.max_dp == 1 ? "invalid layout: world 4 ≠ tp 3 × pp 1 = 3: this command takes no data parallelism (dp 1), "
                              "so start it on 3 ranks"
                            : "invalid layout: world 4 is not divisible by tp 3 × pp 1 = 3 (dp derived as world / (tp × pp))")
        << c.name;
    const LayoutOptions tp2 = parse(command_line(c.name, kModel, {"--tp", "2"})).layout;
    if (c.max_dp == 1) {  // a world of two replicas
      EXPECT_EQ(message_of<InputError>([&] { rank_topology(tp2, 4, c.max_dp); }),
                "invalid layout: tp 2 × pp 1 × dp 2 = world 4, but this command takes at most dp 1: "
                "start it on tp × pp × 1 = 2 ranks");
      continue;
    }
    EXPECT_EQ(rank_topology(tp2, 4, c.max_dp).layout(), (parallel::Layout{2, 1, 2})) << c.name;
    const LayoutOptions dp3 = parse(command_line(c.name, kModel, {"--tp", "2", "--dp", "3"})).layout;
    EXPECT_EQ(message_of<InputError>([&] { rank_topology(dp3, 4, c.max_dp); }),
              "invalid layout: tp 2 × pp 1 × dp 3 = 6 ≠ world 4")
        << c.name;
  }
  // info plans without a job: exactly the ranks the layout names.
  const LayoutOptions huge = parse(command_line("info", kModel, {"--pp", "2", "--dp", "1048576"})).layout;
  EXPECT_EQ(message_of<InputError>([&] { rank_topology(huge, 0); }),
            "invalid layout: tp 1 x pp 2 x dp 1048576 = 2097152 ranks exceeds 1048576");
  EXPECT_EQ(rank_topology(parse(command_line("info", kModel, {"--tp", "2"})).layout, 0).world(), 2);
}

TEST(RankLayout, AModelTheLayoutCannotSplitIsOneMessageForEveryCommand) {
  const std::string m32 = kConfigs + "/OLMo-2-0325-32B";
  const ModelConfig c32 = ModelConfig::load(m32);
  for (const Command& c : kCommands) {
    const LayoutOptions l = parse(command_line(c.name, m32, {"--tp", "16"})).layout;
    EXPECT_EQ(message_of<InputError>([&] { rank_plan(l, 16, c32, c.max_dp); }),
              "num_attention_heads 40 is not divisible by tp 16")
        << c.name;
  }
  const LayoutOptions info = parse(command_line("info", m32, {"--tp", "16"})).layout;
  EXPECT_EQ(message_of<InputError>([&] { rank_plan(info, 0, c32); }), "num_attention_heads 40 is not divisible by tp 16");
  const LayoutOptions stages = parse(command_line("info", m32, {"--pp-layers", "8,8"})).layout;
  EXPECT_EQ(message_of<InputError>([&] { rank_plan(stages, 0, c32); }),
            "--pp-layers 8,8 sums to 16, the model has 64 layers");
}

}  // namespace
}  // namespace olmo2
