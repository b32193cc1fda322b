// A small random OLMo 2 model with the dolma2 tokenizer, written as a checkpoint that
// `olmo2 serve` loads, a running server with an HTTP client for it, a streamed request
// watched event by event, waits that fail the test, saying what they waited for, when
// their time runs out, and requests sharing a system prompt served with prefix caching
// on and off (docs/architecture.md §8, §10).
#pragma once

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <mutex>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <httplib.h>
#include <nlohmann/json.hpp>

#include "runtime/train/checkpoint.h"
#include "runtime/model/model.h"
#include "runtime/model/parameters.h"
#include "tests/launcher/background.h"
#include "tests/launcher/metrics_text.h"
#include "tests/test_util.h"

namespace olmo2::test {

/// Polls `done` every 20 ms for up to `seconds`: success as soon as it holds, else a
/// failure saying what was awaited and for how long (use with ASSERT_TRUE).
inline ::testing::AssertionResult wait_until(const std::function<bool()>& done, double seconds,
                                             const std::string& what) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  for (;;) {
    if (done()) return ::testing::AssertionSuccess();
    if (std::chrono::steady_clock::now() >= end) {
      return ::testing::AssertionFailure() << "gave up after " << seconds << " s waiting for " << what;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

/// 2 layers, hidden 64, 4 query / 2 kv heads, context `context` (default 128), the
/// dolma2 vocabulary; weights N(0, 0.2²) (wide logits: greedy choices are far from ties).
/// `olmo3`: an Olmo 3 model instead (docs/architecture.md §3): 4 layers, sliding, sliding,
/// sliding, full (three sliding KV groups and one full one, docs/architecture.md §8), a
/// window of 8 positions and YaRN (factor 4 over an original context of 32) on the full
/// layer.
struct ServeModel {
  TempDir dir;
  std::string path;
  explicit ServeModel(int64_t context = 128, bool olmo3 = false) {
    ModelConfig c;
    c.vocab_size = 100352, c.hidden_size = 64, c.intermediate_size = 128, c.num_hidden_layers = 2;
    c.num_attention_heads = 4, c.num_key_value_heads = 2, c.head_dim = 16, c.max_position_embeddings = context;
    c.rms_norm_eps = 1e-6, c.rope_theta = 10000, c.eos_token_ids = {100257};
    if (olmo3) {
      c.architecture = "Olmo3ForCausalLM", c.num_hidden_layers = 4;
      c.layer_types = {AttentionType::Sliding, AttentionType::Sliding, AttentionType::Sliding, AttentionType::Full};
      c.sliding_window = 8;
      c.rope_full.type = "yarn", c.rope_full.theta = 10000, c.rope_full.factor = 4;
      c.rope_full.original_max_position_embeddings = 32;
      c.rope_sliding.type = "default", c.rope_sliding.theta = 10000;
    }
    Olmo2Model m = Olmo2Model::random(c, 11, 0.2f);
    ModelWeights& w = m.mutable_weights();
    CheckpointContents contents;
    contents.config = c;
    contents.model_tensors = hf_named_tensors(w, c);
    contents.tokenizer_file = source_path("data/dolma2-tokenizer.json");
    path = save_checkpoint(dir.path(), 0, contents, 0);
  }
};

/// `olmo2 serve` (or `mpirun … olmo2 serve`) in the background on the port the kernel
/// picks (--port 0, read from its --port-file); waits until /health answers.
struct Server {
  TempDir logs;
  Background process;
  int port = -1;
  Server(const std::string& model, const std::string& extra, const std::string& launcher = "")
      : process((launcher.empty() ? std::string() : launcher + " ") + OLMO2_BINARY + " serve --model " + model +
                " --threads 1 --port 0 --port-file " + logs.file("port") + " " + extra + " > " +
                logs.file("out.txt") + " 2> " + logs.file("err.txt")) {
    port = port_from_file(logs.file("port"), process);
    if (port < 0) {
      ADD_FAILURE() << "the server wrote no port file: " << log();
      return;
    }
    httplib::Client c("127.0.0.1", port);
    for (int i = 0; i < 600; ++i) {
      if (auto r = c.Get("/health"); r && r->status == 200) return;
      if (process.wait_for(0.1) >= 0) break;
    }
    ADD_FAILURE() << "the server did not come up: " << log();
  }
  std::string log() const {
    std::ifstream in(logs.file("err.txt"));
    return std::string(std::istreambuf_iterator<char>(in), {});
  }
  /// The log once it holds `text`, or as it is after `seconds`: a server may log an event
  /// just after it has answered the request that caused it.
  std::string log_holding(const std::string& text, double seconds = 10) const {
    const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
    std::string l = log();
    while (l.find(text) == std::string::npos && std::chrono::steady_clock::now() < until) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      l = log();
    }
    return l;
  }
  httplib::Client client() const {
    httplib::Client c("127.0.0.1", port);
    c.set_read_timeout(300);
    return c;
  }
  /// POST /v1/completions; status and parsed body (null when not JSON).
  std::pair<int, nlohmann::json> complete(const std::string& body, const httplib::Headers& headers = {}) const {
    auto r = client().Post("/v1/completions", headers, body, "application/json");
    if (!r) return {0, nlohmann::json{{"client_error", httplib::to_string(r.error())}}};
    return {r->status, nlohmann::json::parse(r->body, nullptr, false)};
  }
  std::map<std::string, double> metrics() const {
    auto r = client().Get("/metrics");
    return r ? parse_metrics(r->body) : std::map<std::string, double>{};
  }
  /// True while the server accepts connections (GET /health answers).
  bool accepting() const {
    httplib::Client c("127.0.0.1", port);
    c.set_connection_timeout(1);
    c.set_read_timeout(5);
    return static_cast<bool>(c.Get("/health"));
  }
};

/// A streamed POST /v1/completions on its own thread, its server-sent events parsed as
/// they arrive. Ask for "logprobs": 0 to count the tokens each event carries.
class StreamedRequest {
 public:
  StreamedRequest(const Server& server, std::string body) : port_(server.port), body_(std::move(body)) {
    thread_ = std::thread([this] { run(); });
  }
  /// A test that stopped early hangs up (at the next event) instead of waiting for the end.
  ~StreamedRequest() {
    hang_up_ = true;
    if (thread_.joinable()) thread_.join();
  }
  StreamedRequest(const StreamedRequest&) = delete;
  StreamedRequest& operator=(const StreamedRequest&) = delete;

  /// Waits until at least `n` tokens have arrived (ASSERT_TRUE it).
  ::testing::AssertionResult wait_for_tokens(int64_t n, double seconds) {
    std::unique_lock<std::mutex> lock(mutex_);
    const bool got = cv_.wait_for(lock, std::chrono::duration<double>(seconds), [&] { return tokens_ >= n || ended_; });
    if (got && tokens_ >= n) return ::testing::AssertionSuccess();
    return ::testing::AssertionFailure() << (ended_ ? "the stream ended" : "gave up after " + std::to_string(seconds) + " s")
                                         << " with " << tokens_ << " tokens received, waiting for " << n
                                         << " (status " << status_ << ", " << error_text_ << ")";
  }
  /// Waits for the end of the stream (ASSERT_TRUE it).
  ::testing::AssertionResult finish(double seconds) {
    std::unique_lock<std::mutex> lock(mutex_);
    if (!cv_.wait_for(lock, std::chrono::duration<double>(seconds), [&] { return ended_; })) {
      return ::testing::AssertionFailure() << "the stream had not ended after " << seconds << " s (" << tokens_
                                           << " tokens received)";
    }
    return ::testing::AssertionSuccess();
  }
  int64_t tokens() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return tokens_;
  }
  // Read these after finish().
  int status() const { return status_; }
  bool done() const { return done_; }                          ///< "data: [DONE]" arrived
  const std::string& finish_reason() const { return finish_reason_; }
  const nlohmann::json& usage() const { return usage_; }
  const nlohmann::json& error() const { return error_; }       ///< an {"error": …} event, else null
  /// error()'s message, "" without an error event.
  std::string error_message() const {
    return error_.is_object() && error_["error"].is_object() ? error_["error"].value("message", "") : "";
  }
  /// usage()'s completion_tokens, -1 without a usage.
  int64_t completion_tokens() const { return usage_.is_object() ? usage_.value("completion_tokens", int64_t{-1}) : -1; }
  const std::string& text() const { return text_; }
  const std::string& transport_error() const { return error_text_; }

 private:
  void on_event(const std::string& data) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (data == "[DONE]") {
      done_ = true;
      return;
    }
    const nlohmann::json e = nlohmann::json::parse(data, nullptr, false);
    if (e.contains("error")) {
      error_ = e;
    } else if (e.contains("choices") && e["choices"].empty()) {  // include_usage's last chunk
      usage_ = e["usage"];
    } else if (e.contains("choices")) {
      const nlohmann::json& c = e["choices"][0];
      text_ += c["text"].get<std::string>();
      if (c.contains("logprobs") && c["logprobs"].is_object()) tokens_ += static_cast<int64_t>(c["logprobs"]["tokens"].size());
      if (!c["finish_reason"].is_null()) finish_reason_ = c["finish_reason"];
    }
    cv_.notify_all();
  }
  void run() {
    httplib::Client c("127.0.0.1", port_);
    c.set_read_timeout(300);
    httplib::Request req;
    req.method = "POST";
    req.path = "/v1/completions";
    req.body = body_;
    req.set_header("Content-Type", "application/json");
    std::string pending;
    req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
      pending.append(data, n);
      for (size_t end; (end = pending.find("\n\n")) != std::string::npos;) {
        const std::string event = pending.substr(0, end);
        pending.erase(0, end + 2);
        if (event.rfind("data: ", 0) == 0) on_event(event.substr(6));
      }
      return !hang_up_.load();
    };
    auto r = c.send(req);
    std::lock_guard<std::mutex> lock(mutex_);
    status_ = r ? r->status : 0;
    if (!r) error_text_ = "client error " + httplib::to_string(r.error());
    ended_ = true;
    cv_.notify_all();
  }

  int port_;
  std::string body_;
  mutable std::mutex mutex_;
  std::condition_variable cv_;
  std::atomic<bool> hang_up_{false};
  int64_t tokens_ = 0;
  bool ended_ = false, done_ = false;
  int status_ = 0;
  std::string finish_reason_, text_, error_text_;
  nlohmann::json usage_, error_;
  std::thread thread_;
};

