// Processes a test starts in the background (servers, training runs) and free ports.
#pragma once

#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <thread>

extern char** environ;

namespace olmo2::test {

/// A free TCP port on 127.0.0.1 (bound to port 0, read back, released).
inline int free_port() {
  const int s = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET, a.sin_addr.s_addr = htonl(INADDR_LOOPBACK), a.sin_port = 0;
  ::bind(s, reinterpret_cast<sockaddr*>(&a), sizeof a);
  socklen_t n = sizeof a;
  ::getsockname(s, reinterpret_cast<sockaddr*>(&a), &n);
  ::close(s);
  return ntohs(a.sin_port);
}

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

}  // namespace olmo2::test
