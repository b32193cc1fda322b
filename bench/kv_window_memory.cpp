// KV-cache memory of one long sequence with sliding-window KV groups against keeping
// every block (docs/architecture.md §8, "Sliding-window KV (KV groups)"; bench/README.md,
// "Sliding-window KV memory"). Drives the serving scheduler — no model, no forward — through
// the chunked prefill of a prompt and a number of decode steps for Olmo 3 7B's layout
// (32 layers, three sliding then one full, eight times; 32 kv heads of 128), and prints the
// blocks each KV group holds at the end and at its peak, and their bytes in our f32 pools
// and in bf16. Not a test.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "runtime/model/kv_cache.h"
#include "runtime/model/kv_layout.h"
#include "runtime/serve/scheduler.h"

namespace {

using namespace olmo2;

struct Args {
  int64_t tokens = 32768, max_batch_tokens = 512, block_size = 16, decode = 128, window = 4096;
};

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string k = argv[i];
    if (i + 1 >= argc) {
      std::fprintf(stderr, "%s needs a value\n", k.c_str());
      std::exit(2);
    }
    const int64_t v = std::atoll(argv[++i]);
    if (k == "--tokens") a.tokens = v;
    else if (k == "--max-batch-tokens") a.max_batch_tokens = v;
    else if (k == "--block-size") a.block_size = v;
    else if (k == "--decode") a.decode = v;
    else if (k == "--window") a.window = v;
    else {
      std::fprintf(stderr, "unknown option %s (--tokens, --max-batch-tokens, --block-size, --decode, --window)\n",
                   k.c_str());
      std::exit(2);
    }
    if (v < 1) {
      std::fprintf(stderr, "%s must be ≥ 1, got %lld\n", k.c_str(), static_cast<long long>(v));
      std::exit(2);
    }
  }
  return a;
}

/// Olmo 3 7B's shape (the released config.json's sizes) with sliding window `window`.
ModelConfig olmo3_7b(int64_t window) {
  ModelConfig c;
  c.architecture = "Olmo3ForCausalLM";
  c.vocab_size = 100278, c.hidden_size = 4096, c.intermediate_size = 11008, c.num_hidden_layers = 32;
  c.num_attention_heads = 32, c.num_key_value_heads = 32, c.head_dim = 128, c.max_position_embeddings = 65536;
  for (int i = 0; i < 8; ++i) {
    c.layer_types.insert(c.layer_types.end(), {AttentionType::Sliding, AttentionType::Sliding,
                                               AttentionType::Sliding, AttentionType::Full});
  }
  c.sliding_window = window;
  return c;
}

struct Held {
  std::vector<int64_t> end, peak;  // per group
  int64_t total_peak = 0;          // the most ids held at one moment, every group together
};

/// Prefill of a.tokens in chunks of a.max_batch_tokens, then a.decode tokens, one
/// sequence, with `windows` per group (all 0: nothing released).
Held drive(const Args& a, const std::vector<int64_t>& windows) {
  const int64_t groups = static_cast<int64_t>(windows.size());
  SchedulerOptions o;
  o.num_blocks = groups * (blocks_for(a.tokens + a.decode, a.block_size) + 1);
  o.block_size = a.block_size, o.max_running = 1, o.max_batch_tokens = a.max_batch_tokens;
  o.prefix_caching = false, o.group_windows = windows;
  Scheduler s(o);
  SchedSequence q;
  q.id = 1, q.tokens.assign(static_cast<size_t>(a.tokens), 7), q.prompt_len = a.tokens;
  s.add(q);
  Held h{std::vector<int64_t>(static_cast<size_t>(groups)), std::vector<int64_t>(static_cast<size_t>(groups))};
  while (static_cast<int64_t>(s.find(1)->tokens.size()) < a.tokens + a.decode) {
    const StepPlan p = s.schedule();
    if (p.sequences.empty()) {
      std::fprintf(stderr, "the scheduler planned nothing\n");
      std::exit(1);
    }
    int64_t now = 0;
    for (int64_t g = 0; g < groups; ++g) {  // while the step computes: the chunk's blocks are held
      h.peak[static_cast<size_t>(g)] = std::max(h.peak[static_cast<size_t>(g)], s.held_in_group(g));
      now += s.held_in_group(g);
    }
    h.total_peak = std::max(h.total_peak, now);
    s.step_done(p, std::vector<SelectedToken>(static_cast<size_t>(p.sampled()), SelectedToken{7, 0.0f, {}}));
  }
  for (int64_t g = 0; g < groups; ++g) h.end[static_cast<size_t>(g)] = s.held_in_group(g);
  return h;
}

