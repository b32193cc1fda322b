#include "launcher/options.h"
#include "launcher/weight_options.h"

#include <charconv>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <utility>

#include <boost/program_options.hpp>

#include "launcher/layout_options.h"
#include "launcher/plan_command.h"
#include "launcher/serve_options.h"
#include "launcher/trace_options.h"
#include "launcher/train_options.h"
#include "runtime/generation/request_rules.h"

namespace olmo2 {

namespace po = boost::program_options;

namespace {

const char* kUsage =
    "usage: olmo2 SUBCOMMAND [options]\n"
    "subcommands:\n"
    "  info      --model DIR [--tp N --pp N --dp N --pp-layers a,b,...]\n"
    "                                                print the configuration, parameter count\n"
    "                                                and the partition plan per rank\n"
    "  plan      --model-config FILE|--model DIR --seq-len N [--tp N --pp N --dp N --cp N --pp-virtual V]\n"
    "            [--zero-stage S]\n"
    "            [--recompute M --precision P --micro-batch N --device D --memory-per-rank SIZE]\n"
    "            [--serve --kv-cache-memory SIZE] [--format text|json]\n"
    "                                                the memory of every rank of a layout, and\n"
    "                                                whether it fits (exit 1 if not)\n"
    "  train     --model-config FILE|--model DIR --data FILES... --seq-len N --global-batch N\n"
    "            --steps N [--micro-batch N --lr X --save-dir DIR --resume ...]\n"
    "            [--tp N --pp N --dp N --cp N --pp-layers a,b,... --pp-virtual V --overlap on|off]\n"
    "            (under mpirun: sharded)             train (OLMo 2 recipe)\n"
    "  generate  --model DIR --prompt TEXT|--prompt-ids 1,2,3 [--max-tokens N] [--format text|json]\n"
    "            [--temperature T --top-k K --top-p P --repetition-penalty R --seed S]\n"
    "            [--tp N --pp N --dp N --pp-layers a,b,...]  (under mpirun: sharded)\n"
    "            [--activations JSON --interventions JSON --activations-out FILE]\n"
    "                                                generate (greedy, or sampled with --temperature)\n"
    "  trace     --model DIR --prompts FILE --activations JSON [--interventions JSON] [--output FILE]\n"
    "            [--tp N --pp N --dp N --pp-layers a,b,...]  (under mpirun: sharded)\n"
    "                                                named activations of prompts (JSON Lines)\n"
    "  serve     --model DIR [--port 8000 --host 127.0.0.1 --kv-cache-memory 1GiB --api-key KEY]\n"
    "            [--chat-template FILE --tokenizer FILE] [--tp N --pp N]  (under mpirun: sharded)\n"
    "            [--speculative-model DIR | --speculative-ngram N] [--num-speculative-tokens K]\n"
    "                                                OpenAI-style HTTP completions server\n"
    "            (train, generate, trace, serve: [--device cpu|cuda] [--precision fp32|bf16])\n"
    "            (generate, trace, serve: [--weights auto|int8|int4 --weight-group N], CPU only)\n"
    "            (generate, trace, serve: [--generation-config auto|ignore] [--strict-special-tokens])\n"
    "  tokenize  --tokenizer FILE --output DIR INPUTS...  documents -> .npy token files\n"
    "  tokenize  --tokenizer FILE --ids              stdin text -> JSON token ids\n"
    "run 'olmo2 SUBCOMMAND --help' for the options of one subcommand\n";

/// The options of `command`. With `for_help`, only those the command accepts: serve
/// parses --dp to refuse it with a clear message, but does not list it.
po::options_description describe(const std::string& command, bool for_help = false) {
  po::options_description d("olmo2 " + command + " options");
  d.add_options()("help,h", "print this help")("config", po::value<std::string>(),
                                                "INI file with options (the command line wins)")(
      "threads", po::value<int>(),
      "CPU threads per rank (default: SLURM_CPUS_PER_TASK, else OMP_NUM_THREADS, else the rank's share of "
      "its affinity mask; tokenize: all cores)");
  if (command == "train") {
    add_train_options(d);
    add_layout_options(d, command);
    add_device_options(d);
    return d;
  }
  if (command == "plan") {
    add_plan_options(d);
    add_layout_options(d, command);
    return d;
  }
  if (command == "tokenize") {
    d.add_options()("tokenizer", po::value<std::string>(), "tokenizer.json (byte-level BPE)")(
        "output", po::value<std::string>(), "directory for the .npy token files")(
        "ids", po::bool_switch(), "read text on stdin, print its token ids as a JSON array")(
        "eos-id", po::value<int64_t>(),
        "id appended after every document (default: the tokenizer's end-of-text token, from "
        "tokenizer_config.json beside --tokenizer when there is one)")(
        "allow-eos-mismatch", po::bool_switch(),
        "append an --eos-id that is not the tokenizer's end-of-text token, or not the one the output "
        "directory's tokenize.json records (a warning instead of an error)")(
        "input", po::value<std::vector<std::string>>(), "input files (positional)");
    return d;
  }
  const bool serve = command == "serve";
  d.add_options()("model", po::value<std::string>(),
                  serve ? "model directory (config.json + safetensors, and tokenizer.json unless --tokenizer)"
                        : "model directory (config.json + safetensors)");
  add_layout_options(d, command, for_help);
  if (command == "serve") add_serve_options(d);
  if (command == "serve" || command == "generate" || command == "trace") {
    add_device_options(d);
    add_weight_options(d);
    add_model_directory_options(d);
  }
  if (command == "generate" || command == "trace") {
    d.add_options()("tokenizer", po::value<std::string>(),
                    command == "trace" ? "tokenizer.json for text prompts (default: the model's)"
                                       : "tokenizer.json for --prompt (default: the model's)")(
        "precision", po::value<std::string>(), "fp32 or bf16 (default: the checkpoint's dtype, bf16 for a bf16 checkpoint)");
    add_trace_options(d, command);
  }
  if (command == "generate") {
    d.add_options()("kv-cache-dtype", po::value<std::string>(),
                    "KV cache: auto (default: bf16 under --precision bf16, f32 under fp32), bf16 or f32");
  }
  if (command == "generate") {
    d.add_options()("prompt", po::value<std::string>(), "prompt text (tokenizer.json of the model directory)")(
        "prompt-ids", po::value<std::string>(), "prompt token ids, e.g. 1,2,3")(
        "temperature", po::value<double>(), "sampling temperature (default 0: greedy)")(
        "top-k", po::value<int64_t>(), "sample among the k most likely tokens (default 0: all)")(
        "top-p", po::value<double>(), "nucleus sampling probability mass in (0, 1] (default 1)")(
        "repetition-penalty", po::value<double>(),
        "CTRL repetition penalty over the prompt's and output's tokens, > 0 (default 1: none)")(
        "seed", po::value<uint64_t>(), "sampling seed (default 0)")(
        "max-tokens", po::value<int64_t>(), "tokens to generate (default 16, or generation_config.json's max_new_tokens)")(
        "format", po::value<std::string>(), "output format: text or json (default text)");
  }
  return d;
}

}  // namespace

namespace {
/// Splits "a,b,c" into integers ≥ `min`; throws UsageError naming the bad element.
template <typename T>
std::vector<T> parse_list(const std::string& text, const std::string& option, T min, const char* what) {
  std::vector<T> out;
  size_t start = 0;
  while (true) {
    const size_t comma = text.find(',', start);
    const std::string item = text.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    T v = 0;
    auto [end, ec] = std::from_chars(item.data(), item.data() + item.size(), v);
    if (item.empty() || ec != std::errc() || end != item.data() + item.size() || v < min) {
      OLMO2_THROW(UsageError, "--", option, ": \"", item, "\" is not a ", what);
    }
    out.push_back(v);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}
}  // namespace

std::vector<int64_t> parse_layer_list(const std::string& text, const std::string& option) {
  return parse_list<int64_t>(text, option, 1, "layer count (expected positive integers separated by commas)");
}

std::vector<int32_t> parse_id_list(const std::string& text, const std::string& option) {
  return parse_list<int32_t>(text, option, 0, "token id (expected non-negative integers separated by commas)");
}

namespace {
/// An INI file may not name another one: `config = other.ini` would be ignored (the
/// command line's --config already holds the option), and the run would then fail for
/// options the user believes given. UsageError naming the file and line.
void refuse_nested_config(const std::string& text, const std::string& path) {
  std::istringstream lines(text);
  int number = 0;
  for (std::string line; std::getline(lines, line);) {
    ++number;
    const size_t start = line.find_first_not_of(" \t");
    if (start == std::string::npos || line.compare(start, 6, "config") != 0) continue;
    const size_t after = line.find_first_not_of(" \t", start + 6);
    if (after != std::string::npos && line[after] == '=') {
      OLMO2_THROW(UsageError, "--config ", path, ": line ", number, " names another config file (",
                  line.substr(start), "); config files do not include others: give its options in this file, or "
                  "that file as --config");
    }
  }
}
}  // namespace

CliConfig parse_command_line(int argc, const char* const* argv) {
  CliConfig cfg;
  if (argc < 2) OLMO2_THROW(UsageError, "no subcommand given\n", kUsage);
  cfg.command = argv[1];
  if (cfg.command == "--help" || cfg.command == "-h" || cfg.command == "help") {
    cfg.help = true;
    cfg.help_text = kUsage;
    return cfg;
  }
  if (cfg.command != "info" && cfg.command != "generate" && cfg.command != "trace" && cfg.command != "tokenize" &&
      cfg.command != "train" && cfg.command != "serve" && cfg.command != "plan") {
    OLMO2_THROW(UsageError, "unknown subcommand \"", cfg.command,
                "\" (expected info, plan, generate, trace, train, serve or tokenize)");
  }
  const po::options_description desc = describe(cfg.command);
  po::variables_map vm;
  try {
    po::positional_options_description positional;
    if (cfg.command == "tokenize") positional.add("input", -1);
    po::store(po::command_line_parser(argc - 1, argv + 1).options(desc).positional(positional).run(), vm);
    if (vm.count("config")) {
      const std::string path = vm["config"].as<std::string>();
      std::ifstream in(path);
      if (!std::filesystem::is_regular_file(path) || !in) OLMO2_THROW(UsageError, "--config: cannot open ", path, " (not a readable file)");
      const std::string text((std::istreambuf_iterator<char>(in)), {});
      refuse_nested_config(text, path);
      std::istringstream ini(text);
      po::store(po::parse_config_file(ini, desc), vm);
    }
    po::notify(vm);
  } catch (const po::error& e) {
    OLMO2_THROW(UsageError, cfg.command, ": ", e.what());
  }
  cfg.job_options = job_options(vm);
  if (vm.count("help")) {
    std::ostringstream s;
    s << describe(cfg.command, true);
    cfg.help = true;
    cfg.help_text = s.str();
    return cfg;
  }
  if (vm.count("threads")) {
    cfg.threads = vm["threads"].as<int>();
    if (cfg.threads < 1) OLMO2_THROW(UsageError, "--threads must be at least 1, got ", cfg.threads);
  }
  if (cfg.command == "train" || cfg.command == "generate" || cfg.command == "trace" || cfg.command == "serve") {
    cfg.device_options = read_device_options(vm);
  }
  if (cfg.command == "generate" || cfg.command == "trace" || cfg.command == "serve") {
    cfg.weights = read_weight_options(vm, cfg.device_options.device);
  }
  if (cfg.command == "train") {
    cfg.train = read_train_options(vm);  // train.device too
    cfg.layout = read_layout_options(vm, cfg.command);
    cfg.train.pp_layers = cfg.layout.pp_layers;  // the Trainer plans over its resolved config
    cfg.train.pp_virtual = cfg.layout.pp_virtual;
    return cfg;
  }
  if (cfg.command == "plan") {
    cfg.plan = read_plan_options(vm);
    cfg.layout = read_layout_options(vm, cfg.command);
    cfg.plan.options.layout = {cfg.layout.tp, cfg.layout.pp, cfg.layout.dp > 0 ? cfg.layout.dp : 1, cfg.layout.cp};
    cfg.plan.options.pp_virtual = cfg.layout.pp_virtual;
    cfg.plan.options.pp_layers = cfg.layout.pp_layers;
    try {  // the options alone, as train's validate: a mistake on the command line is exit 2
      check_plan_options(cfg.plan.options);
    } catch (const InputError& e) {
      OLMO2_THROW(UsageError, "plan: ", e.what());
    }
    return cfg;
  }
  if (cfg.command == "tokenize") {
    if (!vm.count("tokenizer")) OLMO2_THROW(UsageError, "tokenize: --tokenizer FILE is required");
    cfg.tokenizer = vm["tokenizer"].as<std::string>();
    cfg.ids_mode = vm["ids"].as<bool>();
    if (vm.count("input")) cfg.inputs = vm["input"].as<std::vector<std::string>>();
    if (vm.count("eos-id")) cfg.eos_id = vm["eos-id"].as<int64_t>();
    cfg.allow_eos_mismatch = vm["allow-eos-mismatch"].as<bool>();
    if (cfg.ids_mode) {
      if (!cfg.inputs.empty() || vm.count("output")) {
        OLMO2_THROW(UsageError, "tokenize --ids reads stdin: give no --output and no input files");
      }
      if (cfg.eos_id || cfg.allow_eos_mismatch) {
        OLMO2_THROW(UsageError, "tokenize --ids appends no end-of-text token: --eos-id and --allow-eos-mismatch "
                                "apply to --output only");
      }
      return cfg;
    }
    if (!vm.count("output")) OLMO2_THROW(UsageError, "tokenize: --output DIR is required (or --ids)");
    cfg.output = vm["output"].as<std::string>();
    if (cfg.inputs.empty()) OLMO2_THROW(UsageError, "tokenize: no input files given");
    return cfg;
  }
  if (!vm.count("model")) OLMO2_THROW(UsageError, cfg.command, ": --model DIR is required");
  cfg.model = vm["model"].as<std::string>();
  cfg.layout = read_layout_options(vm, cfg.command);
  if (cfg.command == "serve") {
    cfg.serve = read_serve_options(vm, std::getenv("OLMO2_API_KEY"));
    cfg.directory = read_model_directory_options(
        vm, cfg.serve.tokenizer.empty() ? cfg.model + "/tokenizer.json" : cfg.serve.tokenizer);
  }
  if (cfg.command == "generate" || cfg.command == "trace") {
    cfg.trace = read_trace_options(vm, cfg.command);
    cfg.tokenizer = vm.count("tokenizer") ? vm["tokenizer"].as<std::string>() : cfg.model + "/tokenizer.json";
    if (vm.count("precision")) cfg.precision = read_precision(vm["precision"].as<std::string>());
    cfg.directory = read_model_directory_options(vm, cfg.tokenizer);
  }
  if (cfg.command == "generate") {
    if (vm.count("kv-cache-dtype")) cfg.kv_cache_dtype = read_kv_cache_dtype(vm["kv-cache-dtype"].as<std::string>());
    if (vm.count("prompt-ids") == vm.count("prompt")) {
      OLMO2_THROW(UsageError, "generate: give exactly one of --prompt TEXT and --prompt-ids 1,2,3");
    }
    if (vm.count("prompt-ids")) cfg.prompt_ids = parse_id_list(vm["prompt-ids"].as<std::string>(), "prompt-ids");
    if (vm.count("prompt")) {
      cfg.prompt = vm["prompt"].as<std::string>();
      if (cfg.prompt.empty()) OLMO2_THROW(UsageError, "generate: --prompt is empty");
    }
    if (vm.count("temperature")) cfg.sampling.temperature = vm["temperature"].as<double>();
    if (vm.count("top-k")) cfg.sampling.top_k = vm["top-k"].as<int64_t>();
    if (vm.count("top-p")) cfg.sampling.top_p = vm["top-p"].as<double>();
    if (vm.count("seed")) cfg.sampling.seed = vm["seed"].as<uint64_t>();
    if (vm.count("repetition-penalty")) cfg.repetition_penalty = vm["repetition-penalty"].as<double>();
    cfg.given = {vm.count("temperature") > 0, vm.count("top-k") > 0, vm.count("top-p") > 0, vm.count("max-tokens") > 0,
                 vm.count("repetition-penalty") > 0};
    try {
      validate(cfg.sampling);
      throw_if_broken(repetition_penalty_rule(cfg.repetition_penalty));
    } catch (const InputError& e) {
      OLMO2_THROW(UsageError, "generate: ", e.what());
    }
    if (vm.count("max-tokens")) cfg.max_tokens = vm["max-tokens"].as<int64_t>();
    if (cfg.max_tokens < 1) OLMO2_THROW(UsageError, "--max-tokens must be at least 1, got ", cfg.max_tokens);
    if (vm.count("format")) cfg.format = vm["format"].as<std::string>();
    if (cfg.format != "text" && cfg.format != "json") {
      OLMO2_THROW(UsageError, "--format must be text or json, got \"", cfg.format, "\"");
    }
  }
  return cfg;
}

}  // namespace olmo2
