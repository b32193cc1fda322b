// Turning the engine's chunks into an API response (docs/architecture.md §8, API): the
// bookkeeping both endpoints share — choices of every prompt, best_of, usage, errors,
// stream events. The shapes are CompletionAssembler's and ChatAssembler's.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/serve/api/api_request.h"
#include "runtime/serve/api/token_text.h"

namespace olmo2 {

/// Fed the chunks of one ServeRequest per prompt (request.prompts[i] ↔ prompt i), each
/// tagged with its choice; gives either one JSON body (non-streamed) or the server-sent
/// events to write as chunks arrive. Not thread-safe: one route thread feeds it.
///
/// Choices are indexed prompt × n + choice, so a batch's choices come in prompt order.
/// With best_of > n (never streamed) each prompt returns the n choices with the highest
/// cumulative_logprob (ties: the lower choice), best first — vLLM's rule; OpenAI's
/// documentation says "highest log probability per token". usage counts every prompt
/// once and every generated token of every choice, the best_of ones not returned
/// included (they were computed; OpenAI bills them too).
///
/// Streams: one event per chunk that has text, tokens or a finish_reason (and a choice's
/// first, which carries the echo or chat's role). With stream_options.include_usage every
/// event has "usage": null and a last event before [DONE] has empty choices and the
/// usage (OpenAI's shape); without it no event has usage.
///
/// Speculative decoding (docs/architecture.md §8): when the response's choices verified
/// drafted tokens (CompletionChunk::spec_proposed > 0), usage gets an extra field
/// "speculative": {"proposed_tokens": P, "accepted_tokens": A, "acceptance_rate": A / P},
/// summed over every choice of every prompt (best_of ones not returned included, as
/// completion_tokens). Without speculation usage is exactly OpenAI's three fields.
///
/// Activations (docs/architecture.md §13): a chunk's `activations` object, when not null,
/// becomes its choice's "activations" — in the non-streamed body's choice, and in the
/// stream event of that chunk (the choice's last, with finish_reason). Without it every
/// byte is as before.
///
/// A chunk with an error ends the response: streamed, one event {"error": {…, "code":
/// status}} (status = the chunk's error_status, else 500 for an "internal …" error and
/// 503 otherwise, as the routes' engine_error_status in api_error.h: the code the
/// non-streamed response gets), then [DONE].
class ResponseAssembler {
 public:
  /// `request` and `tokenizer` must outlive this. `id` from make_response_id, `created`
  /// in Unix seconds, `model` the served name.
  ResponseAssembler(const ApiRequest& request, const Tokenizer& tokenizer, std::string model, std::string id,
                    int64_t created);
  virtual ~ResponseAssembler() = default;

  /// Takes one chunk of prompt `prompt`. Streamed: returns the events to write now (each
  /// "data: …\n\n"; possibly none: empty chunks, and with echo and logprobs a choice's
  /// chunks wait until choice 0's first chunk brings the prompt's entries). Non-streamed:
  /// returns none. Chunks after done() are ignored. Throws Error for a prompt or choice
  /// out of range (an engine bug).
  std::vector<std::string> feed(size_t prompt, const CompletionChunk& chunk);
  /// Every choice of every prompt has finished, or an error ended the response.
  bool done() const;
  /// The HTTP status of the error that ended the response (0: none) and its message.
  int error_status() const { return error_status_; }
  const std::string& error_message() const { return error_message_; }
  const std::string& error_param() const { return error_param_; }  ///< the field the error names, or ""
  /// The non-streamed body (once done() without error): id, object, created, model,
  /// choices, usage. Throws Error before that.
  nlohmann::json body() const;
  /// The stream's last events, once done(): the usage event (include_usage, no error),
  /// then "data: [DONE]\n\n".
  std::vector<std::string> finish() const;
  /// {prompt_tokens, completion_tokens, total_tokens} so far, and "speculative" when any
  /// drafted token was verified (see the class comment).
  nlohmann::json usage() const;

 protected:
  struct Choice {
    std::string text;                   ///< non-streamed: the whole text
    std::vector<SelectedToken> tokens;  ///< non-streamed: every token
    int64_t generated = 0;
    int64_t spec_proposed = 0, spec_accepted = 0;  ///< drafted tokens verified / accepted
    double cumulative_logprob = 0;
    std::string finish_reason;
    bool finished = false;
    bool started = false;                  ///< streamed: its first event was sent
    int64_t sent_chars = 0;                ///< streamed: characters sent (echo included)
    std::optional<TextOffsets> offsets;    ///< streamed: text_offset of the next token
    std::vector<CompletionChunk> held;     ///< streamed: waiting for the prompt's entries
    nlohmann::json activations;            ///< non-streamed: the last chunk's, null when none
  };
  struct Prompt {
    size_t index = 0;
    std::vector<SelectedToken> entries;  ///< prompt logprobs (echo with logprobs)
    bool have_entries = false;
    std::vector<Choice> choices;
  };

  /// One element of a non-streamed body's choices.
  virtual nlohmann::json body_choice(const Prompt& prompt, const Choice& choice, int64_t index) const = 0;
  /// One element of a stream event's choices for `chunk` (choice.started tells whether it
  /// is the choice's first); may update the choice's stream state.
  virtual nlohmann::json stream_choice(const Prompt& prompt, Choice& choice, int64_t index,
                                       const CompletionChunk& chunk) const = 0;
  /// Whether a choice's first event has something to say even for an empty chunk (the
  /// echoed prompt, chat's role).
  virtual bool first_event_says_something() const = 0;
  virtual const char* body_object() const = 0;
  virtual const char* chunk_object() const = 0;

  const ApiRequest& request_;
  const Tokenizer& tokenizer_;

 private:
  nlohmann::json head(const char* object) const;
  void emit(Prompt& prompt, size_t c, const CompletionChunk& chunk, std::vector<std::string>& out);
  std::vector<size_t> returned_choices(const Prompt& prompt) const;

  std::string model_, id_;
  int64_t created_;
  std::vector<Prompt> prompts_;
  int error_status_ = 0;
  std::string error_message_, error_param_;
};

}  // namespace olmo2
