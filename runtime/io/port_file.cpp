#include "runtime/io/port_file.h"

#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "core/error.h"

namespace olmo2 {

namespace fs = std::filesystem;

void check_port_file(const std::string& path) {
  if (path.empty()) OLMO2_THROW(InputError, "--port-file must not be empty");
  std::error_code ec;
  if (fs::is_directory(path, ec)) OLMO2_THROW(InputError, "--port-file ", path, " is a folder, not a file");
  const fs::path parent = fs::absolute(fs::path(path), ec).parent_path();
  if (!fs::is_directory(parent, ec)) OLMO2_THROW(InputError, "--port-file ", path, ": no folder ", parent.string());
  if (::access(parent.c_str(), W_OK | X_OK) != 0) {
    OLMO2_THROW(InputError, "--port-file ", path, ": cannot write in ", parent.string());
  }
}

std::string published_address(const std::string& host, int port) {
  std::string h = host;
  if (h.empty() || h == "0.0.0.0" || h == "::" || h == "[::]") {
    char name[256] = {};
    h = ::gethostname(name, sizeof name - 1) == 0 && name[0] ? name : "localhost";
  }
  if (h.find(':') != std::string::npos && h.front() != '[') h = "[" + h + "]";
  return h + ":" + std::to_string(port);
}

void write_port_file(const std::string& path, const std::vector<std::string>& lines) {
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  {
    std::ofstream out(tmp, std::ios::trunc);
    for (const std::string& l : lines) out << l << '\n';
    out.flush();
    if (!out) {
      std::remove(tmp.c_str());
      OLMO2_THROW(InputError, "--port-file ", path, ": cannot write ", tmp);
    }
  }
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec) {
    std::remove(tmp.c_str());
    OLMO2_THROW(InputError, "--port-file ", path, ": cannot rename ", tmp, " over it (", ec.message(), ")");
  }
}

PortFileGuard::~PortFileGuard() {
  if (path_.empty()) return;
  std::error_code ec;
  fs::remove(path_, ec);
}

}  // namespace olmo2
