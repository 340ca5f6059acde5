"""An OpenAI-compatible /v1/embeddings endpoint on loopback backed by an index's own embedder,
so that GraphRAG and LightRAG embed questions with the model that embedded our export.

    python -m graphwright.exports.embed_server --index DIR [--port 8091]
    python -m graphwright.exports.embed_server --index DIR -- COMMAND [ARGS...]

The second form serves on a free port for as long as COMMAND runs, tells it where (the
variables an export's `.env` names, which the engines let the environment override) and exits
with its status: `... -- graphrag query --root DIR/exports/graphrag/v1 "question"`.
"""

from __future__ import annotations

import argparse
import json
import threading
from http.server import BaseHTTPRequestHandler

from graphwright.util.loopback import LoopbackServer


class EmbeddingServer(LoopbackServer):
    def __init__(self, embedder, model: str, host: str = "127.0.0.1", port: int = 0):
        self.embedder, self.model = embedder, model
        self.lock = threading.Lock()  # one encode at a time: the model is not shared safely between threads
        super().__init__(self._handler(), host, port)

    @classmethod
    def for_index(cls, index_dir: str, version: int | None = None, **kwargs) -> EmbeddingServer:
        from graphwright.engines.embed import make_embedder
        from graphwright.storage.delta import IndexStore
        from graphwright.storage.manifest import PublishedIndex

        index = PublishedIndex(IndexStore(index_dir), version)
        return cls(make_embedder(index.config.embed), index.manifest["embedding_model"], **kwargs)

    def embed(self, texts: list[str]) -> list[list[float]]:
        with self.lock:
            return self.embedder.encode(texts).tolist()

    def _handler(self):
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def _send(self, status: int, body: dict):
                payload = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def do_GET(self):
                if self.path.rstrip("/").endswith("/models"):
                    return self._send(200, {"object": "list", "data": [{"id": outer.model, "object": "model"}]})
                self._send(404, {"error": {"message": f"no route {self.path}"}})

            def do_POST(self):
                if not self.path.rstrip("/").endswith("/embeddings"):
                    return self._send(404, {"error": {"message": f"no route {self.path}"}})
                try:
                    body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
                    texts = body["input"]
                    texts = [texts] if isinstance(texts, str) else list(texts)
                    if not all(isinstance(t, str) for t in texts):
                        raise ValueError("input must be text (token arrays are not supported)")
                except (ValueError, KeyError, TypeError) as exc:
                    return self._send(400, {"error": {"message": str(exc)}})
                vectors = outer.embed(texts)
                if body.get("encoding_format") == "base64":
                    import base64

                    import numpy as np

                    data = [base64.b64encode(np.asarray(v, np.float32).tobytes()).decode() for v in vectors]
                else:
                    data = vectors
                tokens = sum(len(t.split()) for t in texts)
                self._send(200, {"object": "list", "model": outer.model,
                                 "data": [{"object": "embedding", "index": i, "embedding": v} for i, v in enumerate(data)],
                                 "usage": {"prompt_tokens": tokens, "total_tokens": tokens}})

        return Handler


def run_command(server: EmbeddingServer, command: list[str]) -> int:
    """Run `command` with the export variables pointing at `server`; its exit status."""
    import os
    import signal
    import subprocess

    from graphwright.exports.endpoints import EMBEDDING_URL_VARIABLES

    env = {**os.environ, **{name: server.base_url for name in EMBEDDING_URL_VARIABLES}}
    try:
        child = subprocess.Popen(command, env=env)
    except FileNotFoundError:
        raise SystemExit(f"embed_server: no such command {command[0]!r} (is the engine's venv on PATH?)") from None
    # a stop asked of us is passed on to the command (a server run under us), which then ends us
    forward = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, lambda *_: child.terminate()) if forward else None
    try:
        return child.wait()
    except KeyboardInterrupt:
        child.terminate()
        return child.wait()
    finally:
        if forward:
            signal.signal(signal.SIGTERM, previous)


def main(argv: list[str] | None = None) -> int:
    import sys

    argv = sys.argv[1:] if argv is None else argv
    command = argv[argv.index("--") + 1:] if "--" in argv else []
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--index", required=True)
    parser.add_argument("--version", type=int)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, help="default 8091; a free one when running a command")
    args = parser.parse_args(argv[:argv.index("--")] if "--" in argv else argv)
    if "--" in argv and not command:
        parser.error("give a command after --")
    from graphwright.exports.endpoints import EMBED_SERVER_PORT

    port = args.port if args.port is not None else (0 if command else EMBED_SERVER_PORT)
    with EmbeddingServer.for_index(args.index, args.version, host=args.host, port=port) as server:
        if command:
            return run_command(server, command)
        import time

        print(f"embeddings ({server.model}) on {server.base_url}", flush=True)
        while True:  # pragma: no cover
            time.sleep(3600)


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
