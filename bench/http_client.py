"""What one LLM request costs the client, side by side in one invocation: graphwright's `openai`
engine (a urllib3 pool), the same requests through a `requests` Session per thread (what the
engine used before), and urllib3 alone, against bench/llm_stub.py with extraction prompts of the
generated corpus's size. Prints wall time and the client process's CPU per request; the stub
runs in its own process, so its CPU is not counted.

    python bench/http_client.py [--requests 3000] [--concurrency 16] [--rounds 2]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import threading
import time
from pathlib import Path

import requests
import urllib3
from _ports import free_port, wait_listening

from graphwright.config import LLMConfig
from graphwright.engines.llm.interface import LLMRequest
from graphwright.engines.llm.openai_engine import OpenAIEngine, chat_body

HERE = Path(__file__).resolve().parent
PASSAGE = ("Ebenezer Scrooge met Jacob Marley at the Royal Institute in London, where Bob Cratchit kept the books "
           "of Fezziwig Holdings. ") * 12  # about a 300-token chunk


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--requests", type=int, default=3000)
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    port = free_port()
    stub = subprocess.Popen([sys.executable, str(HERE / "llm_stub.py"), str(port)], stdout=subprocess.DEVNULL)
    try:
        wait_listening(port)
        config = LLMConfig(model="stub", base_url=f"http://127.0.0.1:{port}/v1", api_key_env=None, concurrency=args.concurrency)
        asks = [LLMRequest(messages=(("system", "You extract entities."), ("user", f"{i} {PASSAGE}")), json_schema={"type": "object"})
                for i in range(args.requests)]
        engine = OpenAIEngine(config)
        url = config.base_url + "/chat/completions"
        local = threading.local()

        def with_requests(request: LLMRequest):
            if not hasattr(local, "session"):
                local.session = requests.Session()
            reply = local.session.post(url, json=chat_body(request, config), headers={"Content-Type": "application/json"},
                                       timeout=60, stream=True)
            return json.loads(b"".join(reply.iter_content(1 << 16)))

        pool = urllib3.PoolManager(maxsize=args.concurrency, retries=False)

        def with_urllib3(request: LLMRequest):
            reply = pool.request("POST", url, body=json.dumps(chat_body(request, config)).encode(),
                                 headers={"Content-Type": "application/json"}, preload_content=False)
            try:
                return json.loads(reply.read())
            finally:
                reply.release_conn()

        ways = {"graphwright openai engine": engine.complete,
                "requests Session per thread": lambda batch: engine.client.map(with_requests, batch),
                "urllib3 pool alone": lambda batch: engine.client.map(with_urllib3, batch)}
        for way in ways.values():
            way(asks[:100])  # connections opened, threads started
        print(f"{args.requests} extraction requests, {args.concurrency} in flight, llm_stub on loopback")
        for r in range(args.rounds):
            for name, way in ways.items():
                wall, cpu = time.perf_counter(), time.process_time()
                way(asks)
                wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
                print(f"  round {r + 1}  {name:28s} {wall:6.2f} s wall  {args.requests / wall:7.0f} req/s  "
                      f"client CPU {1000 * cpu / args.requests:5.2f} ms/request", flush=True)
        engine.close()
    finally:
        stub.terminate()
        stub.wait(timeout=30)


if __name__ == "__main__":
    main()
