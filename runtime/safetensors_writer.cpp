#include "runtime/safetensors_writer.h"

#include <cerrno>
#include <cstring>
#include <fstream>

#include <nlohmann/json.hpp>

#include "ops/error.h"

namespace olmo2 {

namespace {
const char* tag(DType t) {
  switch (t) {
    case DType::F32: return "F32";
    case DType::BF16: return "BF16";
    case DType::F16: return "F16";
  }
  return "?";
}
}  // namespace

void save_safetensors(const std::string& path, const std::map<std::string, TensorView>& tensors) {
  nlohmann::json header = {{"__metadata__", {{"format", "pt"}}}};
  uint64_t offset = 0;
  for (const auto& [name, view] : tensors) {
    OLMO2_CHECK(view.is_contiguous() && view.device() == Device::CPU, "tensor ", name,
                " must be a contiguous CPU view to be saved");
    header[name] = {{"dtype", tag(view.dtype())},
                    {"shape", view.shape()},
                    {"data_offsets", {offset, offset + view.bytes()}}};
    offset += view.bytes();
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) OLMO2_THROW(Error, "cannot write ", path, ": ", std::strerror(errno));
  uint64_t n = text.size();
  char len[8];
  for (int i = 0; i < 8; ++i) len[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  out.write(len, 8);
  out.write(text.data(), static_cast<std::streamsize>(text.size()));
  for (const auto& [name, view] : tensors) {
    out.write(static_cast<const char*>(view.data()), static_cast<std::streamsize>(view.bytes()));
  }
  out.close();
  if (!out) OLMO2_THROW(Error, "writing ", path, " failed: ", std::strerror(errno));
}

}  // namespace olmo2
