"""A loopback fake of the OpenAI Batch API for tests: the files API (upload as multipart with
purpose=batch, retrieve, content) and batches (create, retrieve, list newest first with
after/limit/has_more, cancel), with batch states driven by the test.

A batch is created `validating`; the first retrieve validates its request file as OpenAI does
(each line {custom_id, method: POST, url: the batch's endpoint, body}, custom_ids unique, the
body's keys the openai package's chat-completion parameters, messages with known roles and text
content) and makes it `failed` with the line's error, or `in_progress`. It stays there until the
test calls complete(), fail(), expire() or finish_cancel(), or, with `auto = "complete"`,
completes at once. Answers come from graphwright's CPU stand-in (the same as the
fake chat server's), validated as openai `ChatCompletion`s, written to the output file in reverse
order (so that a reader must join on custom_id); failures go to the error file in OpenAI's two
shapes (an HTTP error response, or error {code, message} with response null)."""

from __future__ import annotations

import json
import threading
import time
from email.parser import BytesParser
from email.policy import HTTP
from http.server import BaseHTTPRequestHandler
from urllib.parse import parse_qs, urlparse

from graphwright.engines.llm import standin
from graphwright.util.loopback import LoopbackServer

TERMINAL = {"completed", "failed", "expired", "cancelled"}
ROLES = {"system", "user", "assistant", "developer", "tool"}


def _allowed_body_keys() -> set[str]:
    from openai.types.chat.completion_create_params import CompletionCreateParamsNonStreaming

    return set(CompletionCreateParamsNonStreaming.__annotations__)


