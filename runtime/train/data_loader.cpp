#include "runtime/train/data_loader.h"

#include <algorithm>
#include <limits>
#include <type_traits>
#include <utility>

#include "core/error.h"
#include "runtime/io/file_checksum.h"

namespace olmo2 {

namespace {

uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// splitmix64: a 64-bit state advanced by the golden-ratio increment, output mixed.
class SplitMix64 {
 public:
  explicit SplitMix64(uint64_t state) : state_(state) {}
  uint64_t next() { return mix64(state_ += 0x9e3779b97f4a7c15ull); }

  // Uniform in [0, m), m > 0, without bias (Lemire 2019, "Fast random integer
  // generation in an interval").
  uint64_t below(uint64_t m) {
    unsigned __int128 p = static_cast<unsigned __int128>(next()) * m;
    uint64_t low = static_cast<uint64_t>(p);
    if (low < m) {
      const uint64_t threshold = (0 - m) % m;  // 2^64 mod m
      while (low < threshold) {
        p = static_cast<unsigned __int128>(next()) * m;
        low = static_cast<uint64_t>(p);
      }
    }
    return static_cast<uint64_t>(p >> 64);
  }

 private:
  uint64_t state_;
};

void check_positive(const char* name, int64_t v) {
  if (v <= 0) OLMO2_THROW(InputError, "data loader: ", name, " must be positive, got ", v);
}

template <typename T>
T field(const nlohmann::json& j, const char* name) {
  if (!j.is_object() || !j.contains(name)) {
    OLMO2_THROW(InputError, "data loader state has no field \"", name, "\"");
  }
  const nlohmann::json& v = j.at(name);
  bool ok = v.is_number_integer() && (v.is_number_unsigned() || v.get<int64_t>() >= 0);
  if (ok && std::is_signed_v<T> && v.is_number_unsigned()) {
    ok = v.get<uint64_t>() <= static_cast<uint64_t>(std::numeric_limits<T>::max());
  }
  if (!ok) {
    OLMO2_THROW(InputError, "data loader state field \"", name, "\" is ", v.dump(),
                ", not a non-negative integer");
  }
  return v.get<T>();
}

template <typename T>
void check_same(const char* name, T saved, T ours) {
  if (saved != ours) {
    OLMO2_THROW(InputError, "data loader state has ", name, " ", saved, " but this loader has ",
                name, " ", ours, "; a run resumes only with the same data order");
  }
}

}  // namespace

void to_json(nlohmann::json& j, const DataLoaderState& s) {
  j = {{"epoch", s.epoch},     {"step_in_epoch", s.step_in_epoch}, {"seed", s.seed},
       {"seq_len", s.seq_len}, {"global_batch", s.global_batch},   {"num_windows", s.num_windows}};
}

void to_json(nlohmann::json& j, const DataFileIdentity& f) {
  j = {{"path", f.path}, {"tokens", f.tokens}, {"xxh3", f.xxh3}};
}

void from_json(const nlohmann::json& j, DataFileIdentity& f) {
  if (!j.is_object() || !j.contains("path") || !j["path"].is_string() || !j.contains("xxh3") ||
      !j["xxh3"].is_string()) {
    OLMO2_THROW(InputError, "a data_files entry needs a string path and xxh3, got ", j.dump());
  }
  f.path = j["path"].get<std::string>();
  f.xxh3 = j["xxh3"].get<std::string>();
  f.tokens = field<int64_t>(j, "tokens");
}

void from_json(const nlohmann::json& j, DataLoaderState& s) {
  s.epoch = field<int64_t>(j, "epoch");
  s.step_in_epoch = field<int64_t>(j, "step_in_epoch");
  s.seed = field<uint64_t>(j, "seed");
  s.seq_len = field<int64_t>(j, "seq_len");
  s.global_batch = field<int64_t>(j, "global_batch");
  s.num_windows = field<int64_t>(j, "num_windows");
}

std::vector<uint32_t> window_permutation(uint64_t n, uint64_t seed, int64_t epoch) {
  if (n > std::numeric_limits<uint32_t>::max()) {
    OLMO2_THROW(InputError, "data loader: ", n, " windows; at most 2^32 - 1 are supported");
  }
  std::vector<uint32_t> p(n);
  for (uint64_t i = 0; i < n; ++i) p[i] = static_cast<uint32_t>(i);
  SplitMix64 rng(mix64(mix64(seed) + static_cast<uint64_t>(epoch)));
  for (uint64_t i = n; i > 1; --i) std::swap(p[i - 1], p[rng.below(i)]);
  return p;
}

DataLoader::DataLoader(const std::vector<std::string>& files, DataLoaderOptions options)
    : options_(options) {
  if (files.empty()) OLMO2_THROW(InputError, "data loader: no token files given");
  check_positive("seq_len", options.seq_len);
  check_positive("global_batch", options.global_batch);
  check_positive("vocab_size", options.vocab_size);
  if (options.vocab_size > int64_t{1} << 31) {
    OLMO2_THROW(InputError, "data loader: vocab_size ", options.vocab_size,
                " does not fit int32 token ids (at most 2^31)");
  }
  const uint64_t T = static_cast<uint64_t>(options.seq_len);
  window_start_.push_back(0);
  files_.reserve(files.size());
  for (const std::string& path : files) {
    files_.emplace_back(path);
    const uint64_t n = files_.back().size();
    if (n < T) {
      OLMO2_THROW(InputError, "file ", path, " has ", n,
                  " tokens, fewer than one window of seq_len ", T);
    }
    window_start_.push_back(window_start_.back() + n / T);
  }
  if (static_cast<uint64_t>(options.global_batch) > window_start_.back()) {
    OLMO2_THROW(InputError, "global batch ", options.global_batch, " is larger than the ",
                window_start_.back(), " windows of seq_len ", T, " in the ", files.size(),
                " token files");
  }
  order_ = window_permutation(window_start_.back(), options_.seed, epoch_);
}

std::vector<DataFileIdentity> DataLoader::check_token_ids() const {
  std::vector<uint32_t> block(1 << 16);
  std::vector<DataFileIdentity> out;
  for (const NpyFile& f : files_) {
    Xxh3Stream hash;
    for (uint64_t begin = 0; begin < f.size(); begin += block.size()) {
      const size_t n = static_cast<size_t>(std::min<uint64_t>(block.size(), f.size() - begin));
      f.read(begin, std::span<uint32_t>(block.data(), n));
      for (size_t i = 0; i < n; ++i) {
        if (block[i] >= static_cast<uint64_t>(options_.vocab_size)) {
          OLMO2_THROW(InputError, "file ", f.path(), ": token at offset ", begin + i, " has id ", block[i],
                      ", not below vocab_size ", options_.vocab_size);
        }
      }
      hash.update(block.data(), n * sizeof(uint32_t));  // x86-64 and aarch64: little-endian
    }
    out.push_back({f.path(), static_cast<int64_t>(f.size()), hash.hex()});
  }
  return out;
}

Sample DataLoader::window(int64_t index) const {
  OLMO2_CHECK(index >= 0 && index < num_windows(), "window ", index, " of ", num_windows());
  const uint64_t w = static_cast<uint64_t>(index);
  const size_t f = static_cast<size_t>(
      std::upper_bound(window_start_.begin(), window_start_.end(), w) - window_start_.begin() - 1);
  const uint64_t T = static_cast<uint64_t>(options_.seq_len);
  const uint64_t offset = (w - window_start_[f]) * T;
  std::vector<uint32_t> tokens(T);
  files_[f].read(offset, tokens);

  Sample s;
  s.window = index;
  s.input_ids.resize(T);
  s.labels.resize(T);
  for (uint64_t i = 0; i < T; ++i) {
    if (tokens[i] >= static_cast<uint64_t>(options_.vocab_size)) {
      OLMO2_THROW(InputError, "file ", files_[f].path(), ": token at offset ", offset + i,
                  " has id ", tokens[i], ", not below vocab_size ", options_.vocab_size);
    }
    s.input_ids[i] = static_cast<int32_t>(tokens[i]);
  }
  for (uint64_t i = 0; i + 1 < T; ++i) s.labels[i] = s.input_ids[i + 1];
  s.labels[T - 1] = kIgnoreIndex;
  return s;
}

std::vector<Sample> DataLoader::batch(int64_t dp_rank, int64_t dp_size, int64_t micro_batch_index,
                                      int64_t micro_batch_size) const {
  const int64_t G = options_.global_batch;
  check_positive("dp_size", dp_size);
  check_positive("micro_batch_size", micro_batch_size);
  if (G % (dp_size * micro_batch_size) != 0) {
    OLMO2_THROW(InputError, "global batch ", G, " is not divisible by dp_size ", dp_size,
                " × micro_batch_size ", micro_batch_size, " = ", dp_size * micro_batch_size);
  }
  if (dp_rank < 0 || dp_rank >= dp_size) {
    OLMO2_THROW(InputError, "data loader: dp_rank ", dp_rank, " is outside [0, ", dp_size, ")");
  }
  const int64_t share = G / dp_size;
  const int64_t micro_batches = share / micro_batch_size;
  if (micro_batch_index < 0 || micro_batch_index >= micro_batches) {
    OLMO2_THROW(InputError, "data loader: micro_batch_index ", micro_batch_index,
                " is outside [0, ", micro_batches, ")");
  }
  const int64_t first = step_ * G + dp_rank * share + micro_batch_index * micro_batch_size;
  std::vector<Sample> out;
  out.reserve(static_cast<size_t>(micro_batch_size));
  for (int64_t i = 0; i < micro_batch_size; ++i) {
    out.push_back(window(order_[static_cast<size_t>(first + i)]));
  }
  return out;
}

void DataLoader::advance() {
  if (++step_ < steps_per_epoch()) return;
  step_ = 0;
  ++epoch_;
  order_ = window_permutation(window_start_.back(), options_.seed, epoch_);
}

DataLoaderState DataLoader::state() const {
  return {epoch_, step_, options_.seed, options_.seq_len, options_.global_batch, num_windows()};
}

void DataLoader::restore(const DataLoaderState& s) {
  check_same("seed", s.seed, options_.seed);
  check_same("seq_len", s.seq_len, options_.seq_len);
  check_same("global_batch", s.global_batch, options_.global_batch);
  check_same("num_windows", s.num_windows, num_windows());
  if (s.epoch < 0) OLMO2_THROW(InputError, "data loader state has negative epoch ", s.epoch);
  if (s.step_in_epoch < 0 || s.step_in_epoch >= steps_per_epoch()) {
    OLMO2_THROW(InputError, "data loader state has step_in_epoch ", s.step_in_epoch,
                ", outside the epoch's steps [0, ", steps_per_epoch(), ")");
  }
  if (s.epoch != epoch_) order_ = window_permutation(window_start_.back(), options_.seed, s.epoch);
  epoch_ = s.epoch;
  step_ = s.step_in_epoch;
}

}  // namespace olmo2
