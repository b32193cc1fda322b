// A distributed save streams one whole tensor at a time to rank 0 (docs/architecture.md
// §7 "Checkpoint writing at scale"); its files must equal, byte for byte, those of the
// earlier way — the whole model and moments gathered on rank 0 (gather_whole_tensors,
// DataParallelAdamW::full_state) and written by save_checkpoint — for the same run, in
// tp × pp layouts and with ZeRO-1 over DP, on the host and on the device (a GPU or the
// emulated one; skipped without either); a writer failure on rank 0 mid-stream stops
// every rank with one error; one process's streamed save equals save_checkpoint of its
// parameters and moments. Run under mpirun at 2 and 4 ranks.
#include <gtest/gtest.h>
#include <mpi.h>
#include <stdlib.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <random>

#include <nlohmann/json.hpp>

#include "parallel/agreement.h"
#include "parallel/device_communicator.h"
#include "parallel/process_groups.h"
#include "runtime/io/npy.h"
#include "runtime/train/checkpoint.h"
#include "runtime/train/sharded_state.h"
#include "runtime/train/trainer.h"
#include "tests/ops/cuda/cuda_test_util.h"
#include "tests/parallel/mpi_test_util.h"

namespace olmo2 {
namespace {

namespace fs = std::filesystem;
using parallel::Topology;
using parallel::test::world_rank;
using parallel::test::world_size;

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

std::vector<std::string> entries(const std::string& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) out.push_back(e.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

/// Every file of checkpoint `b` equals `a`'s byte for byte, and they hold the same files.
void expect_same_files(const std::string& a, const std::string& b, const std::string& what) {
  ASSERT_EQ(entries(a), entries(b)) << what;
  for (const std::string& f : entries(a)) {
    const std::string x = slurp(a + "/" + f), y = slurp(b + "/" + f);
    EXPECT_FALSE(x.empty()) << what << ": " << f;
    EXPECT_TRUE(x == y) << what << ": " << f << " differs (" << x.size() << " vs " << y.size() << " bytes)";
  }
}

/// A directory all ranks share (rank 0 makes it) holding a 4-layer model config (vocab
/// 131, padded by tp 2; GQA 4/2) and 2048 tokens.
struct SharedRun {
  std::string dir;
  SharedRun() {
    if (world_rank() == 0) {
      std::string tmpl = (fs::temp_directory_path() / "olmo2-stream-XXXXXX").string();
      if (!mkdtemp(tmpl.data())) std::abort();
      dir = tmpl;
      const nlohmann::json c = {{"architectures", {"Olmo2ForCausalLM"}}, {"model_type", "olmo2"}, {"vocab_size", 131},
                                {"hidden_size", 32}, {"intermediate_size", 64}, {"num_hidden_layers", 4},
                                {"num_attention_heads", 4}, {"num_key_value_heads", 2},
                                {"max_position_embeddings", 64}, {"rms_norm_eps", 1e-6}, {"rope_theta", 10000.0},
                                {"tie_word_embeddings", false}, {"eos_token_id", 130}, {"pad_token_id", 129}};
      std::ofstream(dir + "/config.json") << c.dump(1);
      std::mt19937 rng(3);
      std::vector<uint32_t> ids(2048);
      for (uint32_t& id : ids) id = rng() % 131;
      NpyWriter w(dir + "/tokens.npy");
      w.append(ids);
      w.close();
    }
    auto g = parallel::make_process_groups(Topology::make(world_size(), 1, 1, 0), 60.0);
    parallel::broadcast_string(*g.world, dir, 0);
  }
  ~SharedRun() {
    MPI_Barrier(MPI_COMM_WORLD);
    if (world_rank() == 0) fs::remove_all(dir);
  }
  TrainOptions options(const std::string& save) const {
    TrainOptions o;
    o.model_config = dir + "/config.json";
    o.data = {dir + "/tokens.npy"};
    o.seq_len = 16, o.global_batch = 4, o.micro_batch = 1, o.steps = 2;
    o.lr = 1e-2, o.warmup_steps = 1, o.seed = 9;
    o.log_format = "json";
    o.save_dir = dir + "/" + save;
    return o;
  }
};

/// The earlier distributed save: DP replica 0's owned slices and (ZeRO-1: all-gathered)
/// moments gathered whole on rank 0, then save_checkpoint. Collective.
std::string gather_then_save(const Trainer& t, parallel::ProcessGroups& g, const std::string& save_dir) {
  const std::map<std::string, Tensor> moments = t.optimizer().full_state();
  std::vector<SliceToGather> slices;
  for (const Parameter& p : t.parameters()) {
    if (!p.owned(g.tp->rank())) continue;
    slices.push_back({p.name, &p, p.value->view()});
    for (const char* kind : {"exp_avg.", "exp_avg_sq."}) slices.push_back({kind + p.name, &p, moments.at(kind + p.name).view()});
  }
  const auto whole = gather_whole_tensors(slices, g.dp->rank() == 0, *g.world, 0);
  std::string path;
  if (world_rank() == 0) {
    CheckpointContents c;
    c.config = t.model().config();
    c.config.dtype = DType::F32;
    c.state = t.state_json();
    std::map<std::string, const Tensor*> by_name;
    for (const auto& [name, tensor] : whole) by_name.emplace(name, &tensor);
    for (const std::string& name : parameter_names(c.config)) {
      c.model_tensors.emplace_back(name, by_name.at(name)->view());
      for (const char* kind : {"exp_avg.", "exp_avg_sq."}) c.state_tensors.emplace(kind + name, by_name.at(kind + name)->view());
    }
    path = save_checkpoint(save_dir, t.steps_done(), c, 0);
  }
  return path;
}

struct Layout {
  int tp, pp, dp, zero;
};

TEST(StreamedCheckpoint, EqualsTheWholeStateGatheredOnRankZero) {
  const int world = world_size();
  const SharedRun run;
  std::vector<Layout> layouts;
  if (world == 4) layouts = {{2, 2, 1, 0}, {1, 2, 2, 1}, {2, 1, 2, 1}};
  if (world == 2) layouts = {{2, 1, 1, 0}, {1, 1, 2, 1}};
  if (layouts.empty()) GTEST_SKIP() << "needs 2 or 4 ranks, have " << world;
  for (const Layout& l : layouts) {
    const std::string name = "tp" + std::to_string(l.tp) + "-pp" + std::to_string(l.pp) + "-dp" +
                             std::to_string(l.dp) + (l.zero ? "-zero1" : "");
    auto groups = parallel::make_process_groups(Topology::make(world, l.tp, l.pp, l.dp), 120.0);
    TrainOptions o = run.options(name + "-streamed");
    o.zero_stage = l.zero;
    Trainer t(o, &groups);
    for (int i = 0; i < 2; ++i) t.step();
    const std::string streamed = t.save();
    const std::string whole = gather_then_save(t, groups, run.dir + "/" + name + "-whole");
    if (world_rank() == 0) {
      EXPECT_EQ(streamed, run.dir + "/" + name + "-streamed/step-00000002");
      expect_same_files(whole, streamed, name);
    }
    MPI_Barrier(MPI_COMM_WORLD);
  }
}

// On the device (a GPU, or the emulated one: OLMO2_DEVICE_EMULATION=1), every slice is
// staged to the host before it travels and a ZeRO-1 moment is assembled over DP from
// device chunks; the files still equal the whole-state gather's.
TEST(StreamedCheckpoint, OnTheDeviceEqualsTheWholeStateGatheredOnRankZero) {
  OLMO2_REQUIRE_DEVICE();
  const int world = world_size();
  if (world != 2 && world != 4) GTEST_SKIP() << "needs 2 or 4 ranks, have " << world;
  const SharedRun run;
  const std::vector<Layout> layouts =
      world == 4 ? std::vector<Layout>{{2, 1, 2, 1}, {1, 2, 2, 1}} : std::vector<Layout>{{2, 1, 1, 0}, {1, 1, 2, 1}};
  for (const Layout& l : layouts) {
    const std::string name = "device-tp" + std::to_string(l.tp) + "-pp" + std::to_string(l.pp) + "-dp" +
                             std::to_string(l.dp) + (l.zero ? "-zero1" : "");
    auto groups = parallel::make_process_groups(Topology::make(world, l.tp, l.pp, l.dp), 120.0);
    parallel::wrap_communicators(groups, [](std::unique_ptr<parallel::Communicator> c) {
      return parallel::make_device_communicator(std::move(c), /*distinct_gpus=*/false);  // host-staged
    });
    TrainOptions o = run.options(name + "-streamed");
    o.zero_stage = l.zero, o.device = Device::CUDA;
    Trainer t(o, &groups);
    ASSERT_EQ(t.parameters().front().value->device(), Device::CUDA);
    for (int i = 0; i < 2; ++i) t.step();
    const std::string streamed = t.save();
    const std::string whole = gather_then_save(t, groups, run.dir + "/" + name + "-whole");
    if (world_rank() == 0) expect_same_files(whole, streamed, name);
    MPI_Barrier(MPI_COMM_WORLD);
  }
}

// Rank 0's writer fails in the middle of the stream (the crash hook, after the model
// file, before the moments): rank 0 keeps receiving, then every rank throws the one
// agreed error — no rank is left waiting to send.
TEST(StreamedCheckpoint, AWriterFailureOnRankZeroStopsEveryRankWithOneError) {
  const int world = world_size();
  const SharedRun run;
  const Layout l = world == 4 ? Layout{2, 2, 1, 0} : Layout{2, 1, 1, 0};
  if (world != 2 && world != 4) GTEST_SKIP() << "needs 2 or 4 ranks, have " << world;
  auto groups = parallel::make_process_groups(Topology::make(world, l.tp, l.pp, l.dp), 60.0);
  TrainOptions o = run.options("failing");
  Trainer t(o, &groups);
  t.step();
  if (world_rank() == 0) set_checkpoint_fault_for_testing(3);  // config, generation config, model
  std::string message;
  try {
    t.save();
  } catch (const parallel::AgreedError& e) {
    message = e.what();
  }
  set_checkpoint_fault_for_testing(-1);
  EXPECT_NE(message.find("simulated crash after 3 files"), std::string::npos) << "rank " << world_rank() << ": " << message;
  // The run goes on: the next save is complete.
  const std::string path = t.save();
  if (world_rank() == 0) {
    EXPECT_TRUE(fs::exists(path + "/training_state.json")) << path;
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

TEST(StreamedCheckpoint, OneProcessEqualsSaveCheckpointOfItsState) {
  const SharedRun run;
  if (world_rank() == 0) {
    Trainer t(run.options("one-streamed"));
    for (int i = 0; i < 2; ++i) t.step();
    const std::string streamed = t.save();
    const std::map<std::string, Tensor> moments = t.optimizer().full_state();
    CheckpointContents c;
    c.config = t.model().config();
    c.config.dtype = DType::F32;
    c.state = t.state_json();
    for (const Parameter& p : t.parameters()) c.model_tensors.emplace_back(p.name, p.value->view());
    for (const auto& [name, m] : moments) c.state_tensors.emplace(name, m.view());
    expect_same_files(save_checkpoint(run.dir + "/one-whole", 2, c, 0), streamed, "one process");
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

}  // namespace
}  // namespace olmo2