/// Base64 (RFC 4648) of the little-endian bytes of `values`: an intervention's vector.
inline std::string f32_base64(const std::vector<float>& values) {
  static const char* alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string bytes(values.size() * 4, '\0');
  std::memcpy(bytes.data(), values.data(), bytes.size());
  std::string out;
  for (size_t i = 0; i < bytes.size(); i += 3) {
    const uint32_t b0 = static_cast<unsigned char>(bytes[i]);
    const uint32_t b1 = i + 1 < bytes.size() ? static_cast<unsigned char>(bytes[i + 1]) : 0;
    const uint32_t b2 = i + 2 < bytes.size() ? static_cast<unsigned char>(bytes[i + 2]) : 0;
    const uint32_t v = b0 << 16 | b1 << 8 | b2;
    out += alphabet[v >> 18 & 63];
    out += alphabet[v >> 12 & 63];
    out += i + 1 < bytes.size() ? alphabet[v >> 6 & 63] : '=';
    out += i + 2 < bytes.size() ? alphabet[v & 63] : '=';
  }
  return out;
}

/// The careless steering of the hostile-client probe: 64 floats of 3e38 added to every
/// layer's output (coefficient × vector is finite, the residual overflows f32), then to
/// the last layer's (of the 2-layer fixtures) only. The
/// answer is a 400 naming the intervention — streamed or not — never a 200 of garbage
/// tokens; the server says so in its log and serves the next request as before.
inline void expect_overflowing_steering_is_refused(const Server& server, int64_t hidden, const std::string& what) {
  const std::string steer = R"(,"interventions":[{"type":"add","name":"layers.*.layer_output","vector":")" +
                            f32_base64(std::vector<float>(static_cast<size_t>(hidden), 3e38f)) + R"("}])";
  const std::string body = R"({"prompt":"The capital of France is","max_tokens":4,"temperature":0,"logprobs":1)";
  const auto [status, j] = server.complete(body + steer + "}");
  EXPECT_EQ(status, 400) << what << ": " << j;
  EXPECT_EQ(j["error"]["param"], "interventions") << what << ": " << j;
  const std::string message = j["error"].value("message", "");
  EXPECT_THAT(message, ::testing::HasSubstr("non-finite (NaN or infinity) at position")) << what;
  EXPECT_THAT(message, ::testing::HasSubstr("interventions[0] add at layers 0,1 layer_output, coefficient 1 × a "
                                            "vector of norm 2.4e+39")) << what << ": " << message;
  EXPECT_THAT(server.log_holding("the model's activations became non-finite"),
              ::testing::HasSubstr("the model's activations became non-finite"))
      << what;
  {  // Streamed: the head is sent before the model runs, so the 400 is an error event, then [DONE].
    StreamedRequest streamed(server, body + R"(,"stream":true)" + steer + "}");
    ASSERT_TRUE(streamed.finish(60)) << what;
    EXPECT_THAT(streamed.error().dump(), ::testing::HasSubstr("\"code\":400")) << what << ": " << streamed.error();
    EXPECT_THAT(streamed.error().dump(), ::testing::HasSubstr("non-finite (NaN or infinity) at position"))
        << what << ": " << streamed.error();
    EXPECT_TRUE(streamed.done()) << what << ": the stream ends with [DONE]";
  }
  const auto [ok, answer] = server.complete(body + "}");
  EXPECT_EQ(ok, 200) << what << ": the next request is served: " << answer;
  // The last layer only: the residual stays finite (3e38 plus a little) but its squares
  // overflow, so the final norm would turn it into zeros and the logits into a uniform
  // distribution: refused as well, not a 200 of garbage.
  const std::string last = R"(,"interventions":[{"type":"add","name":"layers.1.layer_output","vector":")" +
                           f32_base64(std::vector<float>(static_cast<size_t>(hidden), 3e38f)) + R"("}])";
  const auto [last_status, last_j] = server.complete(body + last + "}");
  EXPECT_EQ(last_status, 400) << what << " (last layer only): " << last_j;
  EXPECT_THAT(last_j.dump(), ::testing::HasSubstr("non-finite (NaN or infinity) at position"))
      << what << " (last layer only)";
}

