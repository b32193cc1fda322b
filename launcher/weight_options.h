// `--weights auto|int8|int4` and `--weight-group N` of generate, trace and serve: the
// weights quantized at load (docs/architecture.md §3.2 "Quantized weights"; guides:
// docs/guides/serving.md, docs/guides/generation.md).
#pragma once

#include <optional>

#include <boost/program_options.hpp>

#include "ops/device.h"
#include "runtime/model/quantized_weights.h"

namespace olmo2 {

/// Adds --weights and --weight-group (also accepted in an INI --config file; both are
/// job options, so every rank of a job must be given the same).
void add_weight_options(boost::program_options::options_description& d);

/// Reads them: nullopt for --weights auto (the default: the checkpoint's weights in the
/// precision's dtype), else the format and its group (--weight-group; 0 when not given:
/// the model's default_quant_group, resolved at load). Throws UsageError naming the value for a --weights other than
/// auto, int8 and int4; a --weight-group that is not one of the format's
/// (check_quantization's rule) or given without a quantized --weights; and, with `device`
/// cuda, the one line "quantized weights run on the CPU only; the GPU path does not have
/// them yet" — before MPI starts or anything is read.
std::optional<WeightQuantization> read_weight_options(const boost::program_options::variables_map& vm,
                                                      Device device);

}  // namespace olmo2
