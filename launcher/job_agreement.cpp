#include "launcher/job_agreement.h"

#include <cstdint>
#include <iostream>
#include <span>

#include "launcher/commands.h"
#include "launcher/exit_status.h"
#include "launcher/options.h"
#include "parallel/agreement.h"
#include "parallel/process_groups.h"
#include "parallel/string_gather.h"

namespace olmo2 {

namespace {
/// FNV-1a over the serialized options.
uint64_t options_hash(const std::string& text) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : text) h = (h ^ c) * 1099511628211ull;
  return h;
}
}  // namespace

void agree_on_the_job(const std::string& usage_error, const std::vector<JobOption>& options, double timeout_s) {
  const std::unique_ptr<parallel::Communicator> world = parallel::make_world_communicator(timeout_s);
  const bool root = world->rank() == 0;
  try {
    parallel::agree(world.get(), [&] {
      if (!usage_error.empty()) OLMO2_THROW(UsageError, usage_error);
    });
  } catch (const parallel::AgreedError& e) {
    if (root) std::cerr << "olmo2: error: " << e.what() << std::endl;
    world->barrier();  // nobody exits before the line is out
    throw SilentExit{kExitUsage};
  }
  const std::string text = serialize_job_options(options);
  const uint64_t mine = options_hash(text);
  std::vector<uint64_t> hashes(static_cast<size_t>(world->size()));
  world->all_gather(std::span<const uint64_t>(&mine, 1), std::span<uint64_t>(hashes));
  bool alike = true;
  for (uint64_t h : hashes) alike = alike && h == hashes[0];
  if (alike) return;
  // Only when they differ: every rank's text, to say how.
  const std::vector<std::string> all = parallel::all_gather_strings(*world, text);
  const std::vector<JobOption> first = parse_job_options(all[0]);
  std::string difference;
  for (size_t r = 1; r < all.size() && difference.empty(); ++r) {
    difference = first_difference(first, parse_job_options(all[r]), static_cast<int>(r));
  }
  if (root) {
    std::cerr << "olmo2: error: the ranks were started with different options: " << difference
              << " (every rank of a job must be given the same options)" << std::endl;
  }
  world->barrier();
  throw SilentExit{kExitUsage};
}

}  // namespace olmo2
