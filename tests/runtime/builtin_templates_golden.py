#!/usr/bin/env python3
"""Regenerates tests/data/chat/builtin_templates.json: what llama-server (llama.cpp's own C++
formatter, llama_chat_apply_template) renders for each built-in chat template name, for a few
conversations, through POST /apply-template with --no-jinja --chat-template NAME.

    tests/runtime/builtin_templates_golden.py PATH/TO/llama-server [okapi]

With a second argument (an okapi binary) it renders the same with `okapi serve` and prints the
differences instead of writing the file."""
import json, os, subprocess, sys, time, urllib.request

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MODEL = os.path.join(REPO, "models", "stories260K.gguf")
OUT = os.path.join(REPO, "tests", "data", "chat", "builtin_templates.json")

CONVERSATIONS = [
    {"messages": [{"role": "system", "content": "You are a helpful assistant"}, {"role": "user", "content": "Hello"},
                  {"role": "assistant", "content": "Hi there"}, {"role": "user", "content": "How are you?"}],
     "add_generation_prompt": True},
    {"messages": [{"role": "user", "content": "  padded <b>text</b>\n"}, {"role": "assistant", "content": " yes \n"},
                  {"role": "user", "content": [{"type": "text", "text": "two"}, {"type": "text", "text": "parts"}]}],
     "add_generation_prompt": False},
    {"messages": [{"role": "system", "content": "S1"}, {"role": "system", "content": " S2 "},
                  {"role": "user", "content": "q"}, {"role": "tool", "content": "result"},
                  {"role": "assistant", "content": "a"}, {"role": "user", "content": "again"}],
     "add_generation_prompt": True},
]

NAMES = ["chatml", "llama2", "llama2-sys", "llama2-sys-bos", "llama2-sys-strip", "mistral-v1", "mistral-v3",
         "mistral-v3-tekken", "mistral-v7", "mistral-v7-tekken", "phi3", "phi4", "falcon3", "zephyr", "monarch",
         "gemma", "orion", "openchat", "vicuna", "vicuna-orca", "deepseek", "deepseek2", "deepseek3", "deepseek-ocr",
         "command-r", "llama3", "chatglm3", "chatglm4", "glmedge", "minicpm", "exaone3", "exaone4", "exaone-moe",
         "rwkv-world", "granite", "granite-4.0", "granite-4.1", "gigachat", "megrez", "yandex", "bailing",
         "bailing-think", "bailing2", "llama4", "smolvlm", "hunyuan-moe", "gpt-oss", "hunyuan-dense", "hunyuan-vl",
         "kimi-k2", "seed_oss", "grok-2", "pangu-embedded", "solar-open"]


def render(argv, port):
    proc = subprocess.Popen(argv + ["--port", str(port), "--host", "127.0.0.1"], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        for _ in range(200):
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1)
                break
            except Exception:
                time.sleep(0.05)
        out = []
        for conv in CONVERSATIONS:
            req = urllib.request.Request(f"http://127.0.0.1:{port}/apply-template", json.dumps(conv).encode(),
                                         {"Content-Type": "application/json"})
            out.append(json.load(urllib.request.urlopen(req, timeout=10))["prompt"])
        return out
    finally:
        proc.terminate()
        proc.wait()


def main():
    peer = sys.argv[1]
    okapi = sys.argv[2] if len(sys.argv) > 2 else None
    port = 29070
    if okapi:
        golden = json.load(open(OUT))
        bad = 0
        for name in NAMES:
            got = render([okapi, "serve", "-m", MODEL, "-c", "256", "--no-jinja", "--chat-template", name], port)
            for i, (want, have) in enumerate(zip(golden["prompts"][name], got)):
                if want != have:
                    bad += 1
                    print(f"{name} #{i}:\n  llama-server {want!r}\n  okapi        {have!r}")
        print(f"{bad} differences")
        return 1 if bad else 0
    prompts = {name: render([peer, "-m", MODEL, "-c", "256", "--no-jinja", "--chat-template", name], port)
               for name in NAMES}
    json.dump({"generated_by": "tests/runtime/builtin_templates_golden.py (llama-server de3ff81)",
               "conversations": CONVERSATIONS, "prompts": prompts}, open(OUT, "w"), ensure_ascii=False, indent=1)
    return 0


sys.exit(main())
