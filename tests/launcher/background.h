// Processes a test starts in the background (servers, training runs) and the port a
// server bound: tests never pick a port in advance (another test could take it before
// the server binds it); servers bind port 0 and write the port the kernel chose to a
// --port-file (docs/architecture.md §10).
#pragma once

#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <iterator>
#include <string>
#include <thread>

extern char** environ;

namespace olmo2::test {

/// `sh -c command` in the background, its output in files.
struct Background {
  pid_t pid = -1;
  explicit Background(const std::string& command) {
    const std::string line = "exec " + command;  // the signal goes to the program, not the shell
    const char* argv[] = {"/bin/sh", "-c", line.c_str(), nullptr};
    posix_spawn(&pid, "/bin/sh", nullptr, nullptr, const_cast<char**>(argv), environ);
  }
  /// Sends `sig` to the process if it is still ours to signal. (Never kill(pid) with a
  /// pid that wait() has reset: kill(-1, sig) signals every process of the machine.)
  void signal(int sig) const {
    if (pid > 0) ::kill(pid, sig);
  }
  int wait() {
    int status = 0;
    ::waitpid(pid, &status, 0);
    pid = -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }
  /// The exit status if it has ended within `seconds`, else -1 (still running).
  int wait_for(double seconds) {
    const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
    while (std::chrono::steady_clock::now() < end) {
      int status = 0;
      if (::waitpid(pid, &status, WNOHANG) == pid) {
        pid = -1;
        return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return -1;
  }
  /// A test that failed before stopping its process does not leave it running.
  ~Background() {
    if (pid <= 0) return;
    ::kill(pid, SIGTERM);  // mpirun ends its ranks on SIGTERM; SIGKILL would orphan them
    for (int i = 0; i < 100; ++i) {
      if (::waitpid(pid, nullptr, WNOHANG) == pid) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    ::kill(pid, SIGKILL);
    ::waitpid(pid, nullptr, 0);
  }
  Background(const Background&) = delete;
  Background& operator=(const Background&) = delete;
};

/// The whole text of file `path` ("" when it cannot be read).
inline std::string read_file(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

/// The port in the first line ("HOST:PORT") of the --port-file `path` that `process`
/// writes once it listens: polls every 20 ms for up to `seconds`; -1 when the process
/// ended first or the time ran out.
inline int port_from_file(const std::string& path, Background& process, double seconds = 120) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (std::chrono::steady_clock::now() < end) {
    std::ifstream in(path);
    std::string line;
    if (in && std::getline(in, line) && line.rfind(':') != std::string::npos) {
      return std::stoi(line.substr(line.rfind(':') + 1));
    }
    if (process.wait_for(0.02) >= 0) return -1;
  }
  return -1;
}

}  // namespace olmo2::test