double gib(int64_t bytes) { return static_cast<double>(bytes) / (1024.0 * 1024.0 * 1024.0); }

}  // namespace

int main(int argc, char** argv) {
  const Args a = parse(argc, argv);
  const ModelConfig c = olmo3_7b(a.window);
  const KVLayout layout(c);
  const int64_t per_block = KVCache::bytes_per_block(c, ShardSpec::whole(c), a.block_size, DType::F32);
  ModelConfig one = c;  // OLMo 2's layout: one group of all 32 layers
  one.layer_types.clear();
  const int64_t per_block_one = KVCache::bytes_per_block(one, ShardSpec::whole(one), a.block_size, DType::F32);
  std::printf("Olmo 3 7B layout: %lld groups of %lld layers, windows", static_cast<long long>(layout.groups()),
              static_cast<long long>(layout.slots()));
  for (int64_t w : layout.windows()) std::printf(" %lld", static_cast<long long>(w));
  std::printf("; %lld prompt tokens in chunks of %lld, %lld decoded, blocks of %lld (%lld bytes f32 per id)\n",
              static_cast<long long>(a.tokens), static_cast<long long>(a.max_batch_tokens),
              static_cast<long long>(a.decode), static_cast<long long>(a.block_size),
              static_cast<long long>(per_block));
  const Held freed = drive(a, layout.windows());
  const Held kept = drive(a, std::vector<int64_t>(layout.windows().size(), 0));
  const Held olmo2 = drive(a, {0});
  std::printf("%-28s %6s %12s %12s\n", "", "group", "held at end", "peak");
  int64_t freed_end = 0, kept_end = 0;
  const int64_t freed_peak = freed.total_peak, kept_peak = kept.total_peak;
  for (size_t g = 0; g < freed.end.size(); ++g) {
    std::printf("%-28s %6zu %12lld %12lld\n", g == 0 ? "windows freed (KV groups)" : "", g,
                static_cast<long long>(freed.end[g]), static_cast<long long>(freed.peak[g]));
    freed_end += freed.end[g], kept_end += kept.end[g];
  }
  auto line = [&](const char* what, int64_t end_ids, int64_t peak_ids, int64_t bytes_per_id) {
    std::printf("%-36s ids %6lld (peak %6lld): %8.3f GiB f32, %8.3f GiB bf16 (peak %.3f / %.3f)\n", what,
                static_cast<long long>(end_ids), static_cast<long long>(peak_ids), gib(end_ids * bytes_per_id),
                gib(end_ids * bytes_per_id / 2), gib(peak_ids * bytes_per_id), gib(peak_ids * bytes_per_id / 2));
  };
  line("KV groups, windows freed", freed_end, freed_peak, per_block);
  line("KV groups, everything kept", kept_end, kept_peak, per_block);
  line("one group of 32 layers (OLMo 2)", olmo2.end[0], olmo2.total_peak, per_block_one);
  std::printf("freed / kept: %.3f at the end, %.3f at the peak\n",
              static_cast<double>(freed_end) / static_cast<double>(kept_end),
              static_cast<double>(freed_peak) / static_cast<double>(kept_peak));
  return 0;
}
