"""Issue 22's probe, the storage/ingest/HTTP half: against a fresh index of tests/data/corpus,
re-run each storage fault, a folder of bad inputs and hostile HTTP requests, and print a table
per class: what happened, whether the message names the table/file, and the repair path (run
to the end: the repaired index is compared table for table with the clean one by
scripts/index-digest). With --huge-mb N it also runs bench/huge_document.py (minutes).

    .venv/bin/python bench/hostile_probe.py [--huge-mb 50]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

# before any CliRunner: the progress console binds sys.stderr at import, which CliRunner swaps
import graphwright.pipeline.runner  # noqa: E402,F401

ROOT = Path(__file__).resolve().parents[1]
CONFIG = ROOT / "tests" / "data" / "test-config.yaml"


def cli(*args: str):
    from typer.testing import CliRunner

    from graphwright.cli import app

    return CliRunner().invoke(app, list(args))


def digest(index: Path) -> list[str]:
    out = subprocess.run([sys.executable, str(ROOT / "scripts" / "index-digest"), str(index)], capture_output=True, text=True).stdout
    return [line for line in out.splitlines() if not line.startswith(("index_manifest", "vectors", "runs", "stage_metrics"))]


def first(text: str) -> str:
    return " ".join(text.split())[:150]


def latest_commit(index: Path, table: str) -> Path:
    return sorted((index / "tables" / table / "_delta_log").glob("*.json"))[-1]


FAULTS = {
    "emptied latest log (entities)": ("entities", lambda ix: latest_commit(ix, "entities").write_bytes(b"")),
    "truncated latest log (relationships)": ("relationships", lambda ix: latest_commit(ix, "relationships").write_bytes(
        latest_commit(ix, "relationships").read_bytes()[:150])),
    "deleted Parquet file (chunks)": ("chunks", lambda ix: sorted((ix / "tables" / "chunks").glob("*.parquet"))[0].unlink()),
    "truncated Parquet file (mentions)": ("mentions", lambda ix: (lambda f: f.write_bytes(f.read_bytes()[:500]))(
        sorted((ix / "tables" / "mentions").glob("*.parquet"))[0])),
    "deleted .faiss file": ("vectors/chunk-", lambda ix: next((ix / "vectors").glob("chunk-*.faiss")).unlink()),
    "altered .faiss file (same size)": ("vectors/entity-", lambda ix: (lambda f: f.write_bytes(
        f.read_bytes()[:100] + bytes(b ^ 0xFF for b in f.read_bytes()[100:108]) + f.read_bytes()[108:])
    )(next((ix / "vectors").glob("entity-*.faiss")))),
}


def storage_faults(work: Path, clean: Path, corpus: Path) -> list[tuple]:
    from fastapi.testclient import TestClient

    from graphwright.serve.api import create_app

    rows, served = [], work / "served"
    served.mkdir()
    for case, (names, damage) in FAULTS.items():
        index = work / f"fault-{len(rows)}"
        shutil.copytree(clean, index)
        damage(index)
        shutil.copytree(index, served / index.name)
        q = cli("query", "Who keeps the harbor?", "--index", str(index), "--no-answer", "--mode", "naive" if "faiss" in case else "local")
        with TestClient(create_app(served, allow_no_auth=True), raise_server_exceptions=False) as http:
            r = http.post(f"/v1/indexes/{index.name}/query", json={"question": "Who keeps the harbor?", "answer": False,
                                                                  "mode": "naive" if "faiss" in case else "local"})
        checked = cli("check", "--index", str(index), "--json")
        found = json.loads(checked.stdout)["problems"] if checked.stdout.strip() else []
        repaired = json.loads(cli("check", "--index", str(index), "--repair", "--json").stdout)
        path = "; ".join(repaired["repaired"]) or "none"
        for advice in repaired["left"]:
            if "--rebuild" in advice or "graphwright index" in advice:
                rebuild = [t for part in advice.split("--rebuild ")[1:] for t in [part.split()[0].strip("`")]]
                cli("index", str(corpus), "--index", str(index), "--config", str(CONFIG), "--json",
                    *[a for t in rebuild for a in ("--rebuild", t)])
                path += f"; then `index --rebuild {' '.join(rebuild) or '(none)'}`"
        restored = cli("check", "--index", str(index)).exit_code == 0 and digest(index) == digest(clean)
        by_check = any(names.split("-")[0] in " ".join((p["table"], *p["files"], p["detail"])) for p in found)
        by_query = q.exit_code == 0 or " ".join(names.split()) in " ".join(q.output.split())
        named = "yes" if by_check and by_query else "NO"
        named += "" if q.exit_code else " (the query does not read it: served)"
        rows.append((case, f"query rc {q.exit_code}: {first(q.output)}", f"HTTP {r.status_code}", named,
                     f"{path} -> {'identical to a clean index' if restored else 'NOT restored'}"))
    return rows


def bad_inputs(work: Path) -> list[tuple]:
    folder = work / "bad-input"
    folder.mkdir()
    (folder / "good.txt").write_text("Mara Voss keeps the harbor of Port Elling.")
    (folder / "with space.txt").write_text("The file with a space keeps its own text.")
    (folder / "utf16-bom.txt").write_bytes("Zoë sailed to Port Elling.".encode("utf-16"))
    (folder / "utf16-nobom.txt").write_bytes("Zoë sailed to Port Elling.".encode("utf-16-le"))
    (folder / "latin1.txt").write_bytes("café au lait".encode("latin-1"))
    (folder / "binary.txt").write_bytes(b"\x89PNG\x00\x00\x01\xff")
    (folder / "empty.md").write_bytes(b"")
    (folder / "dangling.txt").symlink_to(folder / "nowhere.txt")
    (folder / "loop-a.txt").symlink_to(folder / "loop-b.txt")
    (folder / "loop-b.txt").symlink_to(folder / "loop-a.txt")
    (folder / "sub").mkdir()
    (folder / "sub" / "up").symlink_to(folder)
    os.mkfifo(folder / "pipe.txt")
    (folder / "records.jsonl").write_text("\n".join([
        json.dumps({"id": "with space.txt", "text": "A record claiming the file's key."}),
        '{"id": "surrogate", "text": "who \\ud800 is"}', "{not json", json.dumps({"id": "fine", "text": "A fine record."})]) + "\n")
    pq.write_table(pa.table({"id": [f"r{i}" for i in range(500)], "body": ["x"] * 500}), folder / "no-text.parquet")
    (folder / "broken.parquet").write_bytes(b"not parquet")
    (folder / "table.csv").write_text("a,b\n")
    result = cli("index", str(folder), "--index", str(work / "bad-index"), "--config", str(CONFIG), "--json")
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout.strip().splitlines()[-1])
    from graphwright.storage.delta import IndexStore

    indexed = IndexStore(work / "bad-index").read("documents", columns=["source_key", "source"]).to_pylist()
    errors = {}
    for e in summary["source_errors"]:
        errors.setdefault(e["source"].split(":")[0], []).append(e["reason"])
    rows = []
    for path in sorted(folder.rglob("*"), key=str):
        if path.is_dir() and not path.is_symlink():
            continue
        docs = [d["source_key"] for d in indexed if d["source"] == str(path)]
        said = errors.get(str(path), [])
        rows.append((path.relative_to(folder).as_posix(), f"indexed {docs}" if docs else "-", first("; ".join(said)) if said else "-",
                     "yes" if docs or said else "NO"))
    return rows


HTTP_CASES = [
    ("lone surrogate question", "post", "/v1/indexes/ok/query", b'{"question": "who \\ud800 is"}'),
    ("lone surrogate + unknown key", "post", "/v1/indexes/ok/query", b'{"question": "who \\ud800 is", "x": "\\udfff"}'),
    ("invalid JSON", "post", "/v1/indexes/ok/query", b'{"question": '),
    ("deeply nested JSON", "post", "/v1/indexes/ok/query", b'{"question": ' + b"[" * 5000 + b"]" * 5000 + b"}"),
    ("question of 5000 chars", "post", "/v1/indexes/ok/query", json.dumps({"question": "x" * 5000}).encode()),
    ("wrong types", "post", "/v1/indexes/ok/query", b'{"question": 7, "top_k": "many", "version": [1]}'),
    ("NUL in the question", "post", "/v1/indexes/ok/query", b'{"question": "who\\u0000is"}'),
    ("traversal name", "post", "/v1/indexes/..%2F..%2Fetc/query", b'{"question": "x"}'),
    ("version that does not exist", "post", "/v1/indexes/ok/query", b'{"question": "x", "version": 99}'),
    ("emptied log index", "post", "/v1/indexes/broken/query", b'{"question": "Who keeps the harbor?", "answer": false}'),
    ("emptied log index: versions", "get", "/v1/indexes/broken/versions", None),
    ("index list with a broken index", "get", "/v1/indexes", None),
]


def http_cases(work: Path, clean: Path) -> list[tuple]:
    from fastapi.testclient import TestClient

    from graphwright.serve.api import create_app

    root = work / "http-root"
    root.mkdir()
    shutil.copytree(clean, root / "ok")
    shutil.copytree(clean, root / "broken")
    latest_commit(root / "broken", "entities").write_bytes(b"")
    rows = []
    with TestClient(create_app(root, ["k"]), raise_server_exceptions=False) as http:
        for case, method, url, body in HTTP_CASES:
            r = http.request(method, url, content=body, headers={"Authorization": "Bearer k", "content-type": "application/json"})
            detail = r.json().get("detail") if r.headers.get("content-type", "").startswith("application/json") else r.text
            rows.append((case, r.status_code, first(json.dumps(detail) if not isinstance(detail, str) else detail)))
    return rows


def show(title: str, header: tuple, rows: list[tuple]) -> None:
    print(f"\n## {title}\n")
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for row in rows:
        print("| " + " | ".join(str(c).replace("|", "/") for c in row) + " |")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--huge-mb", type=int, default=0, help="also run bench/huge_document.py on a document this large")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="gw-probe-") as tmp:
        work = Path(tmp)
        corpus = work / "corpus"
        shutil.copytree(ROOT / "tests" / "data" / "corpus", corpus)
        result = cli("index", str(corpus), "--index", str(work / "clean"), "--config", str(CONFIG), "--json")
        assert result.exit_code == 0, result.output
        faults = storage_faults(work, work / "clean", corpus)
        show("storage faults", ("fault", "query (CLI)", "query (HTTP)", "named (query, check)", "repair path"), faults)
        inputs = bad_inputs(work)
        show("bad-input folder", ("path", "indexed", "message", "accounted for"), inputs)
        http = http_cases(work, work / "clean")
        show("HTTP", ("case", "status", "detail"), http)
        print(f"\nstorage faults named: {sum(r[3].startswith('yes') for r in faults)}/{len(faults)}, restored: "
              f"{sum('identical' in r[4] for r in faults)}/{len(faults)}; bad inputs accounted for: "
              f"{sum(r[3] == 'yes' for r in inputs)}/{len(inputs)}; HTTP 500s: {sum(r[1] == 500 for r in http)}/{len(http)} "
              f"(and the hypothesis fuzz in tests/test_server.py)")
    if args.huge_mb:
        subprocess.run([sys.executable, str(Path(__file__).parent / "huge_document.py"), "--mb", str(args.huge_mb)], check=False)


if __name__ == "__main__":
    main()
