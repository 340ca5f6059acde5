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