/// 12 requests sharing a 60-token system prompt (ids), each with 3 … 10 of its own;
/// greedy and seeded, 10 tokens with 2 alternatives each.
inline std::vector<std::string> shared_prefix_bodies() {
  std::mt19937 rng(17);
  nlohmann::json system = nlohmann::json::array();
  for (int t = 0; t < 60; ++t) system.push_back(1000 + static_cast<int>(rng() % 40000));
  std::vector<std::string> bodies;
  for (int i = 0; i < 12; ++i) {
    nlohmann::json ids = system;
    for (int t = 0, n = 3 + i % 8; t < n; ++t) ids.push_back(1000 + static_cast<int>(rng() % 40000));
    const std::string sampling = i % 3 == 2 ? R"("temperature":0.8,"seed":)" + std::to_string(i) : R"("temperature":0)";
    bodies.push_back(R"({"prompt":)" + ids.dump() + R"(,"max_tokens":10,"ignore_eos":true,"logprobs":2,)" + sampling +
                     "}");
  }
  return bodies;
}

/// Sends `bodies` one by one, then all at once, to `on` (prefix caching on) and `off`
/// (--no-prefix-caching, same layout): every answer's choices (text, tokens,
/// log-probabilities) and usage must be the same bits. With caching, every request but
/// the first finds the 60-token system prompt's 3 full blocks of 16 cached; without,
/// nothing is looked up.
inline void expect_prefix_caching_keeps_the_bits(const Server& on, const Server& off,
                                                 const std::vector<std::string>& bodies, const std::string& layout) {
  std::vector<nlohmann::json> answers[2];
  std::map<std::string, double> m[2];
  const Server* servers[2] = {&on, &off};
  for (int k = 0; k < 2; ++k) {
    for (const std::string& b : bodies) answers[k].push_back(servers[k]->complete(b).second);
    std::vector<nlohmann::json> together(bodies.size());
    std::vector<std::thread> threads;
    for (size_t i = 0; i < bodies.size(); ++i) {
      threads.emplace_back([&, i, k] { together[i] = servers[k]->complete(bodies[i]).second; });
    }
    for (auto& t : threads) t.join();
    answers[k].insert(answers[k].end(), together.begin(), together.end());
    m[k] = servers[k]->metrics();
  }
  for (size_t i = 0; i < answers[0].size(); ++i) {
    ASSERT_TRUE(answers[0][i].contains("choices")) << layout << ": " << answers[0][i] << on.log();
    EXPECT_EQ(answers[0][i]["choices"], answers[1][i]["choices"]) << layout << " request " << i;
    EXPECT_EQ(answers[0][i]["usage"], answers[1][i]["usage"]) << layout << " request " << i;
  }
  EXPECT_EQ(m[0].at("olmo2_serve_prefix_cache_queries_total"), m[0].at("olmo2_serve_prompt_tokens_total")) << layout;
  EXPECT_GE(m[0].at("olmo2_serve_prefix_cache_hits_total"), 48.0 * (2 * static_cast<double>(bodies.size()) - 1))
      << layout;
  EXPECT_EQ(m[1].at("olmo2_serve_prefix_cache_queries_total"), 0) << layout;
  EXPECT_EQ(m[1].at("olmo2_serve_prefix_cache_hits_total"), 0) << layout;
  EXPECT_EQ(m[0].at("olmo2_serve_kv_cache_usage_ratio"), 0) << layout << ": cached blocks nobody holds count as free";
}

}  // namespace olmo2::test
