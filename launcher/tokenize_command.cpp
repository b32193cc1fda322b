// `olmo2 tokenize`: documents → .npy token files, each document ended by the tokenizer's
// own end-of-text token, recorded in OUTPUT/tokenize.json (docs/architecture.md §7 "Token
// data and its EOS", §12); or stdin text → JSON ids (--ids).
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <iterator>
#include <thread>

#include <nlohmann/json.hpp>

#include "launcher/commands.h"
#include "runtime/io/file_sha256.h"
#include "runtime/tokenizer/special_tokens.h"
#include "runtime/tokenizer/tokenize_corpus.h"
#include "runtime/tokenizer/tokenize_manifest.h"
#include "runtime/tokenizer/tokenizer.h"

namespace olmo2 {

namespace {

/// "<|endoftext|> (id 100257)".
std::string role_text(const TokenRole& r) { return r.text + " (id " + std::to_string(r.id) + ")"; }

/// The EOS to append: --eos-id when given (refused, unless --allow-eos-mismatch, when the
/// tokenizer has an end-of-text token and it is another), else the tokenizer's. Throws
/// UsageError naming the id, what the tokenizer calls it and the tokenizer's EOS; warns on
/// `err` when allowed.
TokenRole choose_eos(const CliConfig& cfg, const Tokenizer& tok, const TokenizerRoles& roles,
                     const std::string& tokenizer_config, std::ostream& err) {
  if (!cfg.eos_id) {
    if (!roles.eos) {
      const std::string why = std::filesystem::exists(tokenizer_config)
                                  ? tokenizer_config + " names no eos_token"
                                  : "no tokenizer_config.json beside it and no added special token <|endoftext|>, "
                                    "<|end_of_text|>, </s> or <eos>";
      OLMO2_THROW(UsageError, "tokenize: the tokenizer ", cfg.tokenizer, " has no end-of-text token (", why,
                  "): give --eos-id N, the id to append after every document");
    }
    return *roles.eos;
  }
  const int64_t id = *cfg.eos_id;
  if (id < 0 || id >= tok.vocab_size()) {
    OLMO2_THROW(UsageError, "tokenize: --eos-id ", id, " is not a token of ", cfg.tokenizer, " (ids 0 to ",
                tok.vocab_size() - 1, ")");
  }
  const TokenRole chosen{static_cast<int32_t>(id), tok.token_bytes(static_cast<int32_t>(id)), "--eos-id"};
  if (!roles.eos || roles.eos->id == id) return chosen;  // a tokenizer without an EOS takes the one named
  const std::string what = "--eos-id " + std::to_string(id) + " is " + describe_token(tok, id) +
                           ", not the end-of-text token of " + cfg.tokenizer + " (" + role_text(*roles.eos) + ", " +
                           roles.eos->source + ")";
  if (!cfg.allow_eos_mismatch) {
    OLMO2_THROW(UsageError, "tokenize: ", what, ": documents would end with another token than the one the model "
                "stops on; give --allow-eos-mismatch to append it anyway");
  }
  err << "warning: " << what << "; appending it (--allow-eos-mismatch)\n";
  return chosen;
}

/// Refuses (UsageError, nothing written) to add to a directory whose tokenize.json names
/// another EOS, unless --allow-eos-mismatch (a warning then).
void check_output_directory(const CliConfig& cfg, const TokenRole& eos, std::ostream& err) {
  const std::optional<TokenizeManifest> before = read_tokenize_manifest(cfg.output);
  if (!before || before->eos_id == eos.id) return;
  const std::string what = (std::filesystem::path(cfg.output) / kTokenizeManifest).string() +
                           " says its token files end every document with " + before->eos_token + " (id " +
                           std::to_string(before->eos_id) + "), not " + role_text(eos);
  if (!cfg.allow_eos_mismatch) {
    OLMO2_THROW(UsageError, "tokenize: ", what, ": tokenize into another directory, or give --allow-eos-mismatch");
  }
  err << "warning: " << what << "; tokenize.json now records " << role_text(eos) << " (--allow-eos-mismatch)\n";
}

}  // namespace

void run_tokenize(const CliConfig& cfg, std::istream& in, std::ostream& out, std::ostream& err) {
  const Tokenizer tok = Tokenizer::from_file(cfg.tokenizer);
  if (cfg.ids_mode) {
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (in.bad() || (&in == &std::cin && std::ferror(stdin))) {
      OLMO2_THROW(InputError, "cannot read the text on standard input");
    }
    out << nlohmann::json(tok.encode(text)).dump() << "\n";
    return;
  }
  const std::string tokenizer_config =
      (std::filesystem::path(cfg.tokenizer).parent_path() / "tokenizer_config.json").string();
  const TokenRole eos = choose_eos(cfg, tok, tokenizer_roles(tok, tokenizer_config), tokenizer_config, err);
  check_output_directory(cfg, eos, err);
  const std::string tokenizer_sha256 = sha256_file(cfg.tokenizer);
  TokenizeOptions opts;
  opts.output_dir = cfg.output;
  opts.threads = cfg.threads > 0 ? cfg.threads : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  opts.eos_id = eos.id;
  const auto start = std::chrono::steady_clock::now();
  auto seconds = [&] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  };
  const bool tty = ::isatty(STDERR_FILENO);
  auto progress = [&](const TokenizeStats& s) {
    if (!tty) return;
    err << "\r" << s.documents << " documents, " << s.tokens << " tokens, "
        << s.bytes / 1e6 / std::max(seconds(), 1e-9) << " MB/s" << std::flush;
  };
  const TokenizeStats s = tokenize_corpus(tok, cfg.inputs, opts, progress);
  write_tokenize_manifest(cfg.output, {eos.id, eos.text, cfg.tokenizer, tokenizer_sha256});
  const double t = seconds();
  if (tty) err << "\n";
  err << "tokenized " << s.documents << " documents, " << s.tokens << " tokens, " << s.bytes / 1e6
      << " MB in " << t << " s (" << s.bytes / 1e6 / std::max(t, 1e-9) << " MB/s) into "
      << s.outputs.size() << " files in " << cfg.output << ", each document ended by " << role_text(eos) << "\n";
}

}  // namespace olmo2
