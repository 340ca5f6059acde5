"""What the OpenAI-compatible client does with hostile or unusual transports: replies larger than
`max_response_bytes` (declared, streamed without a length, or compressed), bodies cut off, servers
that do not answer in time, redirects, URLs that are not http(s), and proxies named by the
environment."""

from __future__ import annotations

import base64
import gzip
import json
import threading
from http.server import BaseHTTPRequestHandler

import pytest

from graphwright.config import LLMConfig
from graphwright.engines.llm.interface import LLMRequest
from graphwright.engines.llm.openai_engine import OpenAIEngine
from graphwright.util.loopback import LoopbackServer

OK = json.dumps({"choices": [{"message": {"content": "ok"}}], "usage": {"prompt_tokens": 1, "completion_tokens": 1}}).encode()
LIMIT = 4096


class _Server(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    mode = "ok"
    seen: list[str] = []
    proxy_auth: list[str | None] = []
    compressed = False
    lock = threading.Lock()

    def log_message(self, *args):
        pass

    def _head(self, status: int = 200, **headers):
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        for name, value in headers.items():
            self.send_header(name.replace("_", "-"), value)
        self.end_headers()

    def _gzip(self, body: bytes) -> None:  # compressed only for a client that asks for it
        if "gzip" not in self.headers.get("Accept-Encoding", ""):
            self._head(Content_Length=str(len(body)))
            self.wfile.write(body)
            return
        data = gzip.compress(body)
        self._head(Content_Length=str(len(data)), Content_Encoding="gzip")
        self.wfile.write(data)

    def do_POST(self):
        self.rfile.read(int(self.headers["Content-Length"]))
        if self.path.endswith("/moved"):
            self._head(307, Location=self.path.replace("/moved", "/chat/completions"), Content_Length="0")
            return
        with _Server.lock:
            _Server.seen.append(self.requestline)
            _Server.proxy_auth.append(self.headers.get("Proxy-Authorization"))
            first = len(_Server.seen) == 1
        mode = _Server.mode
        if mode == "declared-large":  # says how large it is: not read at all
            self._head(Content_Length=str(10 * LIMIT))
            try:
                self.wfile.write(b" " * (10 * LIMIT))
            except OSError:
                pass
        elif mode == "streamed-large":  # no length: chunks until it is dropped
            self._head(Transfer_Encoding="chunked")
            try:
                for _ in range(1000):
                    self.wfile.write(b"%x\r\n%s\r\n" % (LIMIT, b" " * LIMIT))
                self.wfile.write(b"0\r\n\r\n")
            except OSError:
                pass  # the client hung up, as it should
            self.close_connection = True
        elif mode == "gzip-bomb":  # small on the wire, far over the limit once inflated
            self._gzip(b" " * (1000 * LIMIT))
        elif mode == "gzip-ok":  # noted before the reply goes: the client may have read it before a later line runs
            _Server.compressed = "gzip" in self.headers.get("Accept-Encoding", "")
            self._gzip(OK)
        elif mode == "cut-once" and first:  # promises more than it sends, then closes
            self._head(Content_Length=str(len(OK) + 100))
            self.wfile.write(OK[:10])
            self.close_connection = True
        elif mode == "slow-once" and first:
            threading.Event().wait(1.0)
            self._head(Content_Length=str(len(OK)))
            self.wfile.write(OK)
        else:
            self._head(Content_Length=str(len(OK)))
            self.wfile.write(OK)


@pytest.fixture
def server():
    _Server.seen, _Server.proxy_auth = [], []
    with LoopbackServer(_Server) as srv:
        yield srv


def _ask(base_url: str, **kw):
    config = LLMConfig(model="m", base_url=base_url, api_key_env=None, max_response_bytes=LIMIT, backoff_s=0.01,
                       max_backoff_s=0.02, max_attempts=2, **{"timeout_s": 5, **kw})
    engine = OpenAIEngine(config)
    try:
        return engine.complete([LLMRequest(messages=(("user", "q"),))])[0]
    finally:
        engine.close()


@pytest.mark.parametrize("mode", ["declared-large", "streamed-large", "gzip-bomb"])
def test_a_reply_over_the_byte_limit_is_dropped_with_the_reason(server, mode):
    _Server.mode = mode
    reply = _ask(server.base_url)
    assert not reply.ok and reply.attempts == 2
    assert f"more than {LIMIT} bytes" in reply.error and "llm.max_response_bytes" in reply.error


def test_replies_are_asked_for_compressed_and_read_so(server):
    _Server.mode, _Server.compressed = "gzip-ok", False
    reply = _ask(server.base_url)
    assert reply.ok and reply.text == "ok" and _Server.compressed


def test_a_redirect_that_keeps_the_post_is_followed(server):
    _Server.mode = "ok"
    config = LLMConfig(model="m", base_url=server.base_url, api_key_env=None, timeout_s=5)
    engine = OpenAIEngine(config)
    try:
        text, attempts, error = engine.client.post("/moved", {"q": 1}, lambda data: data["choices"][0]["message"]["content"])
    finally:
        engine.close()
    assert (text, attempts, error) == ("ok", 1, None)
    assert _Server.seen[-1] == "POST /v1/chat/completions HTTP/1.1"


@pytest.mark.parametrize("url", ["localhost:8000/v1", "ftp://host/v1", "http:///v1"])
def test_a_base_url_that_is_not_http_is_refused_when_the_engine_starts(url):
    with pytest.raises(ValueError, match="base_url"):
        OpenAIEngine(LLMConfig(model="m", base_url=url, api_key_env=None))


@pytest.mark.parametrize("mode", ["cut-once", "slow-once"])
def test_a_body_cut_off_or_late_is_asked_again(server, mode):
    _Server.mode = mode
    reply = _ask(server.base_url, timeout_s=0.3)
    assert reply.ok and reply.text == "ok" and reply.attempts == 2


def test_a_server_that_is_not_there_gives_a_named_failure():
    with LoopbackServer(_Server) as gone:
        url = gone.base_url
    reply = _ask(url)
    assert not reply.ok and reply.attempts == 2 and "refused" in reply.error.lower()


def test_requests_go_through_the_proxy_the_environment_names_unless_excluded(server, monkeypatch):
    _Server.mode = "ok"
    for name in ("NO_PROXY", "no_proxy", "http_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HTTP_PROXY", server.base_url.rsplit("/v1", 1)[0])  # the server answers as the proxy
    assert _ask("http://llm.invalid:8000/v1").ok
    assert _Server.seen[-1] == "POST http://llm.invalid:8000/v1/chat/completions HTTP/1.1"  # an absolute URL: a proxy's request
    assert _Server.proxy_auth[-1] is None
    host = server.base_url.split("//")[1].rsplit("/v1", 1)[0]
    monkeypatch.setenv("HTTP_PROXY", f"al%40ice:s3cret@{host}")  # no scheme, credentials in the URL, as requests took them
    assert _ask("http://llm.invalid:8000/v1").ok
    assert _Server.proxy_auth[-1] == "Basic " + base64.b64encode(b"al@ice:s3cret").decode()
    for excluded in ("127.0.0.1", "127.0.0.0/8"):  # a host, or a range
        monkeypatch.setenv("NO_PROXY", excluded)
        assert _ask(server.base_url).ok
        assert _Server.seen[-1] == "POST /v1/chat/completions HTTP/1.1"


def test_the_ca_bundle_the_environment_names_is_trusted_file_or_directory(tmp_path, monkeypatch):
    from graphwright.engines.llm.openai_engine import connections

    monkeypatch.setenv("REQUESTS_CA_BUNDLE", str(tmp_path))
    assert connections("https://api.example.com/v1", 4, 5).connection_pool_kw["ca_cert_dir"] == str(tmp_path)
    bundle = tmp_path / "ca.pem"
    bundle.write_text("")
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", str(bundle))
    assert connections("https://api.example.com/v1", 4, 5).connection_pool_kw["ca_certs"] == str(bundle)
