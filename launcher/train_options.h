// The options of `olmo2 train` (docs/architecture.md §12): declared for Boost.Program_options and
// read back into runtime::TrainOptions.
#pragma once

#include <boost/program_options.hpp>

#include "runtime/train/trainer.h"

namespace olmo2 {

/// Adds the options of `olmo2 train` alone (the same keys work in an INI --config file);
/// its layout and device options are add_layout_options' and add_device_options'.
void add_train_options(boost::program_options::options_description& d);

/// Reads the parsed options into TrainOptions and validates them (runtime validate()).
/// Throws UsageError naming the option for a malformed value (e.g. --debug-scale-loss
/// not STEP:FACTOR), InputError from validate() for inconsistent values.
TrainOptions read_train_options(const boost::program_options::variables_map& vm);

}  // namespace olmo2
