// olmo2_load_gen: a load generator for `olmo2 serve` (bench/README.md, "Serving load").
// C worker threads, each with its own HTTP connection, send N streaming completion
// requests of seeded random token-id prompts (optionally all starting with one shared
// prefix, a system prompt) and time every server-sent event; the summary
// gives throughput and TTFT / ITL / TPOT / end-to-end latency percentiles. A benchmark
// client, not a test: it is not registered with ctest.
#include <httplib.h>

#include <atomic>
#include <boost/program_options.hpp>
#include <cstdio>
#include <iostream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "bench/load_gen.h"

namespace {

namespace po = boost::program_options;
using nlohmann::json;
using olmo2::bench::LoadClock;
using olmo2::bench::RequestRecord;

struct Options {
  std::string host = "127.0.0.1", api_key, model;
  json extra_body = json::object();  ///< --extra-body: fields added to every request
  int port = 8000;
  long long requests = 64, concurrency = 8, prompt_tokens = 128, max_tokens = 64, shared_prefix_tokens = 0;
  long long warmup = 0, seed = 0;
  double timeout = 300;
  bool ignore_eos = true, json_out = false;
};

[[noreturn]] void usage_error(const std::string& msg, const po::options_description& desc) {
  std::cerr << "olmo2_load_gen: " << msg << "\n\n" << desc << "\n";
  std::exit(2);
}

/// Parses and checks the command line. A bad option prints the message and the usage to
/// stderr and exits with status 2; --help prints the usage and exits with 0.
Options parse_options(int argc, char** argv) {
  Options o;
  bool no_ignore_eos = false;
  std::string extra_body;
  po::options_description desc("olmo2_load_gen options");
  desc.add_options()("help,h", "this text")("host", po::value(&o.host)->default_value(o.host),
                                            "server address")(
      "port", po::value(&o.port)->default_value(o.port), "server port")(
      "api-key", po::value(&o.api_key), "sent as 'Authorization: Bearer KEY'")(
      "model", po::value(&o.model), "model name (default: the first of GET /v1/models)")(
      "requests", po::value(&o.requests)->default_value(o.requests), "timed requests, in all")(
      "concurrency", po::value(&o.concurrency)->default_value(o.concurrency),
      "requests in flight at once (one worker thread and connection each)")(
      "prompt-tokens", po::value(&o.prompt_tokens)->default_value(o.prompt_tokens),
      "prompt length; ids drawn uniformly from [1000, 50000)")(
      "shared-prefix-tokens", po::value(&o.shared_prefix_tokens)->default_value(o.shared_prefix_tokens),
      "ids every prompt starts with (a system prompt, drawn once), before its own --prompt-tokens")(
      "max-tokens", po::value(&o.max_tokens)->default_value(o.max_tokens),
      "tokens to generate per request")("seed", po::value(&o.seed)->default_value(o.seed),
                                        "seed of the prompts (and requests)")(
      "ignore-eos", po::bool_switch(), "generate exactly --max-tokens (the default)")(
      "no-ignore-eos", po::bool_switch(&no_ignore_eos), "let the model stop at EOS")(
      "timeout", po::value(&o.timeout)->default_value(o.timeout), "seconds per request")(
      "warmup", po::value(&o.warmup)->default_value(o.warmup), "requests sent first, not counted")(
      "extra-body", po::value(&extra_body),
      "a JSON object whose fields are added to every request, e.g. '{\"activations\": [...]}'")(
      "json", po::bool_switch(&o.json_out), "print the summary as one JSON object");
  po::variables_map vm;
  try {
    po::store(po::parse_command_line(argc, argv, desc), vm);
    po::notify(vm);
  } catch (const po::error& e) {
    usage_error(e.what(), desc);
  }
  if (vm.count("help")) {
    std::cout << desc << "\n";
    std::exit(0);
  }
  if (vm["ignore-eos"].as<bool>() && no_ignore_eos)
    usage_error("--ignore-eos and --no-ignore-eos contradict each other", desc);
  o.ignore_eos = !no_ignore_eos;
  auto at_least = [&](const char* name, long long v, long long lo) {
    if (v < lo)
      usage_error("--" + std::string(name) + " must be >= " + std::to_string(lo) + " (got " +
                      std::to_string(v) + ")",
                  desc);
  };
  at_least("requests", o.requests, 1);
  at_least("concurrency", o.concurrency, 1);
  at_least("prompt-tokens", o.prompt_tokens, 1);
  at_least("max-tokens", o.max_tokens, 1);
  at_least("shared-prefix-tokens", o.shared_prefix_tokens, 0);
  at_least("warmup", o.warmup, 0);
  if (o.port < 1 || o.port > 65535) usage_error("--port must be in 1..65535", desc);
  if (!(o.timeout > 0)) usage_error("--timeout must be > 0 seconds", desc);
  if (o.host.empty()) usage_error("--host is empty", desc);
  if (!extra_body.empty()) {
    o.extra_body = json::parse(extra_body, nullptr, false);
    if (o.extra_body.is_discarded() || !o.extra_body.is_object())
      usage_error("--extra-body must be a JSON object (got " + extra_body + ")", desc);
    for (const char* own : {"model", "prompt", "max_tokens", "temperature", "stream", "stream_options", "ignore_eos", "seed"})
      if (o.extra_body.contains(own))
        usage_error("--extra-body must not set \"" + std::string(own) + "\": the tool sets it", desc);
  }
  return o;
}

/// A client for the server with the per-request timeouts, keep-alive and TCP_NODELAY set.
std::unique_ptr<httplib::Client> make_client(const Options& o, double timeout) {
  auto cli = std::make_unique<httplib::Client>(o.host, o.port);
  auto us = std::chrono::microseconds(static_cast<long long>(timeout * 1e6));
  cli->set_connection_timeout(us);
  cli->set_read_timeout(us);
  cli->set_write_timeout(us);
  cli->set_keep_alive(true);
  // httplib writes the headers and the body separately: with Nagle's algorithm the body
  // waits for the peer's delayed ACK (~40 ms), which would land in every TTFT.
  cli->set_tcp_nodelay(true);
  if (!o.api_key.empty()) cli->set_bearer_token_auth(o.api_key);
  return cli;
}

/// `s` seconds as "1.5 s".
std::string seconds(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g s", s);
  return buf;
}

/// The "error.message" of a JSON error body, else the body's start (one line).
std::string error_message(const std::string& body) {
  auto j = json::parse(body, nullptr, false);
  if (!j.is_discarded() && j.is_object() && j.contains("error")) {
    const auto& e = j["error"];
    if (e.is_object() && e.contains("message") && e["message"].is_string())
      return e["message"].get<std::string>();
    if (e.is_string()) return e.get<std::string>();
  }
  if (body.empty()) return "(empty body)";
  std::string s = body.substr(0, 200);
  for (char& c : s)
    if (c == '\n' || c == '\r') c = ' ';
  return s;
}

/// Learns the model name (and its max_model_len, 0 when not given) from GET /v1/models.
/// Exits with status 1 and one line when the server cannot be reached, or when it gives no
/// model name and --model was not given.
std::pair<std::string, long long> probe_server(const Options& o) {
  auto cli = make_client(o, std::min(o.timeout, 10.0));
  auto res = cli->Get("/v1/models");
  const std::string where = o.host + ":" + std::to_string(o.port);
  if (!res) {
    std::cerr << "cannot connect to " << where;
    if (res.error() != httplib::Error::Connection) std::cerr << " (" << res.error() << ")";
    std::cerr << "\n";
    std::exit(1);
  }
  std::string name = o.model;
  long long max_len = 0;
  auto j = json::parse(res->body, nullptr, false);
  if (res->status == 200 && !j.is_discarded() && j.contains("data") && j["data"].is_array()) {
    for (const auto& m : j["data"]) {
      if (!m.is_object() || !m.contains("id") || !m["id"].is_string()) continue;
      if (!name.empty() && m["id"] != name) continue;
      if (name.empty()) name = m["id"].get<std::string>();
      if (m.contains("max_model_len") && m["max_model_len"].is_number_integer())
        max_len = m["max_model_len"].get<long long>();
      break;
    }
  }
  if (name.empty()) {
    std::cerr << "GET /v1/models on " << where << " gave no model (HTTP " << res->status << ": "
              << error_message(res->body) << "); pass --model\n";
    std::exit(1);
  }
  return {name, max_len};
}

/// Sends one streaming completion with `cli` and times its events.
RequestRecord run_request(httplib::Client& cli, const Options& o, const std::string& body) {
  RequestRecord r;
  httplib::Request req;
  req.method = "POST";
  req.path = "/v1/completions";
  req.body = body;
  req.set_header("Content-Type", "application/json");
  req.set_header("Accept", "text/event-stream");
  // Authorization: the client's bearer token (make_client).

  const auto t0 = LoadClock::now();
  auto since = [&] { return std::chrono::duration<double>(LoadClock::now() - t0).count(); };
  double chunk_time = 0, first_event = -1;
  bool done = false, got_usage = false, timed_out = false;
  std::string stream_error, error_body;
  // Text and usage of one event; json::exception when a field has the wrong type.
  auto read_event = [&](const json& j) {
    if (j.contains("choices") && j["choices"].is_array() && !j["choices"].empty()) {
      const auto& c = j["choices"][0];
      if (c.contains("text") && c["text"].is_string() &&
          !c["text"].get_ref<const std::string&>().empty())
        r.text_times.push_back(chunk_time);
      if (c.contains("finish_reason") && c["finish_reason"].is_string())
        r.finish_reason = c["finish_reason"].get<std::string>();
    }
    if (j.contains("usage") && j["usage"].is_object()) {
      r.prompt_tokens = j["usage"].value("prompt_tokens", 0LL);
      r.completion_tokens = j["usage"].value("completion_tokens", 0LL);
      got_usage = true;
    }
  };
  olmo2::bench::SseSplitter sse([&](const std::string& data) {
    if (data == "[DONE]") return done = true;
    auto j = json::parse(data, nullptr, false);
    if (j.is_discarded() || !j.is_object()) {
      stream_error = "event is not a JSON object: " + data.substr(0, 120);
      return false;
    }
    if (j.contains("error")) {
      stream_error = "error event: " + error_message(data);
      return false;
    }
    if (first_event < 0) first_event = chunk_time;
    try {
      read_event(j);
    } catch (const json::exception& e) {  // a field of the wrong type
      stream_error = std::string("malformed event: ") + e.what();
      return false;
    }
    return true;
  });
  req.response_handler = [&](const httplib::Response& res) {
    r.status = res.status;
    return true;
  };
  req.content_receiver = [&](const char* p, size_t n, uint64_t, uint64_t) {
    chunk_time = since();  // every event in this piece arrived now
    if (chunk_time > o.timeout) return !(timed_out = true);
    if (r.status != 200) {
      if (error_body.size() < 4096) error_body.append(p, std::min<size_t>(n, 4096));
      return true;
    }
    return sse.feed(p, n);
  };
  httplib::Response res;
  httplib::Error err = httplib::Error::Success;
  const bool sent = cli.send(req, res, err);
  r.e2e = since();
  if (!r.text_times.empty())
    r.ttft = r.text_times.front();
  else
    r.ttft = first_event;

  auto fail = [&](std::string kind, std::string msg) {
    r.failure_kind = std::move(kind);
    r.error = std::move(msg);
    return r;
  };
  if (timed_out || (err == httplib::Error::Read && r.e2e >= o.timeout))
    return fail("timeout", "no complete answer within --timeout " + seconds(o.timeout));
  if (!stream_error.empty()) return fail("stream", stream_error);
  if (r.status != 0 && r.status != 200)
    return fail("HTTP " + std::to_string(r.status),
                "HTTP " + std::to_string(r.status) + ": " + error_message(error_body));
  if (!sent)
    return fail("transport", "transport error (" + httplib::to_string(err) + ") after " +
                                 std::to_string(r.text_times.size()) + " text events");
  if (first_event < 0)
    return fail("stream", "HTTP 200 without server-sent events (is \"stream\" supported?)");
  if (!got_usage) return fail("stream", "stream ended without \"usage\"");
  if (!done || sse.pending()) return fail("stream", "stream ended without data: [DONE]");
  r.ok = true;
  return r;
}

/// Runs `bodies` with min(C, n) worker threads, one client each (created on first use and
/// kept in `clients` so the warm-up's connections carry over); returns the records, in
/// request order, and sets `wall` to the seconds from the first send to the last answer.
std::vector<RequestRecord> run_phase(const Options& o, const std::vector<std::string>& bodies,
                                     std::vector<std::unique_ptr<httplib::Client>>& clients,
                                     double& wall) {
  const size_t n = bodies.size();
  const size_t workers = std::min<size_t>(static_cast<size_t>(o.concurrency), n);
  while (clients.size() < workers) clients.push_back(make_client(o, o.timeout));
  std::vector<RequestRecord> records(n);
  std::atomic<size_t> next{0};
  const auto t0 = LoadClock::now();
  std::vector<std::thread> threads;
  for (size_t w = 0; w < workers; ++w)
    threads.emplace_back([&, w] {
      for (size_t i; (i = next.fetch_add(1)) < n;)
        records[i] = run_request(*clients[w], o, bodies[i]);
    });
  for (auto& t : threads) t.join();
  wall = std::chrono::duration<double>(LoadClock::now() - t0).count();
  return records;
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse_options(argc, argv);
  const auto [model, max_len] = probe_server(o);
  const long long need = o.shared_prefix_tokens + o.prompt_tokens + o.max_tokens;
  if (max_len > 0 && need > max_len) {
    std::cerr << "--shared-prefix-tokens + --prompt-tokens + --max-tokens = " << need
              << " exceeds the model's max_model_len " << max_len << "\n";
    return 1;
  }
  // Prompts (the shared prefix, then warm-up first, then the timed ones) from one seeded
  // stream: reproducible.
  std::mt19937_64 rng(static_cast<uint64_t>(o.seed));
  std::vector<int> shared(static_cast<size_t>(o.shared_prefix_tokens));
  for (int& id : shared) id = 1000 + static_cast<int>(rng() % 49000);
  auto body = [&](long long i) {
    std::vector<int> ids = shared;
    for (long long t = 0; t < o.prompt_tokens; ++t) ids.push_back(1000 + static_cast<int>(rng() % 49000));
    json j{{"model", model},    {"prompt", ids},  {"max_tokens", o.max_tokens},
           {"temperature", 0},  {"stream", true}, {"ignore_eos", o.ignore_eos},
           {"seed", o.seed + i}, {"stream_options", {{"include_usage", true}}}};
    j.update(o.extra_body);  // --extra-body's fields (none of the above: parse_options)
    return j.dump();
  };
  std::vector<std::string> warm, timed;
  for (long long i = 0; i < o.warmup; ++i) warm.push_back(body(i));
  for (long long i = 0; i < o.requests; ++i) timed.push_back(body(o.warmup + i));

  std::vector<std::unique_ptr<httplib::Client>> clients;
  double wall = 0;
  if (!warm.empty()) {
    std::cerr << "warm-up: " << warm.size() << " requests\n";
    auto w = run_phase(o, warm, clients, wall);
    size_t bad = 0;
    const RequestRecord* first_bad = nullptr;
    for (const auto& r : w)
      if (!r.ok && bad++ == 0) first_bad = &r;
    if (first_bad)
      std::cerr << "warm-up: " << bad << " failed (first: " << first_bad->error << ")\n";
  }
  std::cerr << "running " << timed.size() << " requests, concurrency " << o.concurrency
            << ", model " << model << "\n";
  auto records = run_phase(o, timed, clients, wall);
  const olmo2::bench::RunInfo info{o.host,        model,           o.port,       o.requests,
                                   o.concurrency, o.prompt_tokens, o.max_tokens, o.warmup,
                                   o.seed,        o.ignore_eos,    o.shared_prefix_tokens,
                                   o.extra_body.empty() ? "" : o.extra_body.dump()};
  olmo2::bench::print_summary(info, records, wall, o.json_out);
  for (const auto& r : records)
    if (!r.ok) return 1;
  return 0;
}
