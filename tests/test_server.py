"""The HTTP API (graphwright.serve.api) against a small real index, through FastAPI's TestClient."""

import json
import shutil
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from fastapi import HTTPException
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from graphwright.cli import app as cli_app
from graphwright.query import query
from graphwright.serve import api as server
from graphwright.serve.api import IndexRoot, SearcherCache, create_app, load_api_keys

KEY, OTHER_KEY = "test-key-1", "test-key-2"
AUTH = {"Authorization": f"Bearer {KEY}"}


def says(result, text) -> bool:
    """Whether a command's output contains `text` (rich wraps long lines)."""
    return "".join(text.split()) in "".join(result.output.split())


@pytest.fixture(scope="module")
def root(indexed, tmp_path_factory):
    """town: a published index; empty: an index directory with nothing published; alias: a
    symlink to town inside the root; escape: a symlink to an index outside the root."""
    base = tmp_path_factory.mktemp("serve")
    root = base / "root"
    root.mkdir()
    shutil.copytree(indexed.index, root / "town")
    (root / "empty" / "tables").mkdir(parents=True)
    (root / "alias").symlink_to(root / "town")
    (root / "escape").symlink_to(indexed.index)
    (root / "not-an-index").mkdir()
    return root


@pytest.fixture(scope="module")
def client(root):
    with TestClient(create_app(root, [KEY, OTHER_KEY])) as c:
        yield c


def test_health_needs_no_key_and_counts_indexes(client):
    r = client.get("/health")
    assert r.status_code == 200
    assert r.json() == {"status": "ok", "indexes": 3}  # town, empty, alias


@pytest.mark.parametrize("method,path,body", [
    ("get", "/v1/indexes", None),
    ("get", "/v1/indexes/town/versions", None),
    ("post", "/v1/indexes/town/query", {"question": "Who keeps the harbor?"}),
])
@pytest.mark.parametrize("headers", [
    {}, {"Authorization": "Bearer wrong"}, {"Authorization": f"Basic {KEY}"}, {"Authorization": f"Bearer {KEY}x"},
    {"Authorization": "Bearer "},
])
def test_requests_without_a_valid_key_are_refused(client, method, path, body, headers):
    r = client.request(method, path, json=body, headers=headers)
    assert r.status_code == 401
    assert r.headers["www-authenticate"] == "Bearer"
    assert "API key" in r.json()["detail"]


def test_every_configured_key_is_accepted(client):
    for key in (KEY, OTHER_KEY):
        r = client.get("/v1/indexes", headers={"Authorization": f"Bearer {key}"})
        assert r.status_code == 200


def test_list_indexes_with_latest_version(client):
    r = client.get("/v1/indexes", headers=AUTH)
    assert r.json() == {"indexes": [
        {"name": "alias", "latest_version": 1}, {"name": "empty", "latest_version": None}, {"name": "town", "latest_version": 1},
    ]}


def test_versions_listing_matches_the_cli(client, root):
    r = client.get("/v1/indexes/town/versions", headers=AUTH)
    assert r.status_code == 200
    cli = CliRunner().invoke(cli_app, ["versions", "--index", str(root / "town"), "--json"])
    assert cli.exit_code == 0, cli.output
    assert r.json() == {"index": "town", "versions": json.loads(cli.stdout)}
    assert [v["version"] for v in r.json()["versions"]] == [1]


@pytest.mark.parametrize("mode", ["local", "naive"])
def test_query_returns_what_query_returns(client, root, mode):
    question = "Who keeps the harbor?"
    r = client.post("/v1/indexes/town/query", headers=AUTH, json={"question": question, "mode": mode, "top_k": 3})
    assert r.status_code == 200, r.text
    got = r.json()
    expected = query(str(root / "town"), question, mode=mode, top_k=3)
    assert (got["question"], got["mode"], got["version"]) == (question, mode, 1)
    assert set(got) == set(expected) and set(got["evidence"][0]) == set(expected["evidence"][0])
    assert [(e["chunk_id"], e["score"], e["title"]) for e in got["evidence"]] == \
        [(e["chunk_id"], e["score"], e["title"]) for e in expected["evidence"]]
    assert len(got["evidence"]) == 3
    if mode == "local":
        assert [e["entity_id"] for e in got["entities"]] == [e["entity_id"] for e in expected["entities"]]


