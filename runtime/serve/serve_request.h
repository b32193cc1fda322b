// One completion request inside the server: its validated parameters, and the channel
// through which the engine thread hands its output to the HTTP thread.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "runtime/generation/token_selection.h"

namespace olmo2 {

/// A validated /v1/completions request (runtime/serve/completion_api.h parses it).
struct CompletionParams {
  std::vector<int32_t> prompt;     ///< token ids, non-empty
  int64_t max_tokens = 16;         ///< ≥ 1
  SamplingParams sampling;         ///< seed always set (drawn by the server when absent)
  int32_t logprobs = 0;            ///< top alternatives per token, 0: none
  bool want_logprobs = false;      ///< "logprobs" given (even 0: the chosen token's own)
  std::vector<std::string> stop;   ///< stop strings, each non-empty
  bool ignore_eos = false;         ///< keep generating past EOS (benchmarks)
  bool stream = false;
};

/// Output released to the client at once: text (whole UTF-8, nothing of a stop string)
/// and the tokens generated since the previous chunk.
struct CompletionChunk {
  std::string text;
  std::vector<SelectedToken> tokens;  ///< with log-probabilities when asked
  std::string finish_reason;          ///< set on the last chunk: "stop" or "length"
  std::string error;                  ///< set on the last chunk when the server gave up on it
};

/// A request's channel between the engine thread (producer) and its HTTP thread.
class ServeRequest {
 public:
  using Clock = std::chrono::steady_clock;
  ServeRequest(int64_t id, CompletionParams params) : id_(id), params_(std::move(params)), arrival_(Clock::now()) {}

  int64_t id() const { return id_; }
  const CompletionParams& params() const { return params_; }
  Clock::time_point arrival() const { return arrival_; }

  /// Engine side: hand out a chunk (the last one has finish_reason or error set).
  void push(CompletionChunk chunk);
  /// HTTP side: waits up to `timeout` for the next chunk. nullopt on timeout.
  std::optional<CompletionChunk> next(std::chrono::milliseconds timeout);

  /// Either side: the client is gone (or the server is stopping). The engine drops the
  /// sequence and frees its blocks at its next step boundary.
  void cancel() { cancelled_.store(true); }
  bool cancelled() const { return cancelled_.load(); }

 private:
  int64_t id_;
  CompletionParams params_;
  Clock::time_point arrival_;
  mutable std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<CompletionChunk> chunks_;
  std::atomic<bool> cancelled_{false};
};

}  // namespace olmo2
