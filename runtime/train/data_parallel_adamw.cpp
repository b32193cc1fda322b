#include "runtime/train/data_parallel_adamw.h"

#include <algorithm>

#include "ops/tensor_ops.h"
#include "parallel/tensor_collectives.h"

namespace olmo2 {
namespace {
/// Elements [begin, begin + count) of a tensor, flattened.
TensorView flat(const TensorView& t, int64_t begin, int64_t count) {
  return t.reshape({t.numel()}).rows(begin, begin + count);
}
}  // namespace

DataParallelAdamW::DataParallelAdamW(std::vector<Parameter>& params, AdamWOptions options,
                                     parallel::Communicator* dp, bool zero1)
    : params_(params), dp_(dp), zero1_(zero1 && dp && dp->size() > 1) {
  device_ = params_.empty() ? Device::CPU : params_.front().value->device();
  if (!zero1_) {
    adam_ = std::make_unique<AdamW>(params_, options);
    return;
  }
  for (const Parameter& p : params_) total_ += p.numel();
  const int64_t n = dp_->size();
  chunk_ = (total_ + n - 1) / n;
  const int64_t begin = dp_->rank() * chunk_, end = std::min(total_, begin + chunk_);
  int64_t at = 0;
  for (size_t i = 0; i < params_.size(); ++i) {
    const int64_t pb = at, pe = at + params_[i].numel();
    at = pe;
    const int64_t b = std::max(pb, begin), e = std::min(pe, end);
    if (b < e) segments_.push_back({i, b - pb, e - b});
  }
  seg_values_.reserve(segments_.size()), seg_grads_.reserve(segments_.size());
  for (const Segment& s : segments_) {
    seg_values_.push_back(Tensor::zeros({s.count}, DType::F32, device_));
    seg_grads_.push_back(Tensor::zeros({s.count}, DType::F32, device_));
  }
  for (size_t k = 0; k < segments_.size(); ++k) {
    const Parameter& p = params_[segments_[k].param];
    Parameter q;
    q.name = p.name + "@" + std::to_string(segments_[k].begin);
    q.full_shape = {segments_[k].count};
    q.value = &seg_values_[k], q.grad = &seg_grads_[k];
    q.weight_decay = p.weight_decay;
    seg_params_.push_back(std::move(q));
  }
  adam_ = std::make_unique<AdamW>(seg_params_, options);
}

DataParallelAdamW::~DataParallelAdamW() = default;

int64_t DataParallelAdamW::steps() const { return adam_->steps(); }

void DataParallelAdamW::step(double lr) {
  if (!zero1_) {
    adam_->step(params_, lr);
    return;
  }
  for (size_t k = 0; k < segments_.size(); ++k) {
    const Segment& s = segments_[k];
    const Parameter& p = params_[s.param];
    ops::copy(flat(p.value->view(), s.begin, s.count), seg_values_[k].view());
    ops::copy(flat(p.grad->view(), s.begin, s.count), seg_grads_[k].view());
  }
  adam_->step(seg_params_, lr);
  // All-gather the updated chunks: rank r's chunk is flat elements [r·chunk, (r+1)·chunk).
  const Tensor all = gather_chunks([&](size_t k) { return seg_values_[k].view(); });
  int64_t at = 0;
  for (Parameter& p : params_) {
    ops::copy(all.view().rows(at, at + p.numel()), p.value->view().reshape({p.numel()}));
    at += p.numel();
  }
}

Tensor DataParallelAdamW::gather_chunks(const std::function<TensorView(size_t)>& segment) const {
  const Tensor mine = Tensor::zeros({chunk_}, DType::F32, device_);
  int64_t at = 0;
  for (size_t k = 0; k < segments_.size(); ++k) {
    ops::copy(segment(k), mine.view().rows(at, at + segments_[k].count));
    at += segments_[k].count;
  }
  Tensor all = Tensor::zeros({chunk_ * dp_->size()}, DType::F32, device_);
  parallel::all_gather(*dp_, mine.view(), all.view());
  return all;
}

std::map<std::string, Tensor> DataParallelAdamW::full_state() const {
  std::map<std::string, Tensor> out;
  const std::map<std::string, TensorView> views = adam_->state_tensors();
  if (!zero1_) {
    for (const auto& [name, v] : views) {
      Tensor t = Tensor::zeros(v.shape(), v.dtype(), v.device());
      ops::copy(v, t.view());
      out.emplace(name, std::move(t));
    }
    return out;
  }
  for (const char* kind : {"exp_avg.", "exp_avg_sq."}) {
    const Tensor all = gather_chunks([&](size_t k) { return views.at(kind + seg_params_[k].name); });
    int64_t at = 0;
    for (const Parameter& p : params_) {
      Tensor t = Tensor::zeros(p.value->shape(), DType::F32, device_);
      ops::copy(all.view().rows(at, at + p.numel()), t.view().reshape({p.numel()}));
      at += p.numel();
      out.emplace(kind + p.name, std::move(t));
    }
  }
  return out;
}

TensorView DataParallelAdamW::moment(const std::string& kind, size_t index, Tensor& keep) const {
  constexpr int kMomentTag = 26;
  OLMO2_CHECK(kind == "exp_avg." || kind == "exp_avg_sq.", "unknown moment kind \"", kind, "\"");
  OLMO2_CHECK(index < params_.size(), "moment of parameter ", index, " of ", params_.size());
  const Parameter& p = params_[index];
  const std::map<std::string, TensorView> views = adam_->state_tensors();
  if (!zero1_) return views.at(kind + p.name);
  // The parameter's flat elements [first, first + numel) lie in the chunks of ranks
  // first / chunk … (first + numel − 1) / chunk; each sends its piece to DP rank 0.
  int64_t first = 0;
  for (size_t i = 0; i < index; ++i) first += params_[i].numel();
  TensorView piece;  // this rank's piece of it (at most one: chunks are contiguous)
  int64_t piece_begin = -1;
  for (size_t k = 0; k < segments_.size(); ++k) {
    if (segments_[k].param == index) piece = views.at(kind + seg_params_[k].name), piece_begin = segments_[k].begin;
  }
  if (dp_->rank() != 0) {
    if (piece_begin >= 0) parallel::send(*dp_, piece, 0, kMomentTag);
    return {};
  }
  keep = Tensor::zeros(p.value->shape(), DType::F32, device_);
  if (p.numel() == 0) return keep.view();
  if (piece_begin >= 0) ops::copy(piece, flat(keep.view(), piece_begin, piece.numel()));
  const int64_t last = first + p.numel() - 1;
  for (int64_t r = std::max<int64_t>(1, first / chunk_); r <= last / chunk_ && r < dp_->size(); ++r) {
    const int64_t b = std::max(first, r * chunk_), e = std::min(first + p.numel(), (r + 1) * chunk_);
    parallel::recv(*dp_, flat(keep.view(), b - first, e - b), static_cast<int>(r), kMomentTag);
  }
  return keep.view();
}

void DataParallelAdamW::restore(const std::function<Tensor(const std::string&, const Parameter&)>& load,
                                int64_t steps) {
  std::vector<Tensor> keep;
  std::map<std::string, TensorView> views;
  auto check = [&](const Tensor& t, const std::string& name, const Parameter& p) {
    if (t.shape() != p.value->shape()) {
      OLMO2_THROW(InputError, "optimizer state ", name, " has shape ", shape_to_string(t.shape()), ", expected ",
                  shape_to_string(p.value->shape()));
    }
  };
  for (const char* kind : {"exp_avg.", "exp_avg_sq."}) {
    if (!zero1_) {
      for (const Parameter& p : params_) {
        keep.push_back(load(kind + p.name, p));
        check(keep.back(), kind + p.name, p);
        views.emplace(kind + p.name, keep.back().view());
      }
      continue;
    }
    std::map<size_t, Tensor> whole;  // parameter index → its moment, loaded once
    for (size_t k = 0; k < segments_.size(); ++k) {
      const Segment& s = segments_[k];
      const Parameter& p = params_[s.param];
      auto it = whole.find(s.param);
      if (it == whole.end()) {
        it = whole.emplace(s.param, load(kind + p.name, p)).first;
        check(it->second, kind + p.name, p);
      }
      Tensor piece = Tensor::zeros({s.count}, DType::F32, device_);
      ops::copy(flat(it->second.view(), s.begin, s.count), piece.view());
      keep.push_back(std::move(piece));
      views.emplace(kind + seg_params_[k].name, keep.back().view());
    }
  }
  adam_->restore(views, steps);
}

}  // namespace olmo2
