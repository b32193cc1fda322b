// compile_tool_schema (tool_fields.h): tool_choice "required" and a named function
// constrain the output with the constraint engine (docs/architecture.md §8, "Structured
// outputs" and "Tool calls").
#include "runtime/serve/api/api_error.h"
#include "runtime/serve/api/tool_fields.h"

namespace olmo2 {

std::shared_ptr<const structured::Grammar> compile_tool_schema(const std::string&) {
  throw ApiError(400, "tool_choice",
                 "tool_choice \"required\" and a named function need the constraint engine, which this build lacks");
}

}  // namespace olmo2
