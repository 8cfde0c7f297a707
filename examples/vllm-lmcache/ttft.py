"""Sends one streamed completion to a vLLM server; prints the time to first token (s).
Usage: python ttft.py PORT PROMPT_FILE"""
import json
import sys
import time
import urllib.request

port, prompt = sys.argv[1], open(sys.argv[2]).read()
body = json.dumps({"model": "tiny-llama", "prompt": prompt, "max_tokens": 8,
                   "temperature": 0, "stream": True}).encode()
req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/completions", data=body,
                             headers={"Content-Type": "application/json"})
t0 = time.perf_counter()
with urllib.request.urlopen(req, timeout=600) as r:
    for line in r:
        if line.startswith(b"data: ") and b"[DONE]" not in line:
            print(f"{time.perf_counter() - t0:.3f}")
            break
