// The options of `olmo2 serve` (docs/architecture.md §12), declared for Boost.Program_options.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <boost/program_options.hpp>

#include "runtime/model/precision.h"

namespace olmo2 {

struct ServeOptions {
  std::string model;              ///< --model DIR (config.json, safetensors, tokenizer.json)
  std::string served_model_name;  ///< --served-model-name (default: the directory's name)
  std::string host = "127.0.0.1"; ///< --host
  int port = 8000;                ///< --port (0: a free port the kernel picks)
  std::string port_file;          ///< --port-file: "HOST:PORT" written there once listening
  std::string api_key;            ///< --api-key, else $OLMO2_API_KEY (Bearer); "" = none
  std::string tokenizer;          ///< --tokenizer FILE (default: MODEL/tokenizer.json)
  std::string chat_template_file; ///< --chat-template FILE ("": the model's own)
  std::string chat_template;      ///< the text of --chat-template, read at start
  /// --tool-call-parser: olmo3, hermes or none; "" (not given): the chat template's
  /// own call syntax (docs/architecture.md §8, "Tool calls")
  std::string tool_call_parser;
  int64_t kv_cache_bytes = int64_t{1} << 30;  ///< --kv-cache-memory, per rank
  int64_t block_size = 16;        ///< --block-size, positions per KV block
  int64_t max_running = 64;       ///< --max-running-requests
  int64_t max_batch_tokens = 512; ///< --max-batch-tokens per step (prefill chunk budget)
  int64_t max_waiting = 256;      ///< --max-waiting-requests (beyond: 503)
  bool prefix_caching = true;     ///< off with --no-prefix-caching (or --enable-prefix-caching=false)
  int64_t max_body_bytes = 1 << 20;  ///< --max-body-bytes
  /// --max-activation-bytes: the most bytes one request's activation reads may return at
  /// worst (docs/architecture.md §13)
  int64_t max_activation_bytes = int64_t{64} << 20;
  /// --max-activation-memory: the bytes of reads all requests together may return at
  /// worst (rank 0 holds them until written); 0 (not given): the larger of
  /// --kv-cache-memory and --max-activation-bytes.
  int64_t max_activation_memory = 0;
  double shutdown_grace = 25;     ///< --shutdown-grace seconds (under Slurm's default KillWait, 30 s)
  int http_threads = 0;           ///< --http-threads (0: running + waiting + 8, at most 1024)
  std::optional<Precision> precision;  ///< --precision (unset: the checkpoint's, default_precision)
  /// --kv-cache-dtype bf16|f32 (unset, or auto: the precision's, kv_cache_dtype)
  std::optional<DType> kv_cache_dtype;
  /// Speculative decoding (docs/architecture.md §8): --speculative-model DIR (a draft model
  /// of the same vocabulary, on rank 0) or --speculative-ngram N (prompt lookup), each
  /// proposing up to --num-speculative-tokens K (1 … 16, default 4) per sequence and step.
  std::string speculative_model;
  int32_t speculative_ngram = 0;  ///< 0: no prompt lookup
  int32_t num_speculative_tokens = 4;
  bool speculative() const { return !speculative_model.empty() || speculative_ngram > 0; }
  /// --structured-whitespace any: JSON outputs of structured-output constraints may hold
  /// JSON's whitespace between tokens; compact (false, the default): none, as OpenAI's
  /// strict mode (docs/architecture.md §8, "Structured outputs").
  bool structured_whitespace_any = false;
};

/// Adds every `olmo2 serve` option (also accepted in an INI --config file).
void add_serve_options(boost::program_options::options_description& d);

/// Reads and validates them. Throws UsageError naming the option and the value. The API
/// key comes from --api-key, else from `env_api_key` (the environment variable
/// OLMO2_API_KEY, null when unset): a command line is visible to every user of the
/// machine (ps, /proc/PID/cmdline), the environment only to the process's owner. An
/// empty key from either is refused (it would silently serve without one).
/// --tokenizer and --chat-template must be readable files; the template is read and
/// parsed here (ChatTemplate::parse), so that a missing or empty file or a template the
/// interpreter cannot run stops serve before any model is loaded.
ServeOptions read_serve_options(const boost::program_options::variables_map& vm, const char* env_api_key);

/// Parses a --precision value ("fp32" or "bf16"); UsageError naming it otherwise.
Precision read_precision(const std::string& text);

/// Parses a --kv-cache-dtype value (auto: nullopt, bf16, f32; parse_kv_cache_dtype);
/// UsageError naming it and the choices otherwise.
std::optional<DType> read_kv_cache_dtype(const std::string& text);

}  // namespace olmo2
