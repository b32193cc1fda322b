#include "runtime/train/checkpoint.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "core/error.h"
#include "runtime/train/checkpoint_writer.h"

namespace olmo2 {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

constexpr char kStepPrefix[] = "step-";
constexpr size_t kStepDigits = 8;
constexpr char kStateJson[] = "training_state.json";
constexpr char kStateTensors[] = "training_state.safetensors";

std::string os_error(int err) { return std::strerror(err); }

// The step of a directory named "step-" + 8 digits, or -1 for any other name.
int64_t step_of(const std::string& name) {
  const size_t prefix = sizeof(kStepPrefix) - 1;
  if (name.size() != prefix + kStepDigits || name.compare(0, prefix, kStepPrefix) != 0) return -1;
  int64_t step = 0;
  for (size_t i = prefix; i < name.size(); ++i) {
    if (name[i] < '0' || name[i] > '9') return -1;
    step = step * 10 + (name[i] - '0');
  }
  return step;
}

}  // namespace

std::string checkpoint_dir_name(int64_t step) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%s%08lld", kStepPrefix, static_cast<long long>(step));
  return buf;
}

// The single-process save: the views' specs make the plan; the writer takes the views in
// its order (docs/architecture.md §7 "Checkpoint writing at scale").
std::string save_checkpoint(const std::string& save_dir, int64_t step, const CheckpointContents& c,
                            int keep, int64_t max_shard_bytes) {
  CheckpointPlan plan{c.config, {}, {}, c.state, c.tokenizer_file};
  std::map<std::string, TensorView> model, state;  // a model and a state tensor may share a name
  auto add = [&](const char* kind, const std::string& name, const TensorView& view,
                 std::vector<TensorSpec>& specs, std::map<std::string, TensorView>& views) {
    if (view.data() == nullptr) OLMO2_THROW(InputError, kind, " tensor ", name, " has no data");
    if (!view.is_contiguous()) {
      OLMO2_THROW(InputError, kind, " tensor ", name, " ", view.shape_str(),
                  " must be a contiguous tensor to be saved");
    }
    specs.push_back({name, view.dtype(), view.shape()});
    views.emplace(name, view);  // a name listed twice is refused by the writer
  };
  for (const auto& [name, view] : c.model_tensors) add("model", name, view, plan.model_tensors, model);
  for (const auto& [name, view] : c.state_tensors) add("state", name, view, plan.state_tensors, state);
  const size_t model_count = plan.model_tensors.size();
  CheckpointWriter writer(save_dir, step, std::move(plan), keep, max_shard_bytes);
  // The writer's order lists the model tensors first, then the state tensors.
  for (size_t i = 0; i < writer.order().size(); ++i) {
    const std::string& name = writer.order()[i];
    writer.write(name, (i < model_count ? model : state).at(name));
  }
  return writer.finish();
}

std::string latest_checkpoint(const std::string& save_dir) {
  const std::vector<std::string> all = complete_checkpoints(save_dir);
  return all.empty() ? std::string() : all.front();
}

std::vector<std::string> complete_checkpoints(const std::string& save_dir) {
  std::error_code ec;
  std::vector<std::pair<int64_t, std::string>> found;
  for (fs::directory_iterator it(save_dir, ec), end; !ec && it != end; it.increment(ec)) {
    const int64_t s = step_of(it->path().filename().string());
    std::error_code file_ec;
    if (s >= 0 && it->is_directory(file_ec) && fs::is_regular_file(it->path() / kStateJson, file_ec)) {
      found.emplace_back(s, it->path().string());
    }
  }
  std::sort(found.begin(), found.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  std::vector<std::string> out;
  for (auto& [step, path] : found) out.push_back(std::move(path));
  return out;
}

int64_t checkpoint_step_of(const std::string& dir) {
  fs::path p = fs::path(dir).lexically_normal();
  if (p.filename().empty()) p = p.parent_path();  // "…/step-00000120/"
  return step_of(p.filename().string());
}

Tensor TrainingState::load_f32(const std::string& name,
                               const std::vector<int64_t>& expected) const {
  const auto& all = tensors->tensors();
  const auto it = all.find(name);
  if (it == all.end()) OLMO2_THROW(InputError, tensors->path(), " has no tensor ", name);
  const TensorInfo& info = it->second;
  if (info.dtype_tag != "F32") {
    OLMO2_THROW(InputError, tensors->path(), ": tensor ", name, " is ", info.dtype_tag,
                ", expected F32");
  }
  if (info.shape != expected) {
    OLMO2_THROW(InputError, tensors->path(), ": tensor ", name, " has shape ",
                shape_to_string(info.shape), ", expected ", shape_to_string(expected));
  }
  Tensor out = Tensor::zeros(expected);
  if (out.numel() > 0) std::memcpy(out.f32(), tensors->data(info), info.end - info.begin);
  return out;
}

TrainingState load_training_state(const std::string& checkpoint_dir) {
  TrainingState ts;
  ts.dir = checkpoint_dir;
  const std::string json_path = (fs::path(checkpoint_dir) / kStateJson).string();
  std::ifstream in(json_path, std::ios::binary);
  if (!in) OLMO2_THROW(InputError, "cannot read ", json_path, ": ", os_error(errno));
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) OLMO2_THROW(InputError, "reading ", json_path, " failed: ", os_error(errno));
  json j;
  try {
    j = json::parse(text.str());
  } catch (const json::exception& e) {
    OLMO2_THROW(InputError, json_path, " is not valid JSON: ", e.what());
  }
  if (!j.is_object()) OLMO2_THROW(InputError, json_path, " is not a JSON object");
  const auto version = j.find("format_version");
  if (version == j.end() || !version->is_number_integer()) {
    OLMO2_THROW(InputError, json_path, " has no integer format_version");
  }
  if (version->get<int64_t>() != kTrainingStateFormatVersion) {
    OLMO2_THROW(InputError, json_path, " has format_version ", version->get<int64_t>(),
                "; this program reads version ", kTrainingStateFormatVersion);
  }
  const auto step = j.find("step");
  if (step == j.end() || !step->is_number_integer() || step->get<int64_t>() < 0) {
    OLMO2_THROW(InputError, json_path, " has no non-negative integer step");
  }
  const auto state = j.find("state");
  if (state == j.end()) OLMO2_THROW(InputError, json_path, " has no state");
  ts.step = step->get<int64_t>();
  ts.state = *state;
  ts.tensors =
      std::make_unique<SafetensorsFile>((fs::path(checkpoint_dir) / kStateTensors).string());
  return ts;
}

}  // namespace olmo2