def test_query_a_pinned_version_and_a_missing_one(client):
    ok = client.post("/v1/indexes/town/query", headers=AUTH, json={"question": "festival", "version": 1})
    assert ok.status_code == 200 and ok.json()["version"] == 1
    missing = client.post("/v1/indexes/town/query", headers=AUTH, json={"question": "festival", "version": 7})
    assert missing.status_code == 404
    assert "no version 7" in missing.json()["detail"]


def test_query_errors_are_client_errors_with_the_reason(client, root):
    bad_mode = client.post("/v1/indexes/town/query", headers=AUTH, json={"question": "x", "mode": "telepathy"})
    assert bad_mode.status_code == 422
    assert "mode" in json.dumps(bad_mode.json())
    for body in ({"question": ""}, {"question": "x", "top_k": 0}, {"mode": "local"}, {"question": "x", "colour": 1}):
        assert client.post("/v1/indexes/town/query", headers=AUTH, json=body).status_code == 422, body
    unpublished = client.post("/v1/indexes/empty/query", headers=AUTH, json={"question": "x"})
    assert unpublished.status_code == 404
    assert "no published index version" in unpublished.json()["detail"]
    assert str(root) not in unpublished.json()["detail"]  # the server's paths stay private
    no_llm = client.post("/v1/indexes/town/query", headers=AUTH, json={"question": "x", "answer": True})
    assert no_llm.status_code == 400
    assert "no LLM configured" in no_llm.json()["detail"]


def test_unknown_index_is_404(client):
    for path in ("/v1/indexes/nowhere/versions", "/v1/indexes/not-an-index/versions"):
        r = client.get(path, headers=AUTH)
        assert r.status_code == 404
        assert "no index named" in r.json()["detail"]


@pytest.mark.parametrize("name", [
    "..", ".", "%2e%2e", "%2E%2E", ".%2e", "..%2f..%2fetc", "%2fetc", "%2Fetc%2Fpasswd", "town%2f..%2f..", "..%5c..",
    "escape", ".hidden", "a..b", "%00", "town%00",
])
def test_index_names_cannot_escape_the_root(client, name):
    for method, path in (("get", f"/v1/indexes/{name}/versions"), ("post", f"/v1/indexes/{name}/query")):
        r = client.request(method, path, headers=AUTH, json={"question": "x"})
        assert r.status_code in (400, 404), (name, r.status_code, r.text)


@pytest.mark.parametrize("name,status", [
    ("..", 400), ("../town", 400), ("/etc", 400), ("town/../..", 400), ("", 400), (".", 400), ("escape", 404), ("nowhere", 404),
])
def test_index_root_resolves_only_directories_under_it(root, name, status):
    with pytest.raises(HTTPException) as exc:
        IndexRoot(root).path(name)
    assert exc.value.status_code == status


def test_a_symlink_inside_the_root_is_served(client, root):
    assert IndexRoot(root).path("alias") == (root / "town").resolve()
    assert client.get("/v1/indexes/alias/versions", headers=AUTH).status_code == 200


def test_openapi_documents_the_paths_and_the_bearer_scheme(client):
    r = client.get("/openapi.json")
    assert r.status_code == 200
    spec = r.json()
    assert {"/health", "/v1/indexes", "/v1/indexes/{name}/versions", "/v1/indexes/{name}/query"} <= set(spec["paths"])
    assert spec["components"]["securitySchemes"]["HTTPBearer"]["scheme"] == "bearer"
    request = spec["components"]["schemas"]["QueryRequest"]
    assert request["required"] == ["question"]
    assert set(request["properties"]["mode"]["enum"]) == set(server.MODES)
    assert "security" not in spec["paths"]["/health"]["get"]
    assert spec["paths"]["/v1/indexes/{name}/query"]["post"]["security"] == [{"HTTPBearer": []}]


def test_no_keys_refuses_unless_no_auth_is_explicit(root):
    with pytest.raises(ValueError, match="no API keys"):
        create_app(root, [])
    with pytest.raises(ValueError, match="no API keys"):
        create_app(root, ["", ""])
    with TestClient(create_app(root, [], allow_no_auth=True)) as open_client:
        assert open_client.get("/v1/indexes/town/versions").status_code == 200


