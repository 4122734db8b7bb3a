#!/usr/bin/env python3
"""Real chat templates over many conversations, okapi against Python's Jinja2 itself.

Renders every *.jinja template found in the given directories (deduplicated by file name, the
first directory wins) over the conversations of ../shared/templates/cases.json plus tool-call
conversations (arguments as objects and as JSON strings, content null, parallel calls, tool
results, reasoning_content, names and descriptions with HTML-special characters, chat template
kwargs), with Jinja2 configured as Hugging Face transformers configures it and with okapi (the
render_template helper), and counts the renderings that differ.

usage: template_sweep_oracle.py RENDER_TEMPLATE_BINARY CASES_JSON [--verbose] DIR...
Exit 0: all agree; 1: a mismatch; 77: jinja2, the cases or every template directory missing
(a skip, or a failure under OKAPI_REQUIRE_GOLDEN=1).
"""
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)


def skip(reason):
    required = os.environ.get("OKAPI_REQUIRE_GOLDEN", "") not in ("", "0")
    print(f"template_sweep_oracle: {reason}", file=sys.stderr)
    sys.exit(1 if required else 77)


try:
    import jinja_oracle  # the Hugging Face environment, shared with the construct-level oracle
except SystemExit:
    raise
except ImportError:
    skip("python3 has no jinja2 (apt-get install python3-jinja2)")

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Weather for a city",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string", "description": "City name"},
        "unit": {"type": "string", "enum": ["c", "f"]},
        "days": {"type": "integer", "minimum": 1},
        "tags": {"type": "array", "items": {"type": "string"}}},
        "required": ["city"]}}}
# HTML-special characters in a tool's name and description: Markup concatenation escapes them.
SEARCH = {"type": "function", "function": {
    "name": "search_<web>", "description": "Search & find 'pages' that say \"x\" <fast>",
    "parameters": {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]}}}


def call(call_id, name, arguments):
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


EXTRA_CONVERSATIONS = [
    ("tool_call_string_args", [WEATHER], {}, [
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": "", "tool_calls": [call("call_1", "get_weather", "{\"city\": \"Paris\"}")]},
        {"role": "tool", "tool_call_id": "call_1", "name": "get_weather", "content": "{\"temp\": 21}"},
        {"role": "assistant", "content": "It is 21 degrees."}]),
    ("tool_call_null_content", [WEATHER], {}, [
        {"role": "system", "content": "You are a weather bot."},
        {"role": "user", "content": "Weather in Paris and Rome, for 3 days?"},
        {"role": "assistant", "content": None, "tool_calls": [
            call("call_1", "get_weather", {"city": "Paris", "days": 3, "tags": ["a", "b"]}),
            call("call_2", "get_weather", {"city": "Rome", "unit": "c", "nested": {"k": [1, 2.5, None, True]}})]},
        {"role": "tool", "tool_call_id": "call_1", "name": "get_weather", "content": "{\"temp\": 21}"},
        {"role": "tool", "tool_call_id": "call_2", "name": "get_weather", "content": "sunny"},
        {"role": "user", "content": "Thanks"}]),
    ("reasoning", [WEATHER], {"enable_thinking": True}, [
        {"role": "user", "content": "What is 2+2?"},
        {"role": "assistant", "content": "4", "reasoning_content": "Two plus two is four."},
        {"role": "user", "content": "And the weather in Oslo?"},
        {"role": "assistant", "content": "", "reasoning_content": "I should call the tool.",
         "tool_calls": [call("call_9", "get_weather", {"city": "Oslo"})]},
        {"role": "tool", "tool_call_id": "call_9", "content": "cold"}]),
    ("thinking_off", None, {"enable_thinking": False}, [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "<think>hmm</think>Hello"},
        {"role": "user", "content": "Bye"}]),
    ("html_special_tools", [SEARCH, WEATHER], {}, [
        {"role": "user", "content": "Find <b>cats</b> & 'dogs'"},
        {"role": "assistant", "content": None, "tool_calls": [call("c<1>", "search_<web>", {"query": "<b>cats</b> & \"dogs\""})]},
        {"role": "tool", "tool_call_id": "c<1>", "name": "search_<web>", "content": "<html>&amp;</html>"}]),
    ("tools_none", None, {"tools": None, "documents": None}, [
        {"role": "user", "content": "Hello"}]),
]


