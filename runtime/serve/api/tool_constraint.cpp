// compile_tool_schema (tool_fields.h): tool_choice "required" and a named function
// constrain the output with the constraint engine (docs/architecture.md §8, "Structured
// outputs" and "Tool calls"), compiled once per distinct schema through the process's
// grammar cache (the key is the one a guided_json of the same schema and options gets).
#include "runtime/serve/api/api_error.h"
#include "runtime/serve/api/grammar_cache.h"
#include "runtime/serve/api/tool_fields.h"

namespace olmo2 {

std::shared_ptr<const structured::Grammar> compile_tool_schema(const std::string& schema,
                                                               const structured::JsonSchemaOptions& options) {
  std::string key = "schema";
  key += options.whitespace == structured::JsonSchemaOptions::Whitespace::Compact ? " compact" : " any";
  key += " " + std::to_string(options.max_whitespace) + (options.additional_properties_default ? " ap" : " noap");
  key += "\n" + schema;
  try {
    return grammar_cache().get(key, [&] { return structured::json_schema_to_grammar(schema, options); });
  } catch (const structured::ConstraintError& e) {
    const std::string where = e.path().empty() ? "" : " (at " + e.path() + " of the schema the tools make)";
    throw ApiError(400, "tools", std::string("tools: a function's parameters cannot be enforced: ") + e.what() + where);
  } catch (const InputError& e) {
    throw ApiError(400, "tools", std::string("tools: a function's parameters cannot be enforced: ") + e.what());
  }
}

}  // namespace olmo2
