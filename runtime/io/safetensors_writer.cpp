#include "runtime/io/safetensors_writer.h"

#include <cerrno>
#include <cstring>
#include <fstream>

#include <nlohmann/json.hpp>

#include "core/error.h"

namespace olmo2 {

std::string safetensors_header(const std::map<std::string, TensorView>& tensors) {
  nlohmann::json header = {{"__metadata__", {{"format", "pt"}}}};
  uint64_t offset = 0;
  for (const auto& [name, view] : tensors) {
    // Only shapes and dtypes are read: a device view's header is written before its
    // bytes are copied to the host (runtime/train/checkpoint.cpp streams them).
    OLMO2_CHECK(view.is_contiguous(), "tensor ", name, " must be a contiguous view to be saved");
    header[name] = {{"dtype", dtype_to_safetensors(view.dtype())},
                    {"shape", view.shape()},
                    {"data_offsets", {offset, offset + view.bytes()}}};
    offset += view.bytes();
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[static_cast<size_t>(i)] = static_cast<char>((text.size() >> (8 * i)) & 0xff);
  return out + text;
}

void save_safetensors(const std::string& path, const std::map<std::string, TensorView>& tensors) {
  for (const auto& [name, view] : tensors) {
    OLMO2_CHECK(view.device() == Device::CPU, "tensor ", name, " must be a CPU view to be saved");
  }
  const std::string header = safetensors_header(tensors);
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) OLMO2_THROW(Error, "cannot write ", path, ": ", std::strerror(errno));
  out.write(header.data(), static_cast<std::streamsize>(header.size()));
  for (const auto& [name, view] : tensors) {
    out.write(static_cast<const char*>(view.data()), static_cast<std::streamsize>(view.bytes()));
  }
  out.close();
  if (!out) OLMO2_THROW(Error, "writing ", path, " failed: ", std::strerror(errno));
}

}  // namespace olmo2