def test_load_api_keys_from_the_environment_and_a_file(tmp_path):
    keys_file = tmp_path / "keys"
    keys_file.write_text("# operators\nfile-key-1\n\n  file-key-2  \n")
    assert load_api_keys(None, {"GRAPHWRIGHT_API_KEYS": " a, b,,"}) == ["a", "b"]
    assert load_api_keys(keys_file, {}) == ["file-key-1", "file-key-2"]
    assert load_api_keys(keys_file, {"GRAPHWRIGHT_API_KEYS": "a"}) == ["a", "file-key-1", "file-key-2"]
    assert load_api_keys(None, {}) == []


def test_serve_command_refuses_without_keys_and_warns_with_no_auth(root, tmp_path, monkeypatch):
    import uvicorn

    started = []
    monkeypatch.setattr(uvicorn, "run", lambda app, host, port: started.append((app, host, port)))
    monkeypatch.delenv("GRAPHWRIGHT_API_KEYS", raising=False)
    runner = CliRunner()

    refused = runner.invoke(cli_app, ["serve", "--index-root", str(root)])
    assert refused.exit_code == 1 and says(refused, "no API keys") and not started

    keys_file = tmp_path / "keys"
    keys_file.write_text("k1\n")
    both = runner.invoke(cli_app, ["serve", "--index-root", str(root), "--api-keys-file", str(keys_file), "--no-auth"])
    assert both.exit_code == 1 and not started

    missing_root = runner.invoke(cli_app, ["serve", "--index-root", str(tmp_path / "nope"), "--api-keys-file", str(keys_file)])
    assert missing_root.exit_code == 1 and says(missing_root, "no such directory") and not started

    with_keys = runner.invoke(cli_app, ["serve", "--index-root", str(root), "--api-keys-file", str(keys_file), "--port", "9123"])
    assert with_keys.exit_code == 0, with_keys.output
    with TestClient(started[-1][0]) as c:
        assert c.get("/v1/indexes", headers={"Authorization": "Bearer k1"}).status_code == 200
        assert c.get("/v1/indexes").status_code == 401
    assert started[-1][1:] == ("127.0.0.1", 9123)

    open_ = runner.invoke(cli_app, ["serve", "--index-root", str(root), "--no-auth"])
    assert open_.exit_code == 0 and says(open_, "without authentication")
    with TestClient(started[-1][0]) as c:
        assert c.get("/v1/indexes").status_code == 200


def test_startup_loads_each_published_index(root, monkeypatch):
    built, queried = [], []
    real_searcher, real_query = server.Searcher, server.query
    monkeypatch.setattr(server, "Searcher", lambda *args: built.append(args) or real_searcher(*args))
    monkeypatch.setattr(server, "query", lambda *a, **k: queried.append(k["mode"]) or real_query(*a, **k))
    app = create_app(root, [KEY])
    assert built == []
    with TestClient(app) as c:
        town = str((root / "town").resolve())
        assert built == [(town, 1)]  # alias is the same directory; empty has no published version
        assert sorted(queried) == sorted(server.MODES * 2)
        assert c.post("/v1/indexes/town/query", headers=AUTH, json={"question": "harbor"}).status_code == 200
        assert built == [(town, 1)]


def test_an_index_that_fails_to_load_at_startup_does_not_stop_the_server(root, monkeypatch, caplog):
    def broken(*args, **kwargs):
        raise RuntimeError("corrupt vector index")

    monkeypatch.setattr(server, "query", broken)
    with TestClient(create_app(root, [KEY])) as c:
        assert c.get("/health").json() == {"status": "ok", "indexes": 3}
        assert c.get("/v1/indexes", headers=AUTH).status_code == 200
    assert "could not load index 'alias' at startup" in caplog.text
    assert "could not load index 'town' at startup" in caplog.text


def test_searchers_are_loaded_once_per_index_version():
    loads = []
    gate = threading.Event()

    def load(path, version):
        gate.wait(10)
        loads.append((path, version))
        return object()

    cache = SearcherCache(size=2, load=load)
    with ThreadPoolExecutor(8) as pool:
        futures = [pool.submit(cache.get, "a", 1) for _ in range(8)]
        gate.set()
        got = {id(f.result()) for f in futures}
    assert len(got) == 1 and loads == [("a", 1)]
    cache.get("b", 1)
    cache.get("a", 1)  # a is now the most recently used
    cache.get("c", 1)  # evicts b
    cache.get("b", 1)
    assert loads == [("a", 1), ("b", 1), ("c", 1), ("b", 1)]


