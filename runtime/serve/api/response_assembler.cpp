#include "runtime/serve/api/response_assembler.h"

#include <algorithm>
#include <numeric>

#include "runtime/serve/api/api_error.h"

namespace olmo2 {

using nlohmann::json;

ResponseAssembler::ResponseAssembler(const ApiRequest& request, const Tokenizer& tokenizer, std::string model,
                                     std::string id, int64_t created)
    : request_(request), tokenizer_(tokenizer), model_(std::move(model)), id_(std::move(id)), created_(created),
      prompts_(request.prompts.size()) {
  for (size_t i = 0; i < prompts_.size(); ++i) {
    prompts_[i].index = i;
    prompts_[i].choices.resize(static_cast<size_t>(std::max(request.prompts[i].choices, 1)));
  }
}

bool ResponseAssembler::done() const {
  if (error_status_ != 0) return true;
  for (const Prompt& p : prompts_) {
    for (const Choice& c : p.choices) {
      if (!c.finished) return false;
    }
  }
  return true;
}

json ResponseAssembler::head(const char* object) const {
  return {{"id", id_}, {"object", object}, {"created", created_}, {"model", model_}};
}

json ResponseAssembler::usage() const {
  int64_t prompt_tokens = 0, completion_tokens = 0, proposed = 0, accepted = 0;
  for (size_t i = 0; i < prompts_.size(); ++i) {
    prompt_tokens += static_cast<int64_t>(request_.prompts[i].prompt.size());
    for (const Choice& c : prompts_[i].choices) {
      completion_tokens += c.generated;
      proposed += c.spec_proposed;
      accepted += c.spec_accepted;
    }
  }
  json out = {{"prompt_tokens", prompt_tokens}, {"completion_tokens", completion_tokens},
              {"total_tokens", prompt_tokens + completion_tokens}};
  // Summed over the response's sequences; absent without speculation, so a plain server's
  // usage is byte for byte OpenAI's (docs/architecture.md §8).
  if (proposed > 0) {
    out["speculative"] = {{"proposed_tokens", proposed}, {"accepted_tokens", accepted},
                          {"acceptance_rate", static_cast<double>(accepted) / static_cast<double>(proposed)}};
  }
  return out;
}

std::vector<std::string> ResponseAssembler::feed(size_t p, const CompletionChunk& chunk) {
  std::vector<std::string> out;
  if (done()) return out;
  if (!chunk.error.empty()) {
    error_status_ = engine_error_status(chunk);
    error_message_ = chunk.error;
    error_param_ = chunk.error_param;
    if (request_.stream) out.push_back(sse_event(dump_json(error_json(error_status_, error_message_, error_param_))));
    return out;
  }
  if (p >= prompts_.size() || chunk.choice < 0 || static_cast<size_t>(chunk.choice) >= prompts_[p].choices.size()) {
    OLMO2_THROW(Error, "a chunk of prompt ", p, " choice ", chunk.choice, " in a response of ", prompts_.size(),
                " prompts of ", p < prompts_.size() ? prompts_[p].choices.size() : 0, " choices");
  }
  Prompt& prompt = prompts_[p];
  Choice& choice = prompt.choices[static_cast<size_t>(chunk.choice)];
  choice.generated += static_cast<int64_t>(chunk.tokens.size());
  if (chunk.spec_proposed > 0) {  // the choice's totals, on its last chunk
    choice.spec_proposed = chunk.spec_proposed;
    choice.spec_accepted = chunk.spec_accepted;
  }
  choice.cumulative_logprob = chunk.cumulative_logprob;
  if (!chunk.finish_reason.empty()) choice.finish_reason = chunk.finish_reason, choice.finished = true;
  if (!chunk.activations.is_null()) choice.activations = chunk.activations;
  const bool had_entries = prompt.have_entries;
  if (!chunk.prompt_tokens.empty()) prompt.entries = chunk.prompt_tokens;
  if (!chunk.prompt_tokens.empty() || chunk.choice == 0) prompt.have_entries = true;
  if (!request_.stream) {
    choice.text += chunk.text;
    choice.tokens.insert(choice.tokens.end(), chunk.tokens.begin(), chunk.tokens.end());
    return out;
  }
  const bool needs_entries = request_.echo && request_.want_logprobs && !choice.started;
  if (needs_entries && !prompt.have_entries) {
    choice.held.push_back(chunk);
    return out;
  }
  emit(prompt, static_cast<size_t>(chunk.choice), chunk, out);
  if (!had_entries && prompt.have_entries) {  // release what waited for the prompt's entries
    for (size_t c = 0; c < prompt.choices.size(); ++c) {
      std::vector<CompletionChunk> held = std::move(prompt.choices[c].held);
      prompt.choices[c].held.clear();
      for (const CompletionChunk& h : held) emit(prompt, c, h, out);
    }
  }
  return out;
}

void ResponseAssembler::emit(Prompt& prompt, size_t c, const CompletionChunk& chunk, std::vector<std::string>& out) {
  Choice& choice = prompt.choices[c];
  const bool empty = chunk.text.empty() && chunk.tokens.empty() && chunk.finish_reason.empty();
  if (empty && (choice.started || !first_event_says_something())) return;
  const int64_t index = static_cast<int64_t>(prompt.index) * request_.n + static_cast<int64_t>(c);
  json event = head(chunk_object());
  json element = stream_choice(prompt, choice, index, chunk);
  if (!chunk.activations.is_null()) element["activations"] = chunk.activations;
  event["choices"] = json::array({std::move(element)});
  choice.started = true;
  if (request_.include_usage) event["usage"] = nullptr;
  out.push_back(sse_event(dump_json(event)));
}

std::vector<size_t> ResponseAssembler::returned_choices(const Prompt& prompt) const {
  std::vector<size_t> order(prompt.choices.size());
  std::iota(order.begin(), order.end(), 0);
  if (request_.best_of > request_.n) {
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
      return prompt.choices[a].cumulative_logprob > prompt.choices[b].cumulative_logprob;
    });
  }
  order.resize(std::min(order.size(), static_cast<size_t>(request_.n)));
  return order;
}

json ResponseAssembler::body() const {
  if (!done() || error_status_ != 0) {
    OLMO2_THROW(Error, "the response body is not ready: ", error_status_ ? "an error ended it" : "choices still run");
  }
  json out = head(body_object());
  out["choices"] = json::array();
  for (const Prompt& prompt : prompts_) {
    const std::vector<size_t> order = returned_choices(prompt);
    for (size_t rank = 0; rank < order.size(); ++rank) {
      const int64_t index = static_cast<int64_t>(prompt.index) * request_.n + static_cast<int64_t>(rank);
      const Choice& choice = prompt.choices[order[rank]];
      json element = body_choice(prompt, choice, index);
      if (!choice.activations.is_null()) element["activations"] = choice.activations;
      out["choices"].push_back(std::move(element));
    }
  }
  out["usage"] = usage();
  return out;
}

std::vector<std::string> ResponseAssembler::finish() const {
  std::vector<std::string> out;
  if (request_.include_usage && error_status_ == 0) {
    json last = head(chunk_object());
    last["choices"] = json::array();
    last["usage"] = usage();
    out.push_back(sse_event(dump_json(last)));
  }
  out.push_back(sse_event("[DONE]"));
  return out;
}

}  // namespace olmo2
