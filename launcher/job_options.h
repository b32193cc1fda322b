// What every rank of an MPI job must agree on before any work: the options that shape
// the computation or the schedule, in a canonical text form (docs/architecture.md §12
// "One job, every rank"). A rank given another --lr, --seed or --steps than its peers
// would otherwise train silently wrong, or wait forever in a collective its peers never
// make.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include <boost/program_options.hpp>

namespace olmo2 {

/// One option as the ranks compare it: its name (without dashes) and a canonical value
/// (numbers in full precision, lists joined, files by their contents' checksum).
struct JobOption {
  std::string name;
  std::string value;
  bool operator==(const JobOption&) const = default;
};

/// The options of `vm` (command line and --config file, defaults included) that every
/// rank must share, sorted by name. Left out, as each rank's own: --help, --config (its
/// values are in), --threads, --metrics-host, --port-file, --host, --port, --api-key,
/// --output and --activations-out (rank 0 alone writes them). Compared by what they
/// name rather than their text, so that node-local copies at other paths agree:
/// --model-config, --tokenizer, --chat-template and --prompts by size and checksum of
/// the file; --model by the folder's name, its config.json's checksum and its weights'
/// identity (generation_config.json's checksum, training_state.json's checksum where present, and each safetensors file's
/// size and checksum of its first MiB and 32 evenly spaced samples); --resume as
/// "auto" or the checkpoint folder's name; --data by the number of files (their contents
/// are compared by the cross-rank data check); --save-dir by presence (the storage check
/// makes sure every rank sees one folder); --metrics-port by presence (which port each
/// endpoint binds is its own). Never throws for an unreadable file: it is compared as
/// "unreadable", and the command reports it in its own words.
std::vector<JobOption> job_options(const boost::program_options::variables_map& vm);

/// `options` as text, one "name=value" a line (newlines in values escaped), and back.
std::string serialize_job_options(const std::vector<JobOption>& options);
std::vector<JobOption> parse_job_options(const std::string& text);

/// The first difference between `mine` (of rank `rank`) and `root`'s (rank 0's), as a
/// sentence naming the option and both values ("rank 1 has --lr 0.05, rank 0 --lr 0.01"),
/// or "" when they agree. An option one side lacks is "not given".
std::string first_difference(const std::vector<JobOption>& root, const std::vector<JobOption>& mine, int rank);

}  // namespace olmo2
