#include "runtime/train/checkpoint_verify.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include <nlohmann/json.hpp>

#include <iostream>

#include "core/error.h"
#include "parallel/agreement.h"
#include "runtime/io/safetensors.h"
#include "runtime/model/config.h"
#include "runtime/train/checkpoint.h"
#include "runtime/train/data_loader.h"
#include "runtime/train/sharded_state.h"

namespace olmo2 {

namespace {

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

// The full (unsharded) shape of parameter `name` of `c`, as Olmo2Model::load expects it.
std::vector<int64_t> full_shape(const ModelConfig& c, const std::string& name) {
  const int64_t h = c.hidden_size, q = c.num_attention_heads * c.head_dim, kv = c.num_key_value_heads * c.head_dim;
  const int64_t inter = c.intermediate_size;
  if (name == "model.embed_tokens.weight" || name == "lm_head.weight") return {c.vocab_size, h};
  if (ends_with(name, "q_proj.weight")) return {q, h};
  if (ends_with(name, "k_proj.weight") || ends_with(name, "v_proj.weight")) return {kv, h};
  if (ends_with(name, "o_proj.weight")) return {h, q};
  if (ends_with(name, "q_norm.weight")) return {q};
  if (ends_with(name, "k_norm.weight")) return {kv};
  if (ends_with(name, "gate_proj.weight") || ends_with(name, "up_proj.weight")) return {inter, h};
  if (ends_with(name, "down_proj.weight")) return {h, inter};
  return {h};  // the norm gains
}

// Step 2 and 3: the state against itself.
void check_state(const std::string& dir, const TrainingState& st) {
  const int64_t dir_step = checkpoint_step_of(dir);
  if (dir_step >= 0 && dir_step != st.step) {
    OLMO2_THROW(InputError, "training_state.json says step ", st.step, " but the directory is of step ", dir_step);
  }
  try {
    const int64_t inner = st.state.at("step").get<int64_t>();
    if (inner != st.step) {
      OLMO2_THROW(InputError, "training_state.json: state.step ", inner, " differs from its step ", st.step);
    }
    // Counters: each counts steps (or tokens) of this run, so none is negative or beyond
    // the step; AdamW's step count (its bias correction) is at most the updates made.
    const auto counter = [&](const char* key, int64_t high) {
      if (!st.state.contains(key)) return int64_t{0};
      const int64_t v = st.state.at(key).get<int64_t>();
      if (v < 0 || v > high) {
        OLMO2_THROW(InputError, "training_state.json: ", key, " is ", v, "; at step ", st.step, " it lies in [0, ",
                    high, "]");
      }
      return v;
    };
    const int64_t skipped = counter("skipped_steps", st.step);
    counter("nonfinite_steps", st.step + 1);  // + the step --on-nonfinite stop refused to take
    counter("tokens", std::numeric_limits<int64_t>::max());
    counter("optimizer_steps", st.step - skipped);
    const DataLoaderState d = st.state.at("data_loader").get<DataLoaderState>();
    if (d.global_batch < 1 || d.num_windows < d.global_batch) {
      OLMO2_THROW(InputError, "training_state.json: data_loader has global_batch ", d.global_batch, " and num_windows ",
                  d.num_windows, " (an epoch needs at least one batch)");
    }
    const int64_t per_epoch = d.num_windows / d.global_batch;
    if (d.epoch < 0 || d.step_in_epoch < 0 || d.step_in_epoch >= per_epoch) {
      OLMO2_THROW(InputError, "training_state.json: data_loader position (epoch ", d.epoch, ", step_in_epoch ",
                  d.step_in_epoch, ") is out of range: step_in_epoch must lie in [0, ", per_epoch, ")");
    }
    if (d.epoch > (st.step / per_epoch) || d.epoch * per_epoch + d.step_in_epoch != st.step) {
      OLMO2_THROW(InputError, "training_state.json: data_loader position (epoch ", d.epoch, ", step_in_epoch ",
                  d.step_in_epoch, ", ", per_epoch, " steps per epoch) is not step ", st.step,
                  " (expected epoch ", st.step / per_epoch, ", step_in_epoch ", st.step % per_epoch, ")");
    }
  } catch (const nlohmann::json::exception& e) {
    OLMO2_THROW(InputError, "training_state.json: ", e.what());
  }
}

// Throws naming `what` and the first non-finite one of the `n` f32 values at `bytes` (any
// alignment: copied through a small buffer, so a mapped tensor is never copied whole);
// with `nonnegative` (AdamW's exp_avg_sq, a running mean of squares), also the first
// value below zero (bits above 0x80000000: -0.0 passes).
void check_finite(const uint8_t* bytes, int64_t n, const std::vector<int64_t>& shape, const std::string& what,
                  bool nonnegative = false) {
  const uint32_t negative_limit = nonnegative ? 0x80000000u : 0xffffffffu;
  constexpr int64_t kChunk = 16384;
  constexpr uint32_t kExponent = 0x7f800000u;  // all ones: infinity or NaN
  uint32_t buf[kChunk];
  for (int64_t at = 0; at < n; at += kChunk) {
    const int64_t m = std::min(kChunk, n - at);
    std::memcpy(buf, bytes + at * 4, static_cast<size_t>(m) * 4);
    uint32_t bad = 0;  // an integer OR over the chunk: vectorised, no branch per value
    for (int64_t i = 0; i < m; ++i) {
      bad |= static_cast<uint32_t>((buf[i] & kExponent) == kExponent) | static_cast<uint32_t>(buf[i] > negative_limit);
    }
    if (!bad) continue;
    for (int64_t i = 0; i < m; ++i) {
      const bool non_finite = (buf[i] & kExponent) == kExponent;
      if (!non_finite && buf[i] <= negative_limit) continue;
      float v;
      std::memcpy(&v, &buf[i], 4);
      OLMO2_THROW(InputError, what, non_finite ? " has a non-finite value (" : " has a negative value (", v,
                  ") at flat index ", at + i, " of shape ", shape_to_string(shape),
                  non_finite ? "" : " (a running mean of squares is never negative)");
    }
  }
}

}  // namespace

void verify_checkpoint(const std::string& dir, const VerifyShare& share, std::ostream* warn) {
  try {
    const FileListing listing = read_file_listing(dir);
    if (!listing.is_checkpoint) OLMO2_THROW(InputError, "training_state.json is missing");
    if (!listing.has_checksums && warn) {
      *warn << "warning: checkpoint " << dir
            << " lists no checksums (written before they existed): its files are not verified\n";
    }
    verify_listed_files(dir, listing, share);
    const TrainingState st = load_training_state(dir);
    check_state(dir, st);
    const ModelConfig config = ModelConfig::load(dir);
    const Checkpoint model = Checkpoint::open(dir);
    const auto& state_tensors = st.tensors->tensors();
    const std::vector<std::string> names = parameter_names(config);
    for (const std::string& name : names) {
      const std::vector<int64_t> shape = full_shape(config, name);
      const TensorInfo& info = model.info(name);
      if (!info.supported || info.dtype != config.dtype || info.shape != shape) {
        OLMO2_THROW(InputError, "the model's tensor ", name, " is ", info.dtype_tag, " ", shape_to_string(info.shape),
                    "; config.json says ", dtype_name(config.dtype), " ", shape_to_string(shape));
      }
      for (const char* kind : {"exp_avg.", "exp_avg_sq."}) {
        const auto it = state_tensors.find(kind + name);
        if (it == state_tensors.end()) OLMO2_THROW(InputError, "training_state.safetensors has no tensor ", kind, name);
        if (it->second.dtype_tag != "F32" || it->second.shape != shape) {
          OLMO2_THROW(InputError, "training_state.safetensors: ", kind, name, " is ", it->second.dtype_tag, " ",
                      shape_to_string(it->second.shape), ", expected F32 ", shape_to_string(shape));
        }
      }
    }
    // Parameters, then exp_avg, then exp_avg_sq: dealt over the ranks one tensor at a time.
    for (size_t i = 0; i < 3 * names.size(); ++i) {
      if (!share.mine(i)) continue;
      const std::string& name = names[i % names.size()];
      const std::vector<int64_t> shape = full_shape(config, name);
      if (i < names.size()) {  // any dtype the loader reads: widened to f32 one tensor at a time
        const Tensor t = model.load_f32(name, shape);
        check_finite(reinterpret_cast<const uint8_t*>(t.f32()), t.numel(), shape, "the model's tensor " + name);
        model.release(name);
      } else {  // F32 (checked above), scanned in the mapping
        const std::string moment = (i < 2 * names.size() ? "exp_avg." : "exp_avg_sq.") + name;
        const TensorInfo& info = state_tensors.at(moment);
        check_finite(st.tensors->data(info), static_cast<int64_t>((info.end - info.begin) / 4), shape,
                     "training_state.safetensors: tensor " + moment, i >= 2 * names.size());
        st.tensors->release(info);
      }
    }
  } catch (const InputError& e) {
    OLMO2_THROW(InputError, "checkpoint ", dir, ": ", e.what());
  }
}

std::string first_verified_checkpoint(const std::vector<std::string>& candidates, bool fallback,
                                      parallel::Communicator* world) {
  const bool root = !world || world->rank() == 0;
  const VerifyShare share{world ? world->rank() : 0, world ? world->size() : 1};
  // The error every rank throws together (agree has already agreed on the message).
  auto fail = [&](const std::string& message) {
    if (world) OLMO2_THROW(parallel::AgreedError, message);
    OLMO2_THROW(InputError, message);
  };
  std::string last_reason;
  for (size_t i = 0; i < candidates.size() && (fallback || i == 0); ++i) {
    try {
      parallel::agree(world, [&] { verify_checkpoint(candidates[i], share, root ? &std::cerr : nullptr); });
    } catch (const InputError& e) {
      if (!fallback) {
        fail(std::string("--resume: ") + e.what() +
             " (--resume-fallback resumes from the newest older checkpoint that passes instead)");
      }
      last_reason = e.what();
      if (root) std::cerr << "--resume-fallback: skipping " << candidates[i] << ": " << e.what() << "\n";
      continue;
    }
    if (i > 0 && root) {
      std::cerr << "--resume-fallback: resuming from " << candidates[i] << " (skipped " << i
                << " newer checkpoint" << (i > 1 ? "s" : "") << " that failed verification)\n";
    }
    return candidates[i];
  }
  if (!candidates.empty()) {
    fail("--resume-fallback: none of the " + std::to_string(candidates.size()) +
         " checkpoints passes verification; the oldest failed with: " + last_reason);
  }
  return "";
}

}  // namespace olmo2
