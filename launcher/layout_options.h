// The layout options of every command that runs on ranks: --tp --pp --dp --pp-layers
// (--cp for train and info) and --collective-timeout, declared and read once for info, generate, trace, train and
// serve (docs/architecture.md §4 rank layout, §12 command line). What they must satisfy
// together, and against the job and the model, is checked once, by Topology::make and
// make_partition_plan (launcher/rank_session.h).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <boost/program_options.hpp>

namespace olmo2 {

/// The layout a command line asks for, each number as given (≥ 1) or its default.
struct LayoutOptions {
  int tp = 1;                       ///< --tp: tensor-parallel ranks
  int pp = 1;                       ///< --pp (default: --pp-layers' entry count, else 1)
  int dp = 0;                       ///< --dp; 0: not given (world / (tp · pp · cp); info's plan: 1)
  int cp = 1;                       ///< --cp: context-parallel ranks (train and info only)
  std::vector<int64_t> pp_layers;   ///< --pp-layers 8,8,7,7 (empty: balanced stages)
  int pp_virtual = 1;               ///< --pp-virtual V: model chunks per pipeline rank (train, info)
  bool pp_virtual_given = false;    ///< --pp-virtual given (info: print the chunk map)
  double collective_timeout = 300;  ///< --collective-timeout seconds (0: wait forever)
  bool given = false;               ///< any of --tp --pp --dp --pp-layers given (info: print the plan)

  /// True when the layout splits the model or the data (an axis above 1 or a
  /// --pp-layers list): the command then runs as an MPI job even without mpirun.
  bool splits() const { return tp > 1 || pp > 1 || dp > 1 || cp > 1 || !pp_layers.empty(); }
};

/// Declares the layout options of `command` ("info", "generate", "trace", "train",
/// "serve"), one declaration each: --tp --pp --dp --pp-layers, --pp-virtual (train and
/// info: the interleaved 1F1B schedule, docs/architecture.md §5), --cp for train and info
/// (the commands whose forward splits sequences; docs/architecture.md §7 "Context
/// parallelism"), and --collective-timeout
/// for the commands that run collectives (not info). With `for_help`, serve's --dp (parsed
/// only to be refused) is left out of the listing.
void add_layout_options(boost::program_options::options_description& d, const std::string& command,
                        bool for_help = false);

/// Reads them (INI --config values included). Throws UsageError naming the option: --tp,
/// --pp, --dp, --pp-virtual or --cp below 1 ("--tp must be at least 1, got 0"), a --pp-layers element that is
/// not a positive integer (parse_layer_list), a negative --collective-timeout, and for
/// serve a --dp above 1 ("serve: --dp is not supported (run one server per replica)").
/// Their relations (tp · pp · dp = world, heads against tp, --pp-layers against pp and
/// the layers) are checked later, by Topology::make and make_partition_plan.
LayoutOptions read_layout_options(const boost::program_options::variables_map& vm, const std::string& command);

}  // namespace olmo2
