#include "launcher/serve_options.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "launcher/options.h"
#include "runtime/serve/api/tool_call_parser.h"
#include "runtime/serve/chat/chat_template.h"
#include "runtime/serve/memory_size.h"
#include "runtime/serve/speculative/proposer.h"

namespace olmo2 {

namespace po = boost::program_options;

void add_serve_options(po::options_description& d) {
  d.add_options()("served-model-name", po::value<std::string>(),
                  "the name requests use in \"model\" (default: the model directory's name)")(
      "host", po::value<std::string>(), "address to listen on (default 127.0.0.1: this machine only)")(
      "port", po::value<int>(), "HTTP port for the API and /metrics (default 8000; 0: any free port, named in the "
      "start line and --port-file)")(
      "port-file", po::value<std::string>(), "write HOST:PORT there once the server listens (removed when it stops)")(
      "api-key", po::value<std::string>(),
      "require 'Authorization: Bearer KEY' (all but /health, /metrics); a command line is visible to every "
      "user (ps): prefer the environment variable OLMO2_API_KEY, read when --api-key is absent")(
      "tokenizer", po::value<std::string>(), "tokenizer.json (default: the model directory's)")(
      "chat-template", po::value<std::string>(),
      "Jinja chat template file for /v1/chat/completions (default: the model's own)")(
      "tool-call-parser", po::value<std::string>(),
      "the model's tool-call syntax, parsed into tool_calls with tool_choice auto: olmo3, hermes or none "
      "(default: the one the chat template writes)")(
      "kv-cache-memory", po::value<std::string>(), "KV-cache bytes on each rank, e.g. 512MiB, 2GiB (default 1GiB)")(
      "kv-cache-dtype", po::value<std::string>(),
      "KV-cache pools: auto (default: bf16 under --precision bf16, f32 under fp32), bf16 (half the bytes per "
      "block: twice the blocks in --kv-cache-memory) or f32")(
      "block-size", po::value<int64_t>(), "positions per KV-cache block (default 16)")(
      "max-running-requests", po::value<int64_t>(), "sequences in the running batch (default 64)")(
      "max-batch-tokens", po::value<int64_t>(), "tokens per engine step: decodes + prefill chunks (default 512)")(
      "max-waiting-requests", po::value<int64_t>(), "queued requests beyond the running batch; more get 503 (default 256)")(
      "no-prefix-caching", po::bool_switch(), "compute every prompt in full: no reuse of cached KV blocks of equal prefixes")(
      "enable-prefix-caching", po::value<bool>()->implicit_value(true),
      "reuse the cached KV blocks of equal prompt prefixes: true (default) or false")(
      "max-body-bytes", po::value<int64_t>(), "largest request body accepted (default 1048576)")(
      "max-activation-bytes", po::value<std::string>(),
      "most bytes of activations one request may ask for (its reads' worst case, f32), e.g. 16MiB, 1GiB; "
      "more gets 400 (default 64MiB)")(
      "max-activation-memory", po::value<std::string>(),
      "bytes of activations all requests in the server together may return at worst; beyond it requests with reads "
      "wait for earlier ones (default: the larger of --kv-cache-memory and --max-activation-bytes)")(
      "shutdown-grace", po::value<double>(), "seconds in-flight requests get after SIGTERM (default 25, under Slurm's default KillWait of 30)")(
      "http-threads", po::value<int>(), "HTTP worker threads (default: running + waiting + 8, at most 1024)")(
      "precision", po::value<std::string>(), "fp32 or bf16 (default: the checkpoint's dtype, bf16 for a bf16 checkpoint)")(
      "speculative-model", po::value<std::string>(),
      "speculative decoding: a draft model directory (same vocabulary) on rank 0 proposes tokens that the model "
      "verifies in one pass; answers are bit-identical to plain decoding")(
      "speculative-ngram", po::value<int>(),
      "speculative decoding by prompt lookup: propose what followed the latest earlier occurrence of the last N tokens")(
      "num-speculative-tokens", po::value<int>(), "tokens proposed per sequence and step, 1…16 (default 4)")(
      "structured-whitespace", po::value<std::string>(),
      "whitespace between JSON tokens of json_schema / json_object outputs: compact (none, as OpenAI's strict "
      "mode; default) or any (JSON's whitespace, a few characters at each place)");
}

namespace {
/// The path of file option `name`, which must name a readable regular file.
std::string readable_file(const po::variables_map& vm, const char* name) {
  const std::string path = vm[name].as<std::string>();
  std::error_code ec;
  if (path.empty() || !std::filesystem::is_regular_file(path, ec) || !std::ifstream(path)) {
    OLMO2_THROW(UsageError, "--", name, ": cannot read \"", path, "\" (not a readable file)");
  }
  return path;
}
}  // namespace

ServeOptions read_serve_options(const po::variables_map& vm, const char* env_api_key) {
  ServeOptions o;
  if (!vm.count("model")) OLMO2_THROW(UsageError, "serve: --model DIR is required");
  o.model = vm["model"].as<std::string>();
  std::filesystem::path dir(o.model);
  o.served_model_name = (dir.has_filename() ? dir.filename() : dir.parent_path().filename()).string();
  if (vm.count("served-model-name")) o.served_model_name = vm["served-model-name"].as<std::string>();
  if (o.served_model_name.empty()) OLMO2_THROW(UsageError, "--served-model-name must not be empty");
  if (vm.count("host")) o.host = vm["host"].as<std::string>();
  if (o.host.empty()) OLMO2_THROW(UsageError, "--host must not be empty");
  if (vm.count("port")) o.port = vm["port"].as<int>();
  if (o.port < 0 || o.port > 65535) OLMO2_THROW(UsageError, "--port must be in 1…65535 (or 0: any free one), got ", o.port);
  if (vm.count("port-file")) {
    o.port_file = vm["port-file"].as<std::string>();
    if (o.port_file.empty()) OLMO2_THROW(UsageError, "--port-file must not be empty");
  }
  if (vm.count("api-key")) {
    o.api_key = vm["api-key"].as<std::string>();
    if (o.api_key.empty()) OLMO2_THROW(UsageError, "--api-key must not be empty");
  } else if (env_api_key) {
    o.api_key = env_api_key;
    if (o.api_key.empty()) {
      OLMO2_THROW(UsageError, "OLMO2_API_KEY is set but empty: unset it to serve without an API key");
    }
  }
  if (vm.count("tokenizer")) o.tokenizer = readable_file(vm, "tokenizer");
  if (vm.count("chat-template")) {
    o.chat_template_file = readable_file(vm, "chat-template");
    std::ifstream in(o.chat_template_file);
    std::ostringstream text;
    text << in.rdbuf();
    o.chat_template = text.str();
    if (o.chat_template.empty()) OLMO2_THROW(UsageError, "--chat-template: ", o.chat_template_file, " is empty");
    try {  // a template the interpreter cannot run is a usage error now, not a 400 per request
      ChatTemplate::parse(o.chat_template);
    } catch (const InputError& e) {
      OLMO2_THROW(UsageError, "--chat-template ", o.chat_template_file, ": ", e.what());
    }
  }
  if (vm.count("tool-call-parser")) {
    o.tool_call_parser = vm["tool-call-parser"].as<std::string>();
    try {
      tool_call_format_from_name(o.tool_call_parser);
    } catch (const InputError& e) {
      OLMO2_THROW(UsageError, "--tool-call-parser: ", e.what());
    }
  }
  auto memory = [&](const char* name, int64_t& field) {
    if (!vm.count(name)) return;
    try {
      field = parse_memory_size(vm[name].as<std::string>(), std::string("--") + name);
    } catch (const InputError& e) {
      OLMO2_THROW(UsageError, e.what());
    }
  };
  memory("kv-cache-memory", o.kv_cache_bytes);
  memory("max-activation-bytes", o.max_activation_bytes);
  memory("max-activation-memory", o.max_activation_memory);
  if (!vm.count("max-activation-memory")) o.max_activation_memory = std::max(o.kv_cache_bytes, o.max_activation_bytes);
  if (o.max_activation_memory < o.max_activation_bytes) {
    OLMO2_THROW(UsageError, "--max-activation-memory ", o.max_activation_memory, " is below --max-activation-bytes ",
                o.max_activation_bytes, ": a request allowed its reads could never run");
  }
  if (vm.count("structured-whitespace")) {
    const std::string w = vm["structured-whitespace"].as<std::string>();
    if (w != "compact" && w != "any") {
      OLMO2_THROW(UsageError, "--structured-whitespace must be compact or any, got \"", w, "\"");
    }
    o.structured_whitespace_any = w == "any";
  }
  auto positive = [&](const char* name, int64_t& field) {
    if (!vm.count(name)) return;
    field = vm[name].as<int64_t>();
    if (field < 1) OLMO2_THROW(UsageError, "--", name, " must be at least 1, got ", field);
  };
  positive("block-size", o.block_size);
  if (o.block_size > 4096) OLMO2_THROW(UsageError, "--block-size must be at most 4096 positions, got ", o.block_size);
  positive("max-running-requests", o.max_running);
  positive("max-batch-tokens", o.max_batch_tokens);
  positive("max-body-bytes", o.max_body_bytes);
  if (vm.count("max-waiting-requests")) o.max_waiting = vm["max-waiting-requests"].as<int64_t>();
  if (o.max_waiting < 0 || o.max_waiting > 1000000) {
    OLMO2_THROW(UsageError, "--max-waiting-requests must be in 0…1000000, got ", o.max_waiting);
  }
  if (o.max_running > 100000) {
    OLMO2_THROW(UsageError, "--max-running-requests must be at most 100000, got ", o.max_running);
  }
  if (o.max_batch_tokens < o.max_running) {
    OLMO2_THROW(UsageError, "--max-batch-tokens ", o.max_batch_tokens, " is below --max-running-requests ",
                o.max_running, ": every running sequence needs one token per step");
  }
  const bool off = vm.count("no-prefix-caching") && vm["no-prefix-caching"].as<bool>();
  if (vm.count("enable-prefix-caching")) {
    o.prefix_caching = vm["enable-prefix-caching"].as<bool>();
    if (o.prefix_caching && off) {
      OLMO2_THROW(UsageError, "--enable-prefix-caching=true and --no-prefix-caching contradict each other");
    }
  }
  if (off) o.prefix_caching = false;
  if (vm.count("shutdown-grace")) o.shutdown_grace = vm["shutdown-grace"].as<double>();
  if (!(o.shutdown_grace >= 0)) OLMO2_THROW(UsageError, "--shutdown-grace must be ≥ 0 seconds, got ", o.shutdown_grace);
  if (vm.count("http-threads")) {
    o.http_threads = vm["http-threads"].as<int>();
    if (o.http_threads < 1 || o.http_threads > 4096) {
      OLMO2_THROW(UsageError, "--http-threads must be in 1…4096, got ", o.http_threads);
    }
  }
  if (vm.count("precision")) o.precision = read_precision(vm["precision"].as<std::string>());
  if (vm.count("kv-cache-dtype")) o.kv_cache_dtype = read_kv_cache_dtype(vm["kv-cache-dtype"].as<std::string>());
  if (vm.count("speculative-model")) {
    o.speculative_model = vm["speculative-model"].as<std::string>();
    if (!std::filesystem::is_regular_file(std::filesystem::path(o.speculative_model) / "config.json")) {
      OLMO2_THROW(UsageError, "--speculative-model: \"", o.speculative_model, "\" is not a model directory (no config.json)");
    }
  }
  if (vm.count("speculative-ngram")) {
    o.speculative_ngram = vm["speculative-ngram"].as<int>();
    if (o.speculative_ngram < 1 || o.speculative_ngram > 64) {
      OLMO2_THROW(UsageError, "--speculative-ngram must be in 1…64 tokens, got ", o.speculative_ngram);
    }
  }
  if (!o.speculative_model.empty() && o.speculative_ngram > 0) {
    OLMO2_THROW(UsageError, "--speculative-model and --speculative-ngram: choose one way of proposing tokens");
  }
  if (vm.count("num-speculative-tokens")) {
    const int k = vm["num-speculative-tokens"].as<int>();
    if (!o.speculative()) {
      OLMO2_THROW(UsageError, "--num-speculative-tokens ", k, " needs --speculative-model or --speculative-ngram");
    }
    if (k < 1 || k > kMaxSpeculativeTokens) {
      OLMO2_THROW(UsageError, "--num-speculative-tokens must be in 1…", kMaxSpeculativeTokens, ", got ", k);
    }
    o.num_speculative_tokens = k;
  }
  if (o.speculative() && o.num_speculative_tokens + 1 > o.max_batch_tokens) {
    OLMO2_THROW(UsageError, "--num-speculative-tokens ", o.num_speculative_tokens, " needs --max-batch-tokens of at least ",
                o.num_speculative_tokens + 1, " (a verification takes K + 1 tokens of a step), got ", o.max_batch_tokens);
  }
  return o;
}

Precision read_precision(const std::string& text) {
  try {
    return parse_precision(text, "--precision");
  } catch (const InputError& e) {
    OLMO2_THROW(UsageError, e.what());
  }
}

std::optional<DType> read_kv_cache_dtype(const std::string& text) {
  try {
    return parse_kv_cache_dtype(text, "--kv-cache-dtype");
  } catch (const InputError& e) {
    OLMO2_THROW(UsageError, e.what());
  }
}

}  // namespace olmo2
