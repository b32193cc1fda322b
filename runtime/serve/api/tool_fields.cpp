// read_tool_fields (tool_fields.h). The field rules are OpenAI's chat completions
// reference (function names ^[a-zA-Z0-9_-]{1,64}$, tool_choice's forms and default);
// the schemas for "required" and a named function are vLLM's (docs/architecture.md §8,
// "Tool calls").
#include "runtime/serve/api/tool_fields.h"

#include <algorithm>
#include <set>

#include "runtime/serve/api/api_error.h"

namespace olmo2 {

using nlohmann::json;
using ordered = nlohmann::ordered_json;

namespace {

bool valid_name(const std::string& name) {
  if (name.empty() || name.size() > 64) return false;
  for (const char c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-';
    if (!ok) return false;
  }
  return true;
}

// Checks tools[i] and returns its function's name.
std::string check_tool(const json& tool, const std::string& at) {
  if (!tool.is_object()) throw ApiError(400, at, at + " must be an object {\"type\": \"function\", \"function\": {…}}, got " + brief(tool));
  Fields tf(tool, at);
  const json* type = tf.get("type");
  if (!type || *type != "function") {
    tf.fail("type", at + ".type must be \"function\", got " + (type ? brief(*type) : std::string("nothing")));
  }
  const json* fn = tf.get("function");
  if (!fn || !fn->is_object()) tf.fail("function", at + ".function must be an object {name, description, parameters}");
  tf.refuse_unread();
  const std::string fat = at + ".function";
  Fields ff(*fn, fat);
  const json* name = ff.get("name");
  if (!name || !name->is_string() || !valid_name(name->get<std::string>())) {
    ff.fail("name", fat + ".name must be 1 to 64 characters of a-z, A-Z, 0-9, _ and -, got " +
                        (name ? brief(*name) : std::string("nothing")));
  }
  const json* description = ff.get("description");
  if (description && !description->is_string()) ff.fail("description", fat + ".description must be a string");
  const json* parameters = ff.get("parameters");
  if (parameters) {
    if (!parameters->is_object()) ff.fail("parameters", fat + ".parameters must be a JSON Schema object, got " + brief(*parameters));
    if (parameters->contains("type") && (*parameters)["type"] != "object") {
      ff.fail("parameters", fat + ".parameters must describe an object (\"type\": \"object\"), got type " +
                                brief((*parameters)["type"]));
    }
  }
  ff.boolean("strict", false);
  ff.refuse_unread();
  return name->get<std::string>();
}

ordered parameters_of(const ordered& tool) {
  const ordered& fn = tool["function"];
  if (fn.contains("parameters") && !fn["parameters"].is_null()) return fn["parameters"];
  return ordered{{"type", "object"}, {"properties", ordered::object()}};
}

}  // namespace

ToolFields read_tool_fields(Fields& f, const ordered& ordered_tools, const ChatToolSupport& support) {
  ToolFields out;
  const json* tools = f.get("tools");
  std::vector<std::string> names;
  if (tools) {
    if (!tools->is_array()) f.fail("tools", "tools must be a list of {\"type\": \"function\", \"function\": {…}}, got " + brief(*tools));
    std::set<std::string> seen;
    for (size_t i = 0; i < tools->size(); ++i) {
      const std::string at = "tools[" + std::to_string(i) + "]";
      const std::string name = check_tool((*tools)[i], at);
      if (!seen.insert(name).second) {
        throw ApiError(400, at + ".function.name", at + ".function.name: the function '" + name + "' is defined twice");
      }
      names.push_back(name);
    }
  }
  const bool have_tools = !names.empty();
  if (have_tools && !support.template_takes_tools) {
    f.fail("tools", "this model's chat template does not take tools (it never reads a `tools` variable); "
                    "start the server with a --chat-template that does");
  }
  out.plan.parallel_tool_calls = f.boolean("parallel_tool_calls", true);
  const json* choice = f.get("tool_choice");
  ToolPlan::Mode mode = have_tools ? ToolPlan::Mode::Auto : ToolPlan::Mode::None;
  if (choice && choice->is_string()) {
    const std::string c = choice->get<std::string>();
    if (c == "none") mode = ToolPlan::Mode::None;
    else if (c == "auto") mode = ToolPlan::Mode::Auto;
    else if (c == "required") mode = ToolPlan::Mode::Required;
    else f.fail("tool_choice", "tool_choice must be \"none\", \"auto\", \"required\" or {\"type\": \"function\", "
                               "\"function\": {\"name\": …}}, got " + brief(*choice));
  } else if (choice) {
    if (!choice->is_object()) f.fail("tool_choice", "tool_choice must be a string or an object, got " + brief(*choice));
    Fields cf(*choice, "tool_choice");
    const json* type = cf.get("type");
    if (!type || *type != "function") cf.fail("type", "tool_choice.type must be \"function\", got " + (type ? brief(*type) : std::string("nothing")));
    const json* fn = cf.get("function");
    if (!fn || !fn->is_object()) cf.fail("function", "tool_choice.function must be an object {\"name\": …}");
    cf.refuse_unread();
    Fields nf(*fn, "tool_choice.function");
    const json* name = nf.get("name");
    if (!name || !name->is_string()) nf.fail("name", "tool_choice.function.name must be a string");
    nf.refuse_unread();
    out.plan.function = name->get<std::string>();
    if (have_tools && std::find(names.begin(), names.end(), out.plan.function) == names.end()) {
      nf.fail("name", "tool_choice.function.name '" + out.plan.function + "' is not one of the tools");
    }
    mode = ToolPlan::Mode::Named;
  }
  if (mode != ToolPlan::Mode::None && !have_tools) {
    f.fail("tool_choice", "tool_choice " + brief(*choice) + " needs tools (a non-empty list of functions)");
  }
  out.plan.mode = mode;
  if (!have_tools) return out;
  out.tools = ordered_tools;
  if (mode == ToolPlan::Mode::Auto) out.plan.format = support.format;
  if (mode == ToolPlan::Mode::Named) {
    for (const ordered& t : ordered_tools) {
      if (t["function"]["name"] == out.plan.function) out.schema = parameters_of(t).dump();
    }
  } else if (mode == ToolPlan::Mode::Required) {
    ordered any = ordered::array();
    for (const ordered& t : ordered_tools) {
      any.push_back({{"type", "object"},
                     {"properties", {{"name", {{"type", "string"}, {"enum", ordered::array({t["function"]["name"]})}}},
                                     {"parameters", parameters_of(t)}}},
                     {"required", ordered::array({"name", "parameters"})}});
    }
    ordered schema = {{"type", "array"}, {"minItems", 1}};
    if (!out.plan.parallel_tool_calls) schema["maxItems"] = 1;
    schema["items"] = {{"anyOf", any}};
    out.schema = schema.dump();
  }
  return out;
}

}  // namespace olmo2