def conversations(cases):
    seen, out = set(), []
    for case in cases:
        if case["conversation"] in seen:
            continue
        seen.add(case["conversation"])
        out.append((case["conversation"], case.get("tools"), {}, case["messages"], case["add_generation_prompt"]))
    for name, tools, extra, messages in EXTRA_CONVERSATIONS:
        out.append((name, tools, extra, messages, True))
    return out


def render(compiled, source, variables):
    if compiled is None:
        return jinja_oracle.render_jinja(source, variables)
    try:
        return {"ok": True, "prompt": compiled.render(**variables)}
    except jinja_oracle.TemplateError as error:
        kind = "raise_exception" if type(error) is jinja_oracle.TemplateError else type(error).__name__
        return {"ok": False, "error": kind, "message": str(error)}
    except Exception as error:
        return {"ok": False, "error": type(error).__name__, "message": str(error)}


def main():
    args = [a for a in sys.argv[1:] if a != "--verbose"]
    verbose = "--verbose" in sys.argv
    if len(args) < 3:
        print(__doc__, file=sys.stderr)
        return 2
    binary, cases_path, dirs = args[0], args[1], args[2:]
    if not os.path.exists(cases_path):
        skip(f"{cases_path} missing")
    templates = {}
    for directory in dirs:
        if not os.path.isdir(directory):
            continue
        for name in sorted(os.listdir(directory)):
            if name.endswith(".jinja") and name not in templates:
                with open(os.path.join(directory, name), encoding="utf-8") as f:
                    templates[name] = f.read()
    if not templates:
        skip("no template directory found: " + ", ".join(dirs))
    with open(cases_path, encoding="utf-8") as f:
        convos = conversations(json.load(f))

    requests, expected, labels = [], [], []
    for name, source in sorted(templates.items()):
        try:
            compiled = jinja_oracle.env.from_string(source)
        except Exception:  # okapi must refuse it too: render_jinja reports it per conversation
            compiled = None
        for convo, tools, extra, messages, add_generation_prompt in convos:
            variables = {"messages": messages, "add_generation_prompt": add_generation_prompt,
                         "bos_token": "<s>", "eos_token": "</s>", **extra}
            request = {"template": source, "messages": messages, "add_generation_prompt": add_generation_prompt,
                       "bos_token": "<s>", "eos_token": "</s>", "extra": extra,
                       "now": int(jinja_oracle.NOW.timestamp())}
            if tools is not None:
                variables["tools"] = tools
                request["tools"] = tools
            requests.append(request)
            expected.append(render(compiled, source, variables))
            labels.append(f"{name} / {convo}")
    result = subprocess.run([binary], input=json.dumps(requests), capture_output=True, text=True)
    if result.returncode != 0:
        print(f"template_sweep_oracle: {binary} failed: {result.stderr}", file=sys.stderr)
        return 1
    actual = json.loads(result.stdout)
    failures = 0
    for label, want, got in zip(labels, expected, actual):
        if want["ok"]:
            same = got["ok"] and got["prompt"] == want["prompt"]
        elif want["error"] == "raise_exception":
            same = not got["ok"] and got["error"] == "raise_exception" and got["message"] == want["message"]
        else:
            same = not got["ok"] and got["error"] != "raise_exception"
        if same:
            continue
        failures += 1
        if want["ok"] and got["ok"]:
            a, b = got["prompt"], want["prompt"]
            at = next((i for i in range(min(len(a), len(b))) if a[i] != b[i]), min(len(a), len(b)))
            detail = f"differs at {at}:\n  okapi:  {a[max(0, at - 40):at + 60]!r}\n  jinja2: {b[max(0, at - 40):at + 60]!r}"
        else:
            detail = f"\n  jinja2: {json.dumps(want)[:300]}\n  okapi:  {json.dumps(got)[:300]}"
        print(f"MISMATCH {label}: {detail}" if verbose or failures <= 40 else f"MISMATCH {label}")
    print(f"template_sweep_oracle: {len(labels) - failures} of {len(labels)} renderings "
          f"({len(templates)} templates x {len(convos)} conversations) agree with Jinja2 {jinja_oracle.jinja2.__version__}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