def test_query_server_reuses_its_searcher(root, monkeypatch):
    built = []
    real = server.Searcher

    def counting(*args):
        built.append(args)
        return real(*args)

    monkeypatch.setattr(server, "Searcher", counting)
    c = TestClient(create_app(root, [KEY]))  # not entered: no startup warm-up
    for question in ("harbor", "festival", "river"):
        assert c.post("/v1/indexes/town/query", headers=AUTH, json={"question": question}).status_code == 200
    assert built == [(str((root / "town").resolve()), 1)]


def test_queries_run_at_most_max_concurrency_at_once_and_health_stays_answered(root, monkeypatch):
    lock, active, peak = threading.Lock(), [0], [0]
    pair = threading.Barrier(2, timeout=20)  # passes only if two queries run at the same time
    release = threading.Event()

    def fake_query(index_dir, question, **kwargs):
        with lock:
            active[0] += 1
            peak[0] = max(peak[0], active[0])
        try:
            if question == "hold":
                release.wait(20)
            else:
                pair.wait()
        finally:
            with lock:
                active[0] -= 1
        return {"question": question, "mode": "naive", "version": 1, "evidence": []}

    with TestClient(create_app(root, [KEY], max_concurrency=2)) as c:
        monkeypatch.setattr(server, "query", fake_query)  # after the startup warm-up
        post = lambda q: c.post("/v1/indexes/town/query", headers=AUTH, json={"question": q}).status_code
        with ThreadPoolExecutor(6) as pool:
            statuses = list(pool.map(post, ["q"] * 6))
        assert statuses == [200] * 6 and peak[0] == 2

        # both workers held: health is still answered, a third query waits for a free worker
        with ThreadPoolExecutor(3) as pool:
            held = [pool.submit(post, "hold") for _ in range(2)]
            queued = pool.submit(post, "hold")
            deadline = time.monotonic() + 20
            while active[0] < 2 and time.monotonic() < deadline:
                time.sleep(0.01)
            assert active[0] == 2
            assert c.get("/health").status_code == 200
            assert active[0] == 2 and not any(f.done() for f in held + [queued])
            release.set()
            assert [f.result() for f in held + [queued]] == [200] * 3
        assert peak[0] == 2


# ------------------------------------------------------------------ hostile requests, broken storage (issue 22)

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402


@pytest.fixture(scope="module")
def broken_root(indexed, tmp_path_factory):
    """ok: a published index; no-log, no-file, no-vectors: copies with one storage fault each."""
    root = tmp_path_factory.mktemp("broken")
    for name in ("ok", "no-log", "no-file", "no-vectors"):
        shutil.copytree(indexed.index, root / name)
    # tables the default (local) mode reads; its chunk and entity rows come from the search files
    sorted((root / "no-log" / "tables" / "communities" / "_delta_log").glob("*.json"))[-1].write_bytes(b"")
    sorted((root / "no-file" / "tables" / "entity_aliases").glob("*.parquet"))[0].unlink()
    next((root / "no-vectors" / "vectors").glob("chunk-*.faiss")).unlink()
    return root


@pytest.fixture(scope="module")
def lenient(broken_root):
    with TestClient(create_app(broken_root, [KEY]), raise_server_exceptions=False) as c:
        yield c


@pytest.mark.parametrize("name, table", [("no-log", "table communities"), ("no-file", "table entity_aliases"), ("no-vectors", "vector file vectors/chunk-")])
def test_storage_faults_are_503_naming_the_table_or_file(lenient, broken_root, name, table):
    r = lenient.post(f"/v1/indexes/{name}/query", json={"question": "Who keeps the harbor?", "answer": False}, headers=AUTH)
    assert r.status_code == 503
    detail = r.json()["detail"]
    assert table in detail and "graphwright check" in detail
    assert str(broken_root) not in detail  # the server's paths stay on the server
    assert lenient.post("/v1/indexes/ok/query", json={"question": "Who keeps the harbor?", "answer": False}, headers=AUTH).status_code == 200


def test_a_question_with_a_lone_surrogate_is_refused_not_a_500(lenient):
    body = b'{"question": "who \\ud800 is"}'
    r = lenient.post("/v1/indexes/ok/query", content=body, headers={**AUTH, "content-type": "application/json"})
    assert r.status_code == 422
    assert r.json()["detail"][0]["loc"] == ["body", "question"]
    r = lenient.post("/v1/indexes/ok/query", content=b'{"question": "who \\ud800 is", "extra": "\\udfff"}',
                     headers={**AUTH, "content-type": "application/json"})
    assert r.status_code == 422


