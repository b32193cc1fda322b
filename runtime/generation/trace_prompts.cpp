#include "runtime/generation/trace_prompts.h"

#include <algorithm>
#include <memory>
#include <optional>

#include "runtime/trace/activation_recorder.h"

namespace olmo2 {

void trace_prompts(const Olmo2Model& model, const std::vector<std::vector<int32_t>>& prompts,
                   const trace::TraceSpec& spec, const ParallelContext& ctx, const TraceJob& job,
                   const TraceResultSink& sink) {
  const bool root = !job.world || job.world->rank() == 0;
  const size_t replicas = static_cast<size_t>(job.replicas), replica = static_cast<size_t>(job.replica);
  const int tp_rank = ctx.tensor_parallel() ? ctx.tp->rank() : 0;
  ForwardOptions opts;
  opts.last_logits_only = true;  // the logits only where a read or intervention touches them
  opts.vocab_parallel_logits = true;
  opts.all_logits = {spec.touches(TapSite::LmHeadOutput, -1)};
  for (size_t round = 0; round < prompts.size(); round += replicas) {
    // This replica's prompt of the round (tag: its replica, which the pieces carry).
    std::shared_ptr<const trace::TraceSpec> this_spec;  // declared first: outlives the recorder
    std::optional<trace::ActivationRecorder> recorder;
    const size_t mine = round + replica;
    if (mine < prompts.size()) {
      this_spec = spec.for_prompt(static_cast<int64_t>(prompts[mine].size()));
      recorder.emplace(model.config(), model.shard(), tp_rank,
                       std::vector<trace::TracedSequence>{{this_spec.get(), static_cast<int32_t>(replica), 0}});
      opts.tap = &*recorder;
      model.forward(std::vector<std::vector<int32_t>>{prompts[mine]}, opts, ctx);
      opts.tap = nullptr;
    }
    const size_t end = std::min(prompts.size(), round + replicas);
    if (spec.reads.empty()) {  // interventions only: nothing to read, nothing crosses ranks
      for (size_t i = round; root && i < end; ++i) sink(i, nlohmann::json::object());
      continue;
    }
    const std::vector<float> none;
    const std::vector<float>& local = recorder ? recorder->pieces() : none;
    const std::vector<float> all = job.world ? trace::gather_pieces(*job.world, local) : local;
    if (!root) continue;
    for (size_t i = round; i < end; ++i) {
      trace::ActivationStore store(spec.for_prompt(static_cast<int64_t>(prompts[i].size())), model.config());
      store.add(all, static_cast<int32_t>(i - round));
      sink(i, store.result());
    }
  }
}

}  // namespace olmo2
