#include "runtime/train/data_parallel_adamw.h"

#include <algorithm>

#include "ops/elementwise.h"
#include "ops/tensor_ops.h"
#include "parallel/tensor_collectives.h"
#include "runtime/train/zero_startup.h"

namespace olmo2 {
namespace {
/// Elements [begin, begin + count) of a tensor, flattened.
TensorView flat(const TensorView& t, int64_t begin, int64_t count) {
  return t.reshape({t.numel()}).rows(begin, begin + count);
}
}  // namespace

DataParallelAdamW::DataParallelAdamW(std::vector<Parameter>& params, AdamWOptions options,
                                     parallel::Communicator* dp, int stage)
    : params_(params), dp_(dp), stage_(dp && dp->size() > 1 ? stage : 0) {
  if (stage < 0 || stage > 3) OLMO2_THROW(InputError, "--zero-stage must be 0, 1, 2 or 3, got ", stage);
  device_ = params_.empty() ? Device::CPU : params_.front().value->device();
  if (stage_ == 0) {
    adam_ = std::make_unique<AdamW>(params_, options);
    return;
  }
  units_ = make_zero_units(params_, stage_, dp_->rank(), dp_->size());
  for (const ZeroUnit& u : units_) {
    seg_begin_.push_back(segments_.size());
    segments_.insert(segments_.end(), u.mine.begin(), u.mine.end());
  }
  seg_values_.reserve(segments_.size()), seg_grads_.reserve(segments_.size());
  for (const ZeroSegment& s : segments_) {
    // Stage 2 stages the values only during step (copied in from the replicated weights).
    seg_values_.push_back(stage_ == 2 ? shape_only({s.count}, DType::F32, device_)
                                      : Tensor::zeros({s.count}, DType::F32, device_));
    seg_grads_.push_back(Tensor::zeros({s.count}, DType::F32, device_));
  }
  for (size_t k = 0; k < segments_.size(); ++k) {
    Parameter q = params_[segments_[k].param];  // keeps the grad-norm flags (owned(), tp_replicated, kv replicas)
    q.name += "@" + std::to_string(segments_[k].begin);
    q.full_shape = {segments_[k].count};
    q.value = &seg_values_[k], q.grad = &seg_grads_[k];
    q.shard_dim = -1, q.shard_begin = 0, q.shard_end = 0;
    seg_params_.push_back(std::move(q));
  }
  adam_ = std::make_unique<AdamW>(seg_params_, options);
}

DataParallelAdamW::~DataParallelAdamW() = default;

int64_t DataParallelAdamW::steps() const { return adam_->steps(); }

void DataParallelAdamW::step(double lr) {
  if (stage_ == 0) {
    adam_->step(params_, lr);
    return;
  }
  // Stages 1 and 2 copy the chunks' values in from the replicated parameters at each
  // step (stage 3's master chunks are the values).
  for (size_t k = 0; k < segments_.size() && stage_ < 3; ++k) {
    const ZeroSegment& s = segments_[k];
    if (stage_ == 2) seg_values_[k] = Tensor::zeros({s.count}, DType::F32, device_);
    copy_value_in(k);
    if (stage_ == 1) ops::copy(flat(params_[s.param].grad->view(), s.begin, s.count), seg_grads_[k].view());
  }
  adam_->step(seg_params_, lr);
  if (stage_ == 3) return;  // the master chunks are the parameters; forward and backward gather them
  for (size_t u = 0; u < units_.size(); ++u) {  // every replica gets every updated element
    const Tensor all = gather_unit(u, [&](size_t k) { return seg_values_[k].view(); });
    for (size_t i = units_[u].first, at = 0; i < units_[u].last; ++i) {
      Parameter& p = params_[i];
      ops::copy(all.view().rows(static_cast<int64_t>(at), static_cast<int64_t>(at) + p.numel()),
                p.value->view().reshape({p.numel()}));
      at += static_cast<size_t>(p.numel());
    }
  }
  // Stage 2's staged values are not needed until the next step (docs/architecture.md §7
  // "Memory plan"): stage 1 keeps them, as its memory plan counts.
  for (size_t k = 0; k < segments_.size() && stage_ == 2; ++k) {
    seg_values_[k] = shape_only({segments_[k].count}, DType::F32, device_);
  }
}

void DataParallelAdamW::pack_values(size_t u, const TensorView& out) const {
  const ZeroUnit& unit = units_.at(u);
  if (out.numel() != unit.chunk) OLMO2_THROW(ShapeError, "unit ", u, " chunk of ", unit.chunk, ", got ", out.numel());
  ops::fill(out, 0.0);
  for (size_t k = seg_begin_[u]; k < seg_begin_[u] + unit.mine.size(); ++k) {
    ops::copy(seg_values_[k].view(), out.rows(segments_[k].at, segments_[k].at + segments_[k].count));
  }
}

void DataParallelAdamW::copy_value_in(size_t k) {
  const ZeroSegment& s = segments_[k];
  ops::copy(flat(params_[s.param].value->view(), s.begin, s.count), seg_values_[k].view());
}

void DataParallelAdamW::set_master(size_t u) {
  OLMO2_CHECK(stage_ == 3, "set_master at ZeRO stage ", stage_);
  for (size_t k = seg_begin_[u]; k < seg_begin_[u] + units_.at(u).mine.size(); ++k) copy_value_in(k);
}

void DataParallelAdamW::add_grad_chunk(size_t u, const TensorView& piece, int64_t at) {
  const ZeroUnit& unit = units_.at(u);
  const int64_t end = at + piece.numel();
  if (at < 0 || end > unit.chunk) {
    OLMO2_THROW(ShapeError, "unit ", u, " chunk of ", unit.chunk, ", got elements [", at, ", ", end, ")");
  }
  for (size_t k = seg_begin_[u]; k < seg_begin_[u] + unit.mine.size(); ++k) {
    const ZeroSegment& s = segments_[k];
    const int64_t b = std::max(at, s.at), e = std::min(end, s.at + s.count);
    if (b >= e) continue;
    const int64_t n = e - b;  // add_inplace takes rows: one row of n
    ops::add_inplace(seg_grads_[k].view().rows(b - s.at, e - s.at).reshape({1, n}),
                     piece.rows(b - at, e - at).reshape({1, n}));
  }
}

int64_t DataParallelAdamW::chunk_bytes() const {
  int64_t elements = 0;
  for (const ZeroSegment& s : segments_) elements += s.count;
  return elements * 4 * 4;  // value, gradient, exp_avg, exp_avg_sq: f32 each
}

Tensor DataParallelAdamW::gather_unit(size_t u, const std::function<TensorView(size_t)>& segment) const {
  const ZeroUnit& unit = units_[u];
  const Tensor mine = Tensor::zeros({unit.chunk}, DType::F32, device_);
  for (size_t k = seg_begin_[u]; k < seg_begin_[u] + unit.mine.size(); ++k) {
    ops::copy(segment(k), mine.view().rows(segments_[k].at, segments_[k].at + segments_[k].count));
  }
  Tensor all = Tensor::zeros({unit.chunk * dp_->size()}, DType::F32, device_);
  parallel::all_gather(*dp_, mine.view(), all.view());
  return all;
}

std::map<std::string, Tensor> DataParallelAdamW::full_state() const {
  std::map<std::string, Tensor> out;
  const std::map<std::string, TensorView> views = adam_->state_tensors();
  if (stage_ == 0) {
    for (const auto& [name, v] : views) {
      Tensor t = Tensor::zeros(v.shape(), v.dtype(), v.device());
      ops::copy(v, t.view());
      out.emplace(name, std::move(t));
    }
    return out;
  }
  for (const char* kind : {"exp_avg.", "exp_avg_sq."}) {
    for (size_t u = 0; u < units_.size(); ++u) {
      const Tensor all = gather_unit(u, [&](size_t k) { return views.at(kind + seg_params_[k].name); });
      for (size_t i = units_[u].first, at = 0; i < units_[u].last; ++i) {
        const Parameter& p = params_[i];
        Tensor t = Tensor::zeros(p.value->shape(), DType::F32, device_);
        ops::copy(all.view().rows(static_cast<int64_t>(at), static_cast<int64_t>(at) + p.numel()),
                  t.view().reshape({p.numel()}));
        at += static_cast<size_t>(p.numel());
        out.emplace(kind + p.name, std::move(t));
      }
    }
  }
  return out;
}

TensorView DataParallelAdamW::assemble(size_t index, Tensor& keep,
                                       const std::function<TensorView(size_t)>& segment) const {
  constexpr int kMomentTag = 26;
  const Parameter& p = params_[index];
  size_t u = 0;
  while (units_[u].last <= index) ++u;
  const ZeroUnit& unit = units_[u];
  // The parameter's flat elements [first, first + numel) of its unit lie in the chunks of
  // ranks first / chunk … (first + numel − 1) / chunk; each sends its piece to DP rank 0.
  const int64_t first = unit.offset_of(params_, index), chunk = unit.chunk;
  TensorView piece;  // this rank's piece of it (at most one: chunks are contiguous)
  int64_t piece_begin = -1;
  for (size_t k = seg_begin_[u]; k < seg_begin_[u] + unit.mine.size(); ++k) {
    if (segments_[k].param == index) piece = segment(k), piece_begin = segments_[k].begin;
  }
  if (dp_->rank() != 0) {
    if (piece_begin >= 0) parallel::send(*dp_, piece, 0, kMomentTag);
    return {};
  }
  keep = Tensor::zeros(p.value->shape(), DType::F32, device_);
  if (p.numel() == 0) return keep.view();
  if (piece_begin >= 0) ops::copy(piece, flat(keep.view(), piece_begin, piece.numel()));
  const int64_t last = first + p.numel() - 1;
  for (int64_t r = std::max<int64_t>(1, first / chunk); r <= last / chunk && r < dp_->size(); ++r) {
    const int64_t b = std::max(first, r * chunk), e = std::min(first + p.numel(), (r + 1) * chunk);
    parallel::recv(*dp_, flat(keep.view(), b - first, e - b), static_cast<int>(r), kMomentTag);
  }
  return keep.view();
}

TensorView DataParallelAdamW::moment(const std::string& kind, size_t index, Tensor& keep) const {
  OLMO2_CHECK(kind == "exp_avg." || kind == "exp_avg_sq.", "unknown moment kind \"", kind, "\"");
  OLMO2_CHECK(index < params_.size(), "moment of parameter ", index, " of ", params_.size());
  const std::map<std::string, TensorView> views = adam_->state_tensors();
  if (stage_ == 0) return views.at(kind + params_[index].name);
  return assemble(index, keep, [&](size_t k) { return views.at(kind + seg_params_[k].name); });
}

TensorView DataParallelAdamW::value(size_t index, Tensor& keep) const {
  OLMO2_CHECK(index < params_.size(), "value of parameter ", index, " of ", params_.size());
  if (stage_ < 3) return params_[index].value->view();
  return assemble(index, keep, [&](size_t k) { return seg_values_[k].view(); });
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
    if (stage_ == 0) {
      for (const Parameter& p : params_) {
        keep.push_back(load(kind + p.name, p));
        check(keep.back(), kind + p.name, p);
        views.emplace(kind + p.name, keep.back().view());
      }
      continue;
    }
    std::map<size_t, Tensor> whole;  // parameter index → its moment, loaded once
    for (size_t k = 0; k < segments_.size(); ++k) {
      const ZeroSegment& s = segments_[k];
      const Parameter& p = params_[s.param];
      auto it = whole.find(s.param);
      if (it == whole.end()) {
        whole.clear();  // segments of one parameter are adjacent: keep one whole moment at a time
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