class FakeBatchAPI(LoopbackServer):
    def __init__(self):
        self.lock = threading.Lock()
        self.files: dict[str, dict] = {}
        self.batches: dict[str, dict] = {}
        self.order: list[str] = []  # batch ids, oldest first
        self.creates = 0  # batches created (each one would be paid for)
        self.calls: list[tuple[str, str]] = []  # (method, path)
        self.auto: str | None = None  # "complete": a batch completes once it is validated
        # what happens to the next batches created, in order, once validated (before `auto` applies):
        # ("complete", {"errors": ...}), ("expire", {"answered": n}), ("fail", {}), ("wait", {})
        self.script: list[tuple[str, dict]] = []
        self.actions: dict[str, tuple[str, dict]] = {}
        self.drop_create_reply = 0  # the next N creates succeed but their reply is lost
        self.fail_downloads = 0  # the next N file downloads answer 500
        self.download_gate: threading.Event | None = None  # while set to an Event, downloads wait for it
        self.downloads_waiting = threading.Semaphore(0)
        self._ids = 0
        self.allowed = _allowed_body_keys()
        super().__init__(self._handler())

    # ---- what tests drive ----
    def batch(self, index: int = -1) -> dict:
        return self.batches[self.order[index]]

    def lines(self, batch_id: str) -> list[dict]:
        return [json.loads(x) for x in self.files[self.batches[batch_id]["input_file_id"]]["data"].splitlines()]

    def live(self) -> list[str]:
        return [b for b in self.order if self.batches[b]["status"] not in TERMINAL]

    def complete(self, batch_id: str, errors: dict[int, dict | str] | None = None) -> None:
        """Answer every request; `errors`: line number (0-based) -> an error line's {response,
        error}, or a string to answer with instead of the stand-in's answer."""
        with self.lock:
            self._complete(batch_id, errors)

    def expire(self, batch_id: str, answered: int) -> None:
        """Expire it after answering its first `answered` requests; the rest get batch_expired."""
        with self.lock:
            self._expire(batch_id, answered)

    def finish_cancel(self, batch_id: str, answered: int) -> None:
        with self.lock:
            self._partial(batch_id, "cancelled", answered, "batch_cancelled", "This request was cancelled.")

    def fail(self, batch_id: str, code: str = "token_limit_exceeded", message: str = "Enqueued token limit reached.") -> None:
        with self.lock:
            self._fail(batch_id, code, message)

    def complete_all(self) -> None:
        for batch_id in self.live():
            self.complete(batch_id)

    def _complete(self, batch_id: str, errors: dict | None = None) -> None:
        self._finish(batch_id, "completed", {line["custom_id"] for line in self.lines(batch_id)}, errors or {})

    def _expire(self, batch_id: str, answered: int) -> None:
        self._partial(batch_id, "expired", answered, "batch_expired",
                      "This request could not be executed before the completion window expired.")

    def _partial(self, batch_id: str, status: str, answered: int, code: str, message: str) -> None:
        keys = [line["custom_id"] for line in self.lines(batch_id)]
        self._finish(batch_id, status, set(keys[:answered]), {}, code, message)

    def _fail(self, batch_id: str, code: str, message: str) -> None:
        self.batches[batch_id].update(status="failed", failed_at=int(time.time()),
                                      errors={"object": "list", "data": [{"code": code, "message": message, "param": None, "line": None}]})

    # ---- the API ----
    def _new_id(self, prefix: str) -> str:
        self._ids += 1
        return f"{prefix}-{self._ids:04d}"

    def _file(self, data: bytes, purpose: str, filename: str) -> dict:
        file_id = self._new_id("file")
        self.files[file_id] = {"id": file_id, "object": "file", "bytes": len(data), "created_at": int(time.time()),
                               "filename": filename, "purpose": purpose, "status": "processed", "data": data}
        return self.files[file_id]

    def _validate(self, b: dict) -> str | None:
        seen = set()
        for n, raw in enumerate(self.files[b["input_file_id"]]["data"].splitlines(), 1):
            try:
                line = json.loads(raw)
            except ValueError:
                return f"line {n}: not JSON"
            if set(line) != {"custom_id", "method", "url", "body"}:
                return f"line {n}: fields {sorted(line)}"
            if not isinstance(line["custom_id"], str) or line["custom_id"] in seen:
                return f"line {n}: custom_id missing or repeated"
            seen.add(line["custom_id"])
            if line["method"] != "POST" or line["url"] != b["endpoint"]:
                return f"line {n}: {line['method']} {line['url']} is not POST {b['endpoint']}"
            body = line["body"]
            if not set(body) <= self.allowed or not isinstance(body.get("model"), str):
                return f"line {n}: unknown body fields {sorted(set(body) - self.allowed)}"
            for m in body.get("messages") or [None]:
                if not isinstance(m, dict) or m.get("role") not in ROLES or not isinstance(m.get("content"), str):
                    return f"line {n}: bad message {m!r}"[:200]
        return None

    def _advance(self, b: dict) -> None:
        if b["status"] == "validating":
            problem = self._validate(b)
            if problem:
                b.update(status="failed", failed_at=int(time.time()),
                         errors={"object": "list", "data": [{"code": "invalid_request", "message": problem, "param": None, "line": None}]})
            else:
                b.update(status="in_progress", in_progress_at=int(time.time()))
            if b["status"] == "in_progress" and b["id"] in self.actions:
                action, args = self.actions.pop(b["id"])
                if action == "complete":
                    self._complete(b["id"], **args)
                elif action == "expire":
                    self._expire(b["id"], **args)
                elif action == "fail":
                    self._fail(b["id"], args.get("code", "token_limit_exceeded"), args.get("message", "Enqueued token limit reached."))
                return  # "wait": it stays in progress until the test moves it
        if b["status"] == "in_progress" and self.auto == "complete":
            self._complete(b["id"])

    def _finish(self, batch_id: str, status: str, answered: set[str], errors: dict, code: str = "", message: str = "") -> None:
        from openai.types.chat import ChatCompletion

        b = self.batches[batch_id]
        out, err = [], []
        for n, line in enumerate(self.lines(batch_id)):
            key = line["custom_id"]
            if isinstance(errors.get(n), dict):
                err.append({"id": f"batch_req_{n}", "custom_id": key, **errors[n]})
            elif key in answered:
                content = errors[n] if isinstance(errors.get(n), str) else standin.answer(line["body"]["messages"])
                completion = standin.completion(line["body"], content)
                ChatCompletion.model_validate({**completion, "created": 0})
                out.append({"id": f"batch_req_{n}", "custom_id": key, "error": None,
                            "response": {"status_code": 200, "request_id": f"req_{n}", "body": completion}})
            else:
                err.append({"id": f"batch_req_{n}", "custom_id": key, "response": None, "error": {"code": code, "message": message}})
        dump = lambda rows: "".join(json.dumps(r) + "\n" for r in reversed(rows)).encode()  # noqa: E731
        b["output_file_id"] = self._file(dump(out), "batch_output", "output.jsonl")["id"] if out else None
        b["error_file_id"] = self._file(dump(err), "batch_output", "errors.jsonl")["id"] if err else None
        b["status"] = status
        b[f"{status}_at"] = int(time.time())
        b["request_counts"] = {"total": len(out) + len(err), "completed": len(out), "failed": len(err)}

    def _handler(self):
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def _send(self, status: int, payload, content_type: str = "application/json"):
                data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _public(self, record: dict) -> dict:
                return {k: v for k, v in record.items() if k != "data"}

            def do_GET(self):
                url = urlparse(self.path)
                parts = url.path.strip("/").split("/")  # v1, files|batches, id, content
                fake.calls.append(("GET", url.path))
                if parts[1] == "files" and len(parts) == 4 and parts[3] == "content":
                    with fake.lock:
                        failing = fake.fail_downloads > 0
                        fake.fail_downloads -= failing
                    if failing:
                        return self._send(500, {"error": {"message": "storage hiccup", "type": "server_error"}})
                    if fake.download_gate is not None:
                        fake.downloads_waiting.release()
                        fake.download_gate.wait(30)
                    record = fake.files.get(parts[2])
                    return self._send(200, record["data"], "application/octet-stream") if record else self._not_found()
                if parts[1] == "files" and len(parts) == 3:
                    record = fake.files.get(parts[2])
                    return self._send(200, self._public(record)) if record else self._not_found()
                if parts[1] == "batches" and len(parts) == 3:
                    with fake.lock:
                        b = fake.batches.get(parts[2])
                        if b is None:
                            return self._not_found()
                        fake._advance(b)
                        return self._send(200, b)
                if parts[1] == "batches" and len(parts) == 2:
                    query = parse_qs(url.query)
                    limit = int(query.get("limit", ["20"])[0])
                    newest = list(reversed(fake.order))
                    if "after" in query:
                        newest = newest[newest.index(query["after"][0]) + 1:]
                    page = [fake.batches[b] for b in newest[:limit]]
                    return self._send(200, {"object": "list", "data": page, "first_id": page[0]["id"] if page else None,
                                            "last_id": page[-1]["id"] if page else None, "has_more": len(newest) > limit})
                self._not_found()

            def _not_found(self):
                self._send(404, {"error": {"message": f"no such object: {self.path}", "type": "invalid_request_error",
                                           "param": None, "code": None}})

            def do_POST(self):
                url = urlparse(self.path)
                parts = url.path.strip("/").split("/")
                fake.calls.append(("POST", url.path))
                body = self.rfile.read(int(self.headers["Content-Length"]))
                if parts[1] == "files":
                    message = BytesParser(policy=HTTP).parsebytes(b"Content-Type: " + self.headers["Content-Type"].encode() + b"\r\n\r\n" + body)
                    fields = {p.get_param("name", header="content-disposition"): p for p in message.iter_parts()}
                    if fields["purpose"].get_content() != "batch":
                        return self._send(400, {"error": {"message": "purpose must be batch", "type": "invalid_request_error"}})
                    upload = fields["file"]
                    with fake.lock:
                        record = fake._file(upload.get_payload(decode=True), "batch", upload.get_filename())
                    return self._send(200, self._public(record))
                if parts[1] == "batches" and len(parts) == 2:
                    request = json.loads(body)
                    if request.get("input_file_id") not in fake.files or request.get("completion_window") != "24h":
                        return self._send(400, {"error": {"message": "bad batch request", "type": "invalid_request_error"}})
                    with fake.lock:
                        fake.creates += 1
                        batch_id = fake._new_id("batch")
                        fake.batches[batch_id] = {
                            "id": batch_id, "object": "batch", "endpoint": request["endpoint"], "errors": None,
                            "input_file_id": request["input_file_id"], "completion_window": "24h", "status": "validating",
                            "output_file_id": None, "error_file_id": None, "created_at": int(time.time()),
                            "expires_at": int(time.time()) + 86400, "request_counts": {"total": 0, "completed": 0, "failed": 0},
                            "metadata": request.get("metadata")}
                        fake.order.append(batch_id)
                        if fake.script:
                            fake.actions[batch_id] = fake.script.pop(0)
                        lost = fake.drop_create_reply > 0
                        fake.drop_create_reply -= lost
                    if lost:  # created, but the client never hears so
                        self.close_connection = True
                        self.connection.shutdown(2)
                        return
                    return self._send(200, fake.batches[batch_id])
                if parts[1] == "batches" and len(parts) == 4 and parts[3] == "cancel":
                    with fake.lock:
                        b = fake.batches.get(parts[2])
                        if b is None:
                            return self._not_found()
                        if b["status"] in TERMINAL:
                            return self._send(400, {"error": {"message": f"Cannot cancel a batch with status {b['status']}.",
                                                              "type": "invalid_request_error", "param": None, "code": None}})
                        b.update(status="cancelling", cancelling_at=int(time.time()))
                        return self._send(200, b)
                self._not_found()

        return Handler