@pytest.mark.parametrize("body", [b"Infinity", b'{"question": NaN}', b'{"question": "x", "top_k": -Infinity}'])
def test_non_finite_numbers_in_a_body_are_a_422_not_a_500(lenient, body):
    """Python's JSON parser accepts them, and the 422 that echoes them could not be written (found by the fuzz below)."""
    r = lenient.post("/v1/indexes/ok/query", content=body, headers={**AUTH, "content-type": "application/json"})
    assert r.status_code == 422 and r.json()["detail"]


def test_a_surrogate_from_the_command_line_is_a_message():
    from graphwright.query import query as run_query

    with pytest.raises(ValueError, match="lone surrogate"):
        run_query("/nonexistent", "who \udcff is")


def _json_values():
    scalars = st.none() | st.booleans() | st.integers(-2**70, 2**70) | st.floats(allow_nan=False) | st.text(max_size=30)
    return st.recursive(scalars, lambda kids: st.lists(kids, max_size=4) | st.dictionaries(st.text(max_size=8), kids, max_size=4),
                        max_leaves=12)


def _mostly(usual, rare, share: int = 8):
    """`usual` in `share` of ten draws, else `rare` (so that most requests reach the query)."""
    return st.integers(0, 9).flatmap(lambda i: usual if i < share else rare)


HOSTILE_TEXT = st.text(alphabet=st.characters(min_codepoint=0, max_codepoint=0x10FFFF, exclude_categories=()), max_size=60)
QUESTIONS = _mostly(st.text(min_size=1, max_size=40) | HOSTILE_TEXT, _json_values(), 9)
QUERY_BODIES = st.fixed_dictionaries({"question": QUESTIONS}, optional={
    "mode": _mostly(st.sampled_from(["local", "global", "naive", "graph", "mix", "x"]), _json_values()),
    "top_k": _mostly(st.integers(-5, 500), _json_values()), "version": _mostly(st.integers(-3, 5), _json_values()),
    "answer": _mostly(st.just(False), _json_values()), "extra": _json_values(),
})
NAMES = _mostly(st.sampled_from(["ok", "no-log", "no-file", "no-vectors"]),
                st.sampled_from(["missing", "..", "a%2F..", "ok\x00", "-x", "a" * 200]) | HOSTILE_TEXT)


def _raw(body) -> bytes:
    import json as json_module

    return json_module.dumps(body, ensure_ascii=True).encode()  # escapes lone surrogates as \\udxxx, like a hostile client


@settings(max_examples=150, deadline=None, derandomize=True,  # the same requests every run: CI is not a lottery
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(name=NAMES, body=_mostly(QUERY_BODIES, _json_values(), 9), garbage=st.binary(max_size=40),
       send_garbage=_mostly(st.just(False), st.just(True)),
       auth=_mostly(st.just(AUTH), st.sampled_from([{}, {"Authorization": "Bearer wrong"}, {"Authorization": "Basic x"}])))
def test_no_request_gets_a_500(lenient, name, body, garbage, send_garbage, auth):
    """Fuzzed index names, JSON bodies (wrong types, unknown keys, lone surrogates), raw bytes and
    credentials against every route of the OpenAPI spec: never a 500, always a JSON detail."""
    from urllib.parse import quote

    path = quote(name.encode("utf-8", "surrogatepass"), safe="")
    content = garbage if send_garbage else _raw(body)
    headers = {**auth, "content-type": "application/json"}
    for method, url in (("post", f"/v1/indexes/{path}/query"), ("get", f"/v1/indexes/{path}/versions"), ("get", "/v1/indexes"),
                        ("get", "/health")):
        r = lenient.request(method, url, content=content if method == "post" else None, headers=headers)
        assert r.status_code != 500, (url, content, r.text)
        r.json()  # a JSON body, whatever the status
        if r.status_code >= 400:
            assert "detail" in r.json()


def test_every_route_of_the_spec_is_fuzzed(lenient):
    """The fuzz test above covers the API's whole OpenAPI spec: a new route must join it."""
    paths = set(lenient.get("/openapi.json").json()["paths"])
    assert paths == {"/health", "/v1/indexes", "/v1/indexes/{name}/versions", "/v1/indexes/{name}/query"}
