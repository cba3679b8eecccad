#!/usr/bin/env python3
"""Writes cases.json: chat prompts with chat_template_kwargs (and the top-level
reasoning_effort) as the reference engine renders them — llama.cpp's llama-server
/apply-template (build 11669 through ../shared/tools/peer.sh, --jinja, each template by
--chat-template-file, stories260K's vocabulary). tests/unit/tokenizer_template_kwargs_test.cc
renders each case with pdserve's JinjaChatTemplate and compares byte for byte.

Run from the repo root, after `../shared/tools/peer.sh --setup`:
    python3 tests/data/chat_kwargs/make_refs.py
"""
import datetime
import json
import subprocess
import time
import urllib.request

PORT = 18962
TEMPLATES = {
    "Qwen-Qwen3-0.6B": [{"enable_thinking": False}, {"enable_thinking": True}, {}],
    "HuggingFaceTB-SmolLM3-3B": [{"enable_thinking": False}, {"enable_thinking": True}],
    "ibm-granite-granite-3.3-2B-Instruct": [{"thinking": True}, {"thinking": False}],
    "openai-gpt-oss-120b": [{"reasoning_effort": "high"}, {"reasoning_effort": "low"}, {"top_level": "low"}, {}],
}
CONVERSATIONS = [
    [{"role": "user", "content": "Hi"}],
    [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "What is 2+2?"},
     {"role": "assistant", "content": "4"}, {"role": "user", "content": "And 3+3?"}],
]


def post(body):
    req = urllib.request.Request(f"http://127.0.0.1:{PORT}/apply-template", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req) as r:
        return json.load(r)["prompt"]


def main():
    cases = []
    for name, kwargs_list in TEMPLATES.items():
        p = subprocess.Popen(["../shared/tools/peer.sh", "llama-server", "-m", "../shared/models/stories260K.gguf",
                              "--port", str(PORT), "-t", "1", "-c", "512", "-np", "1", "--no-webui", "--jinja",
                              "--chat-template-file", f"../shared/templates/{name}.jinja"],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            for _ in range(120):
                try:
                    urllib.request.urlopen(f"http://127.0.0.1:{PORT}/health")
                    break
                except Exception:
                    time.sleep(0.25)
            for kw in kwargs_list:
                for conv in CONVERSATIONS:
                    body = {"messages": conv, "add_generation_prompt": True}
                    case = {"template": name, "messages": conv}
                    if "top_level" in kw:
                        body["reasoning_effort"] = case["reasoning_effort"] = kw["top_level"]
                    else:
                        body["chat_template_kwargs"] = case["chat_template_kwargs"] = kw
                    case["prompt"] = post(body)
                    cases.append(case)
        finally:
            p.terminate()
            p.wait()
    out = {
        "engine": "llama.cpp build 11669 (Debian sid llama.cpp-tools 0.7.0) llama-server --jinja /apply-template",
        "model": "stories260K.gguf (its bos/eos texts)",
        "render_date_utc": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d"),
        "cases": cases,
    }
    with open("tests/data/chat_kwargs/cases.json", "w") as f:
        json.dump(out, f, indent=1, ensure_ascii=False)
        f.write("\n")
    print(len(cases), "cases")


if __name__ == "__main__":
    main()
