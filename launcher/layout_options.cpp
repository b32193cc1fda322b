#include "launcher/layout_options.h"

#include <utility>

#include "launcher/options.h"

namespace olmo2 {

namespace po = boost::program_options;

void add_layout_options(po::options_description& d, const std::string& command, bool for_help) {
  const bool info = command == "info";
  d.add_options()("tp", po::value<int>(),
                  info ? "tensor-parallel ranks (info: print the partition plan)"
                       : "tensor-parallel ranks (under mpirun; default 1)")(
      "pp", po::value<int>(), "pipeline stages (default: --pp-layers' entry count, else 1)");
  if (!(command == "serve" && for_help)) {
    d.add_options()("dp", po::value<int>(), info                ? "data-parallel replicas (info: default 1)"
                                            : command == "plan" ? "data-parallel replicas (default 1)"
                                                                : "data-parallel replicas (default: world / (tp * pp))");
  }
  d.add_options()("pp-layers", po::value<std::string>(), "layers per pipeline stage, e.g. 8,8,7,7 (default: balanced)");
  if (info || command == "train" || command == "plan") {
    d.add_options()("pp-virtual", po::value<int>(),
                    info ? "model chunks per pipeline rank (info: print the chunk map of the interleaved 1F1B)"
                         : "model chunks per pipeline rank: the interleaved 1F1B schedule (default 1: plain 1F1B)");
    d.add_options()("cp", po::value<int>(), info ? "context-parallel ranks (info: default 1)"
                                                 : "context-parallel ranks: each sequence split over them (default 1)");
  }
  if (info || command == "plan") return;  // no collectives: nothing runs on ranks
  d.add_options()("collective-timeout", po::value<double>(),
                  command == "serve"
                      ? "seconds a rank waits in one collective of a step before reporting it (default 300, 0: forever)"
                      : "seconds a rank waits in one collective before reporting it (default 300, 0: forever)");
}

LayoutOptions read_layout_options(const po::variables_map& vm, const std::string& command) {
  LayoutOptions l;
  const std::pair<const char*, int*> axes[] = {
      {"tp", &l.tp}, {"pp", &l.pp}, {"dp", &l.dp}, {"pp-virtual", &l.pp_virtual}, {"cp", &l.cp}};
  for (const auto& [axis, field] : axes) {
    if (!vm.count(axis)) continue;
    *field = vm[axis].as<int>();
    if (*field < 1) OLMO2_THROW(UsageError, "--", axis, " must be at least 1, got ", *field);
    l.given = true;
  }
  l.pp_virtual_given = vm.count("pp-virtual") > 0;
  if (vm.count("pp-layers")) {
    l.pp_layers = parse_layer_list(vm["pp-layers"].as<std::string>(), "pp-layers");
    if (!vm.count("pp")) l.pp = static_cast<int>(l.pp_layers.size());
    l.given = true;
  }
  if (command == "serve" && l.dp > 1) {
    OLMO2_THROW(UsageError, "serve: --dp is not supported (run one server per replica)");
  }
  if (vm.count("collective-timeout")) l.collective_timeout = vm["collective-timeout"].as<double>();
  if (!(l.collective_timeout >= 0)) {
    OLMO2_THROW(UsageError, "--collective-timeout must be at least 0 seconds, got ", l.collective_timeout);
  }
  return l;
}

}  // namespace olmo2
