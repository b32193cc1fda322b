// `olmo2 serve`: the model on every rank, the engine loop in lockstep, and on rank 0
// the HTTP server (docs/architecture.md §8).
#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <limits>
#include <optional>
#include <string>
#include <thread>

#include "launcher/commands.h"
#include "launcher/rank_session.h"
#include "ops/batch_invariant_gemm.h"
#include "ops/bf16_gemm.h"
#include "parallel/agreement.h"
#include "runtime/io/checkpoint_files.h"
#include "runtime/io/port_file.h"
#include "runtime/serve/chat/chat_template.h"
#include "runtime/serve/api/http_server.h"
#include "runtime/serve/serving_engine.h"
#include "runtime/serve/speculative/draft_model_proposer.h"
#include "runtime/serve/speculative/ngram_proposer.h"

namespace olmo2 {

namespace {

/// The positions one sequence can always hold, for the start line: a model whose every
/// layer slides needs only its window, whatever the length (docs/architecture.md §8).
std::string capacity_text(int64_t positions) {
  if (positions >= std::numeric_limits<int64_t>::max() / 4) return "any number of positions (every layer slides)";
  return std::to_string(positions) + " positions";
}
volatile std::sig_atomic_t g_serve_signal = 0;
volatile std::sig_atomic_t g_serve_signals = 0;  // how many: a second one ends the grace period
extern "C" void on_serve_signal(int sig) {
  g_serve_signal = sig;
  g_serve_signals = g_serve_signals + 1;
}

/// Everything one rank of the server holds; built inside agree() so that a failure on
/// any rank (a model file, the cache size, the port) stops every rank together.
struct ServeRank {
  std::unique_ptr<Olmo2Model> model;
  std::unique_ptr<Tokenizer> tokenizer;  // rank 0
  std::unique_ptr<monitoring::ServeMetrics> metrics;  // rank 0
  std::unique_ptr<ServingEngine> engine;
  std::unique_ptr<HttpServer> http;  // rank 0
  /// Rank 0: the chat template /v1/chat/completions renders with (chat_request.h's
  /// ChatRenderer); none: chat requests are refused.
  std::optional<ChatTemplate> chat_template;
  nlohmann::json chat_extra = nlohmann::json::object();  // rank 0: the model's special tokens
  PortFileGuard port_file;  // rank 0, with --port-file: removed when the server is done
};

/// The chat template: --chat-template's (parsed already by read_serve_options), else the
/// model directory's own (ChatTemplate::from_model_dir). A model's template this server
/// cannot run only disables chat, with a line saying why: completions still serve.
std::optional<ChatTemplate> load_chat_template(const ServeOptions& o) {
  if (!o.chat_template.empty()) return ChatTemplate::parse(o.chat_template);
  try {
    return ChatTemplate::from_model_dir(o.model);
  } catch (const InputError& e) {
    std::cerr << "no chat template: " << e.what() << " (/v1/chat/completions is refused; --chat-template FILE "
              << "gives one)" << std::endl;
    return std::nullopt;
  }
}

/// The special tokens a chat template sees (bos_token, eos_token, …): the model's own
/// template carries those of its tokenizer_config.json; with --chat-template they are
/// read from that file too (when it exists: a template that names none needs none).
nlohmann::json chat_special_tokens(const ServeOptions& o, const std::optional<ChatTemplate>& own) {
  nlohmann::json extra = nlohmann::json::object();
  if (o.chat_template.empty()) {
    if (own) {
      for (const auto& [name, text] : own->special_tokens()) extra[name] = text;
    }
    return extra;
  }
  std::ifstream in(o.model + "/tokenizer_config.json");
  if (!in) return extra;
  const nlohmann::json config = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (!config.is_object()) OLMO2_THROW(InputError, o.model, "/tokenizer_config.json is not a JSON object");
  for (const char* name : {"bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token"}) {
    const auto it = config.find(name);
    if (it == config.end()) continue;
    if (it->is_string()) extra[name] = *it;
    if (it->is_object() && it->contains("content") && (*it)["content"].is_string()) extra[name] = (*it)["content"];
  }
  return extra;
}

int64_t blocks_for_memory(const ServeOptions& o, int64_t bytes_per_block) {
  const int64_t n = o.kv_cache_bytes / bytes_per_block;
  if (n < 1) {
    OLMO2_THROW(InputError, "--kv-cache-memory ", o.kv_cache_bytes, " bytes holds no KV block: one block of ",
                o.block_size, " positions takes ", bytes_per_block, " bytes on this rank");
  }
  return n;
}

/// A draft of the model's vocabulary size but another tokenizer proposes tokens that mean
/// something else: answers stay exact (the model verifies every token), but few drafts
/// are accepted. Said at start when both directories have a tokenizer.json and they differ.
void warn_if_other_tokenizer(const ServeOptions& o) {
  const std::string mine = o.tokenizer.empty() ? o.model + "/tokenizer.json" : o.tokenizer;
  const std::string draft = o.speculative_model + "/tokenizer.json";
  std::ifstream a(mine, std::ios::binary), b(draft, std::ios::binary);
  if (!a || !b) return;
  const std::string x{std::istreambuf_iterator<char>(a), {}}, y{std::istreambuf_iterator<char>(b), {}};
  if (x != y) {
    std::cerr << "warning: --speculative-model's " << draft << " differs from the model's " << mine
              << ": a draft with another tokenizer proposes tokens the model rarely accepts (answers stay exact)"
              << std::endl;
  }
}

/// Loads and starts this rank's part of the session `rs` (its shard, on its device); on one
/// process the start line names its thread placement (RankSession::placement).
void build(ServeRank& s, const CliConfig& cfg, const RankSession& rs) {
  const ServeOptions& o = cfg.serve;
  const int rank = rs.rank();
  if (rank == 0 && !o.port_file.empty()) check_port_file(o.port_file);
  // A checkpoint's files are verified before any weight is read, each rank its share
  // (under MPI build runs inside parallel::agree, so every rank learns the verdict).
  verify_model_directory(o.model, {rank, rs.world_size()}, rank == 0 ? &std::cerr : nullptr);
  const ModelConfig& config = *rs.config;
  const parallel::PartitionPlan& plan = *rs.plan;
  // The pools' dtype: --kv-cache-dtype, auto the precision's (docs/architecture.md §3.2).
  const DType kv_dtype = kv_cache_dtype(o.kv_cache_dtype, o.precision.value_or(default_precision(config.dtype)));
  // Every rank's pool has the same block count: the one the fullest rank can hold.
  int64_t per_block = 0;
  for (int r = 0; r < static_cast<int>(plan.ranks.size()); ++r) {
    per_block = std::max(per_block,
                         KVCache::bytes_per_block(config, ShardSpec::from_plan(plan, r), o.block_size, kv_dtype));
  }
  EngineOptions eo;
  eo.kv_dtype = kv_dtype;
  eo.scheduler.num_blocks = blocks_for_memory(o, per_block);
  // A draft model runs on rank 0 with a KV cache of as many blocks as the model's, out of
  // rank 0's --kv-cache-memory (docs/architecture.md §8): every rank plans with that count.
  std::optional<ModelConfig> draft_config;
  int64_t draft_per_block = 0;
  DType draft_kv_dtype = kv_dtype;
  if (!o.speculative_model.empty()) {
    draft_config = ModelConfig::load(o.speculative_model);
    if (draft_config->vocab_size != config.vocab_size) {
      OLMO2_THROW(InputError, "--speculative-model ", o.speculative_model, " has a vocabulary of ",
                  draft_config->vocab_size, " tokens, the model ", config.vocab_size,
                  ": a draft must share the model's vocabulary");
    }
    draft_kv_dtype = kv_cache_dtype(o.kv_cache_dtype, o.precision.value_or(default_precision(draft_config->dtype)));
    draft_per_block =
        KVCache::bytes_per_block(*draft_config, ShardSpec::whole(*draft_config), o.block_size, draft_kv_dtype);
    const int64_t rank0 = KVCache::bytes_per_block(config, ShardSpec::from_plan(plan, 0), o.block_size, kv_dtype);
    const int64_t both = o.kv_cache_bytes / (rank0 + draft_per_block);
    if (both < 1) {
      OLMO2_THROW(InputError, "--kv-cache-memory ", o.kv_cache_bytes, " bytes holds no KV block of the model (",
                  rank0, " bytes on rank 0) with one of the draft model (", draft_per_block, " bytes)");
    }
    eo.scheduler.num_blocks = std::min(eo.scheduler.num_blocks, both);
  }
  eo.scheduler.num_speculative_tokens = o.speculative() ? o.num_speculative_tokens : 0;
  eo.scheduler.block_size = o.block_size;
  eo.scheduler.max_running = o.max_running;
  eo.scheduler.max_batch_tokens = o.max_batch_tokens;
  eo.scheduler.prefix_caching = o.prefix_caching;
  eo.scheduler.micro_batches = static_cast<int32_t>(rs.topology.layout().pp);
  eo.max_waiting = o.max_waiting;
  eo.shutdown_grace_s = o.shutdown_grace;
  EngineRanks er;
  if (rs.distributed()) {
    er.world = rs.world();
    er.groups = rs.parallel_context();
    er.results_root = rs.topology.rank(parallel::Coords{0, 0, rs.topology.layout().pp - 1});
  }
  if (rank == 0) {
    // --tokenizer (checked readable by read_serve_options), else the model directory's.
    const std::string tok = o.tokenizer.empty() ? o.model + "/tokenizer.json" : o.tokenizer;
    if (!std::filesystem::is_regular_file(tok)) {
      OLMO2_THROW(InputError, "no tokenizer: ", tok,
                  " is missing (serve reads the model directory's tokenizer.json; --tokenizer FILE names another)");
    }
    s.tokenizer = std::make_unique<Tokenizer>(Tokenizer::from_file(tok));
    s.chat_template = load_chat_template(o);
    s.chat_extra = chat_special_tokens(o, s.chat_template);
    s.metrics = std::make_unique<monitoring::ServeMetrics>();
  }
  const DeviceChoice& dev = rs.device;
  s.model = std::make_unique<Olmo2Model>(Olmo2Model::load(o.model, rs.shard, o.precision, dev.device, cfg.weights));
  s.model->add_generation_eos_token_ids(config.generation_eos_token_ids);  // generation_config.json's
  // The products' code path, named before the engine and the HTTP server start, so that a
  // bad OLMO2_BF16_GEMM or OLMO2_BATCH_INVARIANT_GEMM stops serve here with its InputError.
  // On a GPU the products are the CUDA backend's.
  const std::string product_path = dev.device != Device::CPU ? std::string(device_name(dev.device))
                                   : s.model->precision() == Precision::BF16 ? ops::bf16_gemm_path_name()
                                                                            : ops::batch_invariant_path_name();
  std::string speculation = "off";
  if (rank == 0 && draft_config) {
    auto draft = std::make_unique<Olmo2Model>(
        Olmo2Model::load(o.speculative_model, ShardSpec::whole(*draft_config), o.precision, dev.device));
    eo.proposer =
        std::make_shared<DraftModelProposer>(std::move(draft), eo.scheduler.num_blocks, o.block_size, draft_kv_dtype);
    warn_if_other_tokenizer(o);
    if (draft_config->max_position_embeddings < config.max_position_embeddings) {
      std::cerr << "warning: --speculative-model holds " << draft_config->max_position_embeddings
                << " positions, the model " << config.max_position_embeddings
                << ": sequences longer than the draft's context get no drafted tokens" << std::endl;
    }
  } else if (rank == 0 && o.speculative_ngram > 0) {
    eo.proposer = std::make_shared<NgramProposer>(o.speculative_ngram);
  }
  if (eo.proposer) {
    speculation = eo.proposer->describe() + ", up to " + std::to_string(o.num_speculative_tokens) +
                  " tokens per sequence and step";
    if (draft_config) {
      const int64_t bytes = eo.scheduler.num_blocks * draft_per_block;
      speculation += "; its KV cache takes " +
                     (bytes >= (int64_t{1} << 20) ? std::to_string(bytes >> 20) + " MiB"
                                                  : std::to_string(bytes >> 10) + " KiB") +
                     " of rank 0's --kv-cache-memory";
    }
  }
  s.engine = std::make_unique<ServingEngine>(*s.model, s.tokenizer.get(), s.metrics.get(), eo, er);
  if (rank == 0) {
    HttpOptions ho;
    ho.host = o.host, ho.port = o.port, ho.api_key = o.api_key, ho.max_body_bytes = o.max_body_bytes;
    ho.max_activation_memory = o.max_activation_memory;
    ho.tool_call_parser = o.tool_call_parser;
    // Every request in the server holds an HTTP worker while it runs or waits; beyond
    // 1024 workers, the requests past them queue (up to 1024, then 503) until one is free.
    // Connections that are idle or still sending hold none.
    ho.threads = o.http_threads > 0 ? o.http_threads
                                    : static_cast<int>(std::min<int64_t>(o.max_running + o.max_waiting + 8, 1024));
    // Every choice of a request runs as its own sequence: one prompt forks into at most
    // as many as the running batch holds.
    ServedModel sm{o.served_model_name, config.max_position_embeddings, config.vocab_size,
                   s.engine->cache_capacity_tokens(), o.max_running};
    sm.config = config;  // what activations and interventions are checked against
    sm.max_prompts = o.max_running + o.max_waiting;
    sm.max_activation_bytes = o.max_activation_bytes;
    if (rs.directory.generation) sm.defaults = rs.directory.generation->defaults;  // vLLM's --generation-config auto
    sm.json_options.whitespace = o.structured_whitespace_any ? structured::JsonSchemaOptions::Whitespace::Any
                                                             : structured::JsonSchemaOptions::Whitespace::Compact;
    s.http = std::make_unique<HttpServer>(*s.engine, *s.tokenizer, sm, *s.metrics, ho,
                                          s.chat_template ? &*s.chat_template : nullptr, s.chat_extra);
    std::cerr << "serving " << o.model << " as \"" << o.served_model_name << "\" on http://" << s.http->address()
              << " (" << eo.scheduler.num_blocks << " " << dtype_name(kv_dtype) << " KV blocks of " << o.block_size
              << " = "
              << capacity_text(s.engine->cache_capacity_tokens()) << ", " << precision_name(s.model->precision())
              << " with " << product_path << " batch-invariant products, weights "
              << (s.model->quantization() ? quantization_text(*s.model->quantization()) : std::string("dense")) << ", prefix caching "
              << (s.engine->prefix_caching() ? "on"
                  : o.prefix_caching ? "off (every layer is a sliding-window one)" : "off")
              << (rs.distributed() ? ", " + std::to_string(rs.world_size()) + " ranks" : ", " + rs.placement) << "; "
              << dev.description << "; " << describe_generation_source(config, cfg.directory, rs.directory)
              << "; speculative decoding: " << speculation << "; chat template: "
              << (!s.chat_template ? std::string("none")
                  : o.chat_template_file.empty() ? std::string("the model's") : o.chat_template_file)
              << ")" << std::endl;
    if (!o.port_file.empty()) {
      write_port_file(o.port_file, {published_address(o.host, s.http->port())});
      s.port_file.reset(o.port_file);
    }
  }
}

/// Runs the engine until a stop signal (rank 0 decides; other ranks follow its plan).
void serve(ServeRank& s, bool rank0) {
  std::atomic<bool> done{false};
  std::thread watcher;
  if (rank0) {
    watcher = std::thread([&] {
      while (!done.load() && g_serve_signal == 0) std::this_thread::sleep_for(std::chrono::milliseconds(50));
      if (done.load()) return;
      std::cerr << "stopping: no new requests; in-flight requests get up to " << s.engine->options().shutdown_grace_s
                << " s (a second signal cancels them now)" << std::endl;
      s.engine->request_stop();
      // A second signal: no more grace, cancel what is in flight now.
      std::thread impatient([&] {
        while (!done.load() && g_serve_signals < 2) std::this_thread::sleep_for(std::chrono::milliseconds(50));
        if (done.load()) return;
        std::cerr << "second signal: cancelling the requests in flight" << std::endl;
        s.engine->request_stop(true);
      });
      s.http->stop();  // closes the listening socket, then waits for handlers in flight
      impatient.join();
    });
  }
  try {
    s.engine->run();
  } catch (...) {
    // The engine failed (a collective timed out, a rank died): it has answered every
    // request with an error. Those answers reach the clients before the error ends
    // the process (MPI_Abort under mpirun): stop() waits for the handlers and their writes.
    done.store(true);
    if (watcher.joinable()) watcher.join();
    if (s.http) s.http->stop();
    throw;
  }
  done.store(true);
  if (watcher.joinable()) watcher.join();
  if (s.http) s.http->stop();
}

/// Raises the soft limit of open files to the hard one: every client connection is a
/// descriptor, and the usual soft limit (1024) would refuse clients long before the
/// server is busy.
void raise_open_files_limit() {
  rlimit r{};
  if (getrlimit(RLIMIT_NOFILE, &r) == 0 && r.rlim_cur < r.rlim_max) {
    r.rlim_cur = r.rlim_max == RLIM_INFINITY ? std::max<rlim_t>(r.rlim_cur, 1 << 20) : r.rlim_max;
    setrlimit(RLIMIT_NOFILE, &r);
  }
}
}  // namespace

void run_serve(const CliConfig& cfg, bool under_mpi_launcher) {
  raise_open_files_limit();
  for (int sig : {SIGTERM, SIGINT, SIGUSR1}) std::signal(sig, on_serve_signal);
  std::signal(SIGPIPE, SIG_IGN);  // a client gone mid-write is an error return, not death
  // serve has no data parallelism: one server per replica (max_dp 1).
  RankSessionSpec session = rank_session_spec(cfg, under_mpi_launcher);
  session.max_dp = 1;
  session.model = cfg.serve.model;
  run_rank_session(session, [&](RankSession& rs) {
    ServeRank s;
    parallel::agree(rs.world(), [&] { build(s, cfg, rs); });
    serve(s, rs.rank() == 0);
  });
}

}  // namespace olmo2
