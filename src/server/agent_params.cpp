#include "server/agent_params.hpp"

#include "server/api_error.hpp"

namespace okapi::server {
namespace {

const Json* present(const Json& body, const char* key) {
  const auto it = body.find(key);
  return it == body.end() || it->is_null() ? nullptr : &*it;
}

// OpenAI tools: [{"type": "function", "function": {"name", "description"?, "parameters"?}}].
Json parse_tools(const Json& tools) {
  if (!tools.is_array()) throw_bad_request("tools", "'tools' must be an array");
  for (size_t i = 0; i < tools.size(); ++i) {
    const Json& t = tools[i];
    const std::string where = fmt::format("tools[{}]", i);
    if (!t.is_object()) throw_bad_request(where, "'{}' must be an object", where);
    const auto type = t.find("type");
    if (type != t.end() && !(type->is_string() && type->get<std::string>() == "function"))
      throw_bad_request(where + ".type", "'{}.type' must be \"function\"", where);
    const auto fn = t.find("function");
    if (fn == t.end() || !fn->is_object()) throw_bad_request(where + ".function", "'{}.function' must be an object", where);
    const auto name = fn->find("name");
    if (name == fn->end() || !name->is_string() || name->get_ref<const std::string&>().empty())
      throw_bad_request(where + ".function.name", "'{}.function.name' must be a non-empty string", where);
    const auto params = fn->find("parameters");
    if (params != fn->end() && !params->is_null() && !params->is_object() && !params->is_boolean())
      throw_bad_request(where + ".function.parameters", "'{}.function.parameters' must be a JSON Schema object", where);
  }
  return tools;
}

bool has_tool(const Json& tools, const std::string& name) {
  if (!tools.is_array()) return false;
  for (const auto& t : tools)
    if (t["function"]["name"] == name) return true;
  return false;
}

}  // namespace

AgentParams parse_agent_params(const Json& body, bool chat, chat::ReasoningFormat default_format) {
  AgentParams p;
  p.chat.reasoning_format = default_format;
  if (chat) {
    if (const Json* tools = present(body, "tools")) p.chat.tools = parse_tools(*tools);
    if (p.chat.tools.is_array() && p.chat.tools.empty()) p.chat.tools = nullptr;  // [] is no tools
    if (const Json* choice = present(body, "tool_choice")) {
      if (choice->is_string()) {
        const auto& c = choice->get_ref<const std::string&>();
        if (c == "none") p.chat.tool_choice = chat::ToolChoice::None;
        else if (c == "auto") p.chat.tool_choice = chat::ToolChoice::Auto;
        else if (c == "required") p.chat.tool_choice = chat::ToolChoice::Required;
        else throw_bad_request("tool_choice", "'tool_choice' must be \"none\", \"auto\", \"required\" or a function, got \"{}\"", c);
      } else if (choice->is_object()) {
        const auto fn = choice->find("function");
        if (fn == choice->end() || !fn->is_object() || !fn->contains("name") || !(*fn)["name"].is_string())
          throw_bad_request("tool_choice", "'tool_choice' must name a function: {{\"type\": \"function\", \"function\": {{\"name\": ...}}}}");
        p.chat.tool_choice = chat::ToolChoice::Named;
        p.chat.tool_name = (*fn)["name"].get<std::string>();
        if (!has_tool(p.chat.tools, p.chat.tool_name))
          throw_bad_request("tool_choice", "'tool_choice' names the function '{}', which is not among the tools", p.chat.tool_name);
      } else {
        throw_bad_request("tool_choice", "'tool_choice' must be a string or an object");
      }
      if (p.chat.tools.is_null() && (p.chat.tool_choice == chat::ToolChoice::Required))
        throw_bad_request("tool_choice", "'tool_choice' is \"required\" but no tools were given");
    }
    p.chat.parallel_tool_calls = bool_field(body, "parallel_tool_calls", false);
    if (const Json* format = present(body, "reasoning_format")) {
      if (!format->is_string()) throw_bad_request("reasoning_format", "'reasoning_format' must be a string");
      try {
        p.chat.reasoning_format = chat::parse_reasoning_format(format->get_ref<const std::string&>());
      } catch (const Error& e) {
        throw_bad_request("reasoning_format", "'reasoning_format': {}", e.what());
      }
    }
    for (const char* key : {"reasoning_budget_tokens", "thinking_budget_tokens"}) {
      if (present(body, key)) {
        p.reasoning_budget = integer_field(body, key, -1, -1, int64_t{1} << 30);
        p.budget_given = p.reasoning_budget >= 0;
        break;
      }
    }
  }
  // The output constraint: one of grammar, json_schema, response_format.
  const auto take = [&](const char* field) {
    if (!p.constraint_field.empty())
      throw_bad_request(field, "'{}' and '{}' both constrain the output: give one of them", p.constraint_field, field);
    p.constraint_field = field;
  };
  if (const Json* grammar = present(body, "grammar")) {
    if (!grammar->is_string()) throw_bad_request("grammar", "'grammar' must be a string of GBNF");
    if (!grammar->get_ref<const std::string&>().empty()) {
      take("grammar");
      p.chat.grammar = grammar->get<std::string>();
    }
  }
  if (const Json* schema = present(body, "json_schema")) {
    if (!schema->is_object() && !schema->is_boolean()) throw_bad_request("json_schema", "'json_schema' must be a JSON Schema object");
    take("json_schema");
    p.chat.json_schema = *schema;
  }
  if (const Json* format = present(body, "response_format")) {
    if (!format->is_object()) throw_bad_request("response_format", "'response_format' must be an object");
    const auto type = format->find("type");
    if (type == format->end() || !type->is_string())
      throw_bad_request("response_format.type", "'response_format.type' must be \"text\", \"json_object\" or \"json_schema\"");
    const auto& t = type->get_ref<const std::string&>();
    if (t == "json_object") {
      take("response_format");
      // llama-server also takes a schema here.
      const auto schema = format->find("schema");
      if (schema != format->end() && !schema->is_null()) {
        if (!schema->is_object()) throw_bad_request("response_format.schema", "'response_format.schema' must be an object");
        p.chat.json_schema = *schema;
      } else {
        p.chat.json_object = true;
      }
    } else if (t == "json_schema") {
      take("response_format");
      const auto js = format->find("json_schema");
      if (js == format->end() || !js->is_object())
        throw_bad_request("response_format.json_schema", "'response_format.json_schema' must be an object with a 'schema'");
      const auto schema = js->find("schema");
      if (schema == js->end() || !(schema->is_object() || schema->is_boolean()))
        throw_bad_request("response_format.json_schema.schema", "'response_format.json_schema.schema' must be a JSON Schema object");
      p.chat.json_schema = *schema;
      const auto strict = js->find("strict");
      if (strict != js->end() && !strict->is_null() && !strict->is_boolean())
        throw_bad_request("response_format.json_schema.strict", "'response_format.json_schema.strict' must be a boolean");
    } else if (t != "text") {
      throw_bad_request("response_format.type", "'response_format.type' must be \"text\", \"json_object\" or \"json_schema\", got \"{}\"", t);
    }
  }
  return p;
}

}  // namespace okapi::server
