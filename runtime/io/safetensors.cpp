#include "runtime/io/safetensors.h"

#include <algorithm>
#include <cstring>
#include <fstream>

#include <nlohmann/json.hpp>

#include "core/error.h"

namespace olmo2 {

namespace {

using nlohmann::json;

/// Element size of every dtype tag the format defines; 0 for an unknown tag.
size_t tag_size(const std::string& tag) {
  static const std::map<std::string, size_t> sizes = {
      {"F64", 8}, {"F32", 4}, {"F16", 2},  {"BF16", 2}, {"I64", 8},     {"I32", 4},
      {"I16", 2}, {"I8", 1},  {"U64", 8},  {"U32", 4},  {"U16", 2},     {"U8", 1},
      {"BOOL", 1}, {"F8_E4M3", 1}, {"F8_E5M2", 1}};
  auto it = sizes.find(tag);
  return it == sizes.end() ? 0 : it->second;
}

/// A short rendering of an offending JSON value for a message. Containers are not
/// dumped: dumping recurses, and a crafted header can nest deeply enough to overflow
/// the stack.
std::string describe(const json& v) {
  if (v.is_array()) return "[...]";
  if (v.is_object()) return "{...}";
  std::string s = v.dump();
  return s.size() > 64 ? s.substr(0, 60) + "..." : s;
}

constexpr int kMaxHeaderDepth = 16;

[[noreturn]] void bad(const std::string& source, const std::string& why) {
  OLMO2_THROW(InputError, source, ": invalid safetensors file: ", why);
}

TensorInfo parse_entry(const std::string& name, const json& e, uint64_t data_size,
                       const std::string& source) {
  const std::string where = "tensor \"" + name + "\"";
  if (!e.is_object()) bad(source, where + " entry is not an object");
  TensorInfo t;
  t.name = name;
  auto dt = e.find("dtype");
  if (dt == e.end() || !dt->is_string()) bad(source, where + " has no string \"dtype\"");
  t.dtype_tag = dt->get<std::string>();
  const size_t elem = tag_size(t.dtype_tag);
  if (elem == 0) bad(source, where + " has unknown dtype \"" + t.dtype_tag + "\"");
  t.supported = dtype_from_safetensors(t.dtype_tag, &t.dtype);

  auto sh = e.find("shape");
  if (sh == e.end() || !sh->is_array()) bad(source, where + " has no \"shape\" list");
  uint64_t numel = 1;
  for (const json& d : *sh) {  // all entries first, so that sh->dump() below is flat
    if (!d.is_number_unsigned()) bad(source, where + " has a shape entry " + describe(d) +
                                                 " that is not a non-negative integer");
  }
  for (const json& d : *sh) {
    const uint64_t v = d.get<uint64_t>();
    if (v > static_cast<uint64_t>(INT64_MAX) || __builtin_mul_overflow(numel, v, &numel) ||
        numel > static_cast<uint64_t>(INT64_MAX)) {
      bad(source, where + " shape " + sh->dump() + " overflows the element count");
    }
    t.shape.push_back(static_cast<int64_t>(v));
  }

  auto off = e.find("data_offsets");
  if (off == e.end() || !off->is_array() || off->size() != 2) {
    bad(source, where + " has no \"data_offsets\" pair");
  }
  for (const json& o : *off) {
    if (o.is_number_integer() && !o.is_number_unsigned()) {
      bad(source, where + " has a negative data offset " + o.dump());
    }
    if (!o.is_number_unsigned()) bad(source, where + " has a data offset " + describe(o) +
                                                 " that is not an integer");
  }
  t.begin = (*off)[0].get<uint64_t>();
  t.end = (*off)[1].get<uint64_t>();
  if (t.begin > t.end) {
    bad(source, where + " has reversed data offsets [" + std::to_string(t.begin) + ", " +
                    std::to_string(t.end) + "]");
  }
  if (t.end > data_size) {
    bad(source, where + " data_offsets end " + std::to_string(t.end) +
                    " is past the end of the data section (" + std::to_string(data_size) +
                    " bytes)");
  }
  uint64_t bytes = 0;
  if (__builtin_mul_overflow(numel, static_cast<uint64_t>(elem), &bytes)) {
    bad(source, where + " shape " + sh->dump() + " overflows the byte size");
  }
  if (bytes != t.end - t.begin) {
    bad(source, where + " holds " + std::to_string(t.end - t.begin) + " bytes but shape " +
                    sh->dump() + " of " + t.dtype_tag + " needs " + std::to_string(bytes));
  }
  return t;
}

}  // namespace

std::map<std::string, TensorInfo> parse_safetensors_header(const uint8_t* bytes, size_t file_size,
                                                           const std::string& source) {
  if (file_size < 8) {
    bad(source, "truncated: " + std::to_string(file_size) +
                    " bytes, shorter than the 8-byte header length");
  }
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | bytes[i];
  if (n > kMaxSafetensorsHeader) {
    bad(source, "header length " + std::to_string(n) + " exceeds the 100 MB limit");
  }
  if (n > file_size - 8) {
    bad(source, "truncated: header length " + std::to_string(n) + " but only " +
                    std::to_string(file_size - 8) + " bytes follow");
  }
  json header;
  try {
    // A corrupt header may nest arrays millions deep; refuse that before it costs memory.
    const json::parser_callback_t depth_limit = [&](int depth, json::parse_event_t, json&) {
      if (depth > kMaxHeaderDepth) {
        bad(source, "header nests deeper than " + std::to_string(kMaxHeaderDepth) + " levels");
      }
      return true;
    };
    header = json::parse(bytes + 8, bytes + 8 + n, depth_limit);
  } catch (const json::exception& e) {
    bad(source, std::string("header is not valid JSON: ") + e.what());
  }
  if (!header.is_object()) bad(source, "header is not a JSON object");

  const uint64_t data_size = file_size - 8 - n;
  std::map<std::string, TensorInfo> tensors;
  for (const auto& [name, entry] : header.items()) {
    if (name == "__metadata__") {
      if (!entry.is_object()) bad(source, "__metadata__ is not an object");
      continue;
    }
    tensors.emplace(name, parse_entry(name, entry, data_size, source));
  }
  std::vector<const TensorInfo*> by_offset;
  for (const auto& [name, t] : tensors) {
    if (t.end > t.begin) by_offset.push_back(&t);
  }
  std::sort(by_offset.begin(), by_offset.end(),
            [](const TensorInfo* a, const TensorInfo* b) { return a->begin < b->begin; });
  for (size_t i = 1; i < by_offset.size(); ++i) {
    if (by_offset[i]->begin < by_offset[i - 1]->end) {
      bad(source, "byte ranges of tensors \"" + by_offset[i - 1]->name + "\" and \"" +
                      by_offset[i]->name + "\" overlap");
    }
  }
  return tensors;
}

SafetensorsFile::SafetensorsFile(const std::string& path) : file_(path) {
  tensors_ = parse_safetensors_header(file_.data(), file_.size(), path);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | file_.data()[i];
  data_section_ = file_.data() + 8 + n;
}

Checkpoint Checkpoint::open(const std::string& dir) {
  Checkpoint c;
  c.dir_ = dir;
  const std::string index_path = dir + "/model.safetensors.index.json";
  std::ifstream index(index_path);
  if (index) {
    json j;
    try {
      j = json::parse(index);
    } catch (const json::exception& e) {
      OLMO2_THROW(InputError, index_path, ": not valid JSON: ", e.what());
    }
    if (!j.is_object() || !j.contains("weight_map") || !j["weight_map"].is_object()) {
      OLMO2_THROW(InputError, index_path, ": no \"weight_map\" object");
    }
    std::map<std::string, const SafetensorsFile*> opened;
    for (const auto& [name, file] : j["weight_map"].items()) {
      if (!file.is_string()) OLMO2_THROW(InputError, index_path, ": entry for ", name, " is not a file name");
      const std::string f = file.get<std::string>();
      if (f.empty() || f.find('/') != std::string::npos || f == "." || f == "..") {
        OLMO2_THROW(InputError, index_path, ": tensor ", name, " points to \"", f,
                    "\", which is not a file name inside ", dir);
      }
      if (!opened.count(f)) {
        c.files_.push_back(std::make_unique<SafetensorsFile>(dir + "/" + f));
        opened[f] = c.files_.back().get();
      }
      const SafetensorsFile* sf = opened[f];
      auto it = sf->tensors().find(name);
      if (it == sf->tensors().end()) {
        OLMO2_THROW(InputError, index_path, " places tensor ", name, " in ", f,
                    ", which does not hold it");
      }
      c.where_[name] = {sf, &it->second};
    }
    return c;
  }
  const std::string single = dir + "/model.safetensors";
  if (!std::ifstream(single)) {
    OLMO2_THROW(InputError, "no model.safetensors or model.safetensors.index.json in ", dir);
  }
  c.files_.push_back(std::make_unique<SafetensorsFile>(single));
  for (const auto& [name, t] : c.files_.back()->tensors()) c.where_[name] = {c.files_.back().get(), &t};
  return c;
}

const TensorInfo& Checkpoint::info(const std::string& name) const {
  auto it = where_.find(name);
  if (it == where_.end()) OLMO2_THROW(InputError, "checkpoint ", dir_, " has no tensor ", name);
  return *it->second.second;
}

std::vector<std::string> Checkpoint::names() const {
  std::vector<std::string> out;
  for (const auto& [name, _] : where_) out.push_back(name);
  return out;
}

namespace {
void check_loadable(const TensorInfo& t, const std::string& name, const std::vector<int64_t>& expected) {
  if (!t.supported) {
    OLMO2_THROW(InputError, "tensor ", name, " has dtype ", t.dtype_tag,
                "; supported dtypes are F32, BF16 and F16");
  }
  if (t.shape != expected) {
    OLMO2_THROW(InputError, "tensor ", name, " has shape ", shape_to_string(t.shape),
                ", expected ", shape_to_string(expected));
  }
}
}  // namespace

Tensor Checkpoint::load(const std::string& name, const std::vector<int64_t>& expected, DType want) const {
  return load_slice(name, expected, 0, 0, expected.empty() ? 0 : expected[0], want);
}

Tensor Checkpoint::load_slice(const std::string& name, const std::vector<int64_t>& expected, int dim,
                              int64_t begin, int64_t end, DType want) const {
  const TensorInfo& t = info(name);
  check_loadable(t, name, expected);
  OLMO2_CHECK(want == DType::F32 || want == DType::BF16, "load of ", name, " as ", dtype_name(want),
              " (f32 or bf16)");
  if (expected.empty()) {  // a scalar
    Tensor out = Tensor::zeros(expected, want);
    convert(where_.at(name).first->data(t), t.dtype, out.view().data(), want, 1);
    return out;
  }
  OLMO2_CHECK((expected.size() == 1 && dim == 0) || (expected.size() == 2 && (dim == 0 || dim == 1)),
              "slice of dimension ", dim, " of ", name, " ", shape_to_string(expected));
  OLMO2_CHECK(0 <= begin && begin <= end && end <= expected[static_cast<size_t>(dim)], "slice [", begin,
              ", ", end, ") of dimension ", dim, " of ", name, " ", shape_to_string(expected));
  std::vector<int64_t> shape = expected;
  shape[static_cast<size_t>(dim)] = end - begin;
  Tensor out = Tensor::zeros(shape, want);
  const uint8_t* base = where_.at(name).first->data(t);
  const size_t elem = dtype_size(t.dtype), out_elem = dtype_size(want);
  const int64_t cols = expected.size() == 2 ? expected[1] : 1;
  auto* dst = static_cast<uint8_t*>(out.view().data());
  if (dim == 0) {  // contiguous rows
    convert(base + static_cast<size_t>(begin * cols) * elem, t.dtype, dst, want, static_cast<size_t>(out.numel()));
  } else {  // the same column range of every row
    const int64_t width = end - begin;
    for (int64_t r = 0; r < expected[0]; ++r) {
      convert(base + static_cast<size_t>(r * cols + begin) * elem, t.dtype, dst + static_cast<size_t>(r * width) * out_elem,
              want, static_cast<size_t>(width));
    }
  }
  return out;
}

void Checkpoint::release(const std::string& name) const {
  const auto& [file, t] = where_.at(name);
  file->release(*t);
}

}  // namespace olmo2
