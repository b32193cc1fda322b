#include "parallel/thread_count.h"

#include <sched.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <memory>

#include "core/error.h"
#include "core/hash.h"

namespace olmo2::parallel {

namespace {

constexpr int kMaxThreads = 65536;

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

/// `text` as a count in [1, kMaxThreads], or std::nullopt when it is anything else.
std::optional<int> parse_count(std::string_view text) {
  text = trim(text);
  if (text.empty() || text.size() > 6) return std::nullopt;
  int n = 0;
  for (char c : text) {
    if (c < '0' || c > '9') return std::nullopt;
    n = n * 10 + (c - '0');
  }
  if (n < 1 || n > kMaxThreads) return std::nullopt;
  return n;
}

std::optional<std::string> env(const char* name) {
  const char* v = std::getenv(name);
  if (!v || !*v) return std::nullopt;
  return std::string(v);
}

}  // namespace

const char* to_string(ThreadSource source) {
  switch (source) {
    case ThreadSource::flag: return "--threads";
    case ThreadSource::slurm_cpus_per_task: return "SLURM_CPUS_PER_TASK";
    case ThreadSource::omp_num_threads: return "OMP_NUM_THREADS";
    case ThreadSource::affinity: return "the affinity mask";
  }
  return "?";
}

ThreadSettings thread_settings_from_environment(int flag) {
  return ThreadSettings{flag, env("SLURM_CPUS_PER_TASK"), env("OMP_NUM_THREADS")};
}

std::optional<ThreadChoice> threads_from_settings(const ThreadSettings& s) {
  if (s.flag > 0) return ThreadChoice{s.flag, ThreadSource::flag};
  if (s.flag < 0) OLMO2_THROW(InputError, "--threads must be at least 1, got ", s.flag);
  if (s.slurm_cpus_per_task && !trim(*s.slurm_cpus_per_task).empty()) {
    const auto n = parse_count(*s.slurm_cpus_per_task);
    if (!n) {
      OLMO2_THROW(InputError, "SLURM_CPUS_PER_TASK=\"", *s.slurm_cpus_per_task,
                  "\" is not a CPU count in [1, ", kMaxThreads,
                  "] (Slurm sets it from --cpus-per-task): fix or unset it, or give --threads");
    }
    return ThreadChoice{*n, ThreadSource::slurm_cpus_per_task};
  }
  if (s.omp_num_threads && !trim(*s.omp_num_threads).empty()) {
    const std::string_view v = *s.omp_num_threads;
    const auto n = parse_count(v.substr(0, v.find(',')));  // the outermost level's count
    if (!n) {
      OLMO2_THROW(InputError, "OMP_NUM_THREADS=\"", *s.omp_num_threads, "\" is not a thread count in [1, ",
                  kMaxThreads, "] (or a list of them, \"8,2\"): fix or unset it, or give --threads");
    }
    return ThreadChoice{*n, ThreadSource::omp_num_threads};
  }
  return std::nullopt;
}

int threads_from_affinity(int affinity_cpus, int ranks_sharing_mask) {
  if (affinity_cpus < 1 || ranks_sharing_mask < 1) {
    OLMO2_THROW(InputError, "thread count from ", affinity_cpus, " CPUs shared by ", ranks_sharing_mask,
                " ranks: both must be at least 1");
  }
  return std::max(1, affinity_cpus / ranks_sharing_mask);
}

ThreadChoice choose_threads(const ThreadSettings& settings, int affinity_cpus, int ranks_sharing_mask) {
  if (auto fixed = threads_from_settings(settings)) return *fixed;
  return ThreadChoice{threads_from_affinity(affinity_cpus, ranks_sharing_mask), ThreadSource::affinity};
}

AffinityMask affinity_mask() {
  for (int cpus = 1024; cpus <= (1 << 20); cpus *= 2) {
    const size_t bytes = CPU_ALLOC_SIZE(cpus);
    std::unique_ptr<cpu_set_t, void (*)(cpu_set_t*)> set(CPU_ALLOC(cpus), [](cpu_set_t* p) { CPU_FREE(p); });
    if (!set) OLMO2_THROW(Error, "CPU_ALLOC of ", cpus, " CPUs failed");
    CPU_ZERO_S(bytes, set.get());
    if (::sched_getaffinity(0, bytes, set.get()) == 0) {
      const std::string_view bits(reinterpret_cast<const char*>(set.get()), bytes);
      return AffinityMask{std::max(1, CPU_COUNT_S(bytes, set.get())), fnv1a64(bits)};
    }
    if (errno != EINVAL) break;  // EINVAL: the kernel's mask is larger than this set
  }
  OLMO2_THROW(Error, "sched_getaffinity failed: ", std::strerror(errno));
}

}  // namespace olmo2::parallel
