"""The offline GPU path (llm.batch.via files): the request files are valid `vllm run-batch` input
(checked by parsing against vLLM's request shapes, tests/vllm_batch_format.py) and the same lines
the Batch API path uploads; export-batch writes them with the command to run, import-batch puts
vLLM's results (successes and errors in one file) back, and the next run collects them. Result
lines of both formats are read as hostile input."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest
from _helpers import DATA, make_config, run, two_documents
from fake_batch_api import FakeBatchAPI
from pydantic import ValidationError
from typer.testing import CliRunner
from vllm_batch_format import BatchRequestInput, BatchRequestOutput, ErrorResponse

from graphwright.cli import app
from graphwright.config import LLMConfig
from graphwright.engines.llm import standin
from graphwright.engines.llm.batch.files import read_results, request_line
from graphwright.engines.llm.batch.providers import FOLDER
from graphwright.ops.batches import batch_rows
from graphwright.pipeline.errors import WaitingOnBatch
from graphwright.stages.resolve.adjudicate import adjudication_request
from graphwright.stages.resolve.scoring import KeyProfile
from graphwright.stages.resolve.summarize import summary_request
from graphwright.storage.delta import IndexStore

runner = CliRunner()
EXAMPLES = DATA / "batch"


@pytest.fixture
def corpus(tmp_path):
    return two_documents(tmp_path)


def files_config(wait_s: float = 0.0, via: str = "files", base_url: str = "http://127.0.0.1:9/v1"):
    return make_config(extract={"engine": "llm", "max_failed_fraction": 0.5},
                       llm={"engine": "openai-batch", "model": "Qwen/Qwen2.5-7B-Instruct", "base_url": base_url, "api_key_env": None,
                            "timeout_s": 10, "batch": {"via": via, "wait_s": wait_s, "poll_s": 0.02}})


def cli(*args) -> dict:
    result = runner.invoke(app, [str(a) for a in args])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def request_files(index: Path) -> list[Path]:
    return sorted(p for p in (index / FOLDER).glob("gwb-*.jsonl") if not p.name.endswith(".output.jsonl"))


def vllm_run_batch(requests: Path, results: Path, model: str, errors: dict[int, object]) -> None:
    """What `vllm run-batch -i requests -o results --model M` writes, after its source: one file,
    in input order, a line per request; an engine error as an ErrorResponse object with its
    status code, any other error as a plain string with status 400. Like vLLM it stops at the
    first line its classes reject."""
    out = []
    for n, raw in enumerate(requests.read_bytes().splitlines()):
        line = BatchRequestInput.model_validate_json(raw)  # raises: vLLM aborts the run
        request_id = f"vllm-batch-{uuid.uuid4().hex}"
        if isinstance(errors.get(n), dict):
            response, error = {"status_code": errors[n]["error"]["code"], "request_id": request_id, "body": None}, errors[n]
        elif isinstance(errors.get(n), str):
            response, error = {"status_code": 400, "request_id": request_id, "body": None}, errors[n]
        else:
            assert line.body.model == model
            body = json.loads(raw)["body"]
            completion = standin.completion(body, standin.answer(body["messages"]))
            completion["choices"][0]["message"].update(reasoning_content=None, tool_calls=[])
            completion["choices"][0].update(logprobs=None, stop_reason=None)
            response = {"status_code": 200, "request_id": request_id,
                        "body": {**completion, "id": f"chatcmpl-{uuid.uuid4().hex}", "created": 1737847944, "prompt_logprobs": None,
                                 "kv_transfer_params": None}}
            error = None
        record = {"id": f"vllm-{uuid.uuid4().hex}", "custom_id": line.custom_id, "response": response, "error": error}
        BatchRequestOutput.model_validate(record)
        out.append(json.dumps(record))
    results.write_text("\n".join(out) + "\n")


def test_request_files_are_valid_vllm_batch_input(corpus, tmp_path):
    with pytest.raises(WaitingOnBatch):
        run([corpus], tmp_path / "index", files_config())
    (path,) = request_files(tmp_path / "index")
    lines = [BatchRequestInput.model_validate_json(raw) for raw in path.read_bytes().splitlines()]
    assert len(lines) == 9 and {line.body.response_format.type for line in lines} == {"json_schema"}
    assert all(line.body.response_format.json_schema.json_schema["required"] == ["entities", "relationships"] for line in lines)
    # every other request graphwright sends, with and without a schema
    llm = LLMConfig(model="m")
    ada, lovelace = KeyProfile("ada", mentions=2, types={"PERSON": 2}, text="Ada"), KeyProfile("lovelace", mentions=1, text="Lovelace")
    for request in (summary_request("Ada", ["a", "b"], 200, llm), adjudication_request(ada, lovelace, llm)):
        BatchRequestInput.model_validate_json(request_line("k", request, llm))
    # the check can fail: a line vLLM would drop a field of, or not read at all
    good = json.loads(path.read_bytes().splitlines()[0])
    for broken in ({**good, "custom_id": None}, {**good, "url": "/v1/completions"},
                   {**good, "body": {**good["body"], "max_tokenz": 10}}):
        with pytest.raises(ValidationError):
            BatchRequestInput.model_validate(broken)


def test_the_files_path_writes_the_lines_the_batch_api_uploads(corpus, tmp_path):
    with FakeBatchAPI() as api:
        with pytest.raises(WaitingOnBatch):
            run([corpus], tmp_path / "api", files_config(via="api", base_url=api.base_url))
        uploaded = {line["custom_id"]: line for line in api.lines(api.order[0])}
    with pytest.raises(WaitingOnBatch):
        run([corpus], tmp_path / "files", files_config())
    (path,) = request_files(tmp_path / "files")
    written = {line["custom_id"]: line for line in map(json.loads, path.read_bytes().splitlines())}
    assert written == uploaded and len(written) == 9


def test_an_offline_round_trip_through_vllm_run_batch(corpus, tmp_path):
    index, out = tmp_path / "index", tmp_path / "gpu"
    with pytest.raises(WaitingOnBatch) as waiting:
        run([corpus], index, files_config())
    assert "export-batch" in str(waiting.value)
    (exported,) = cli("export-batch", "--index", index, "--out", out, "--json")["batches"]
    assert exported["command"] == f"vllm run-batch -i {out}/{exported['batch_id']}.jsonl -o {out}/{exported['batch_id']}.output.jsonl " \
                                  "--model Qwen/Qwen2.5-7B-Instruct"
    errors = {0: {"error": {"message": "The model `NonExistModel` does not exist.", "type": "NotFoundError", "param": "model", "code": 404}},
              1: "URL /bad_url was used. Supported endpoints: /v1/chat/completions, /v1/embeddings, /score, /rerank."}
    ErrorResponse.model_validate(errors[0])
    vllm_run_batch(Path(exported["input"]), Path(exported["output"]), exported["model"], errors)
    imported = cli("import-batch", exported["output"], "--index", index, "--json")
    assert imported == {"batches": {exported["batch_id"]: 9}, "unmatched_lines": 0, "unreadable_lines": 0}

    summary = run([corpus], index, files_config(wait_s=5))
    assert summary["version"] == 1 and summary["chunks_failed"] == 2
    (row,) = batch_rows(IndexStore(index))
    assert row["state"] == "collected" and (row["completed"], row["failed"]) == (7, 2)
    failures = IndexStore(index).read("extractions", columns=["error"], where="status = 'failed'").column("error").to_pylist()
    assert any("HTTP 404 (404): The model `NonExistModel` does not exist." in f for f in failures)
    assert any("HTTP 400: URL /bad_url was used" in f for f in failures)
    with pytest.raises(WaitingOnBatch) as again:  # the next run asks again for those two, in a new file
        run([corpus], index, files_config())
    assert again.value.requests == 2 and len(request_files(index)) == 2


def test_result_lines_of_both_formats_are_read_as_hostile_input():
    lines = [*(EXAMPLES / "openai_output.jsonl").read_bytes().splitlines(), *(EXAMPLES / "openai_error.jsonl").read_bytes().splitlines(),
             *(EXAMPLES / "vllm_output.jsonl").read_bytes().splitlines()]
    members = {"gw-extract-000001", "gw-extract-000002", "gw-extract-000003", "gw-extract-000004", "k-long", "k-bad"}
    garbage = [b"not json", b"[1, 2]", b'{"custom_id": 7}', b'{"custom_id": "somebody-else", "response": null, "error": null}',
               b'{"custom_id": "k-long", "response": {"status_code": 200, "body": {"choices": [{"message": {"content": "'
               + b"x" * 5000 + b'"}}]}}}',
               b'{"custom_id": "k-bad", "response": {"status_code": 200, "request_id": "r", "body": {"choices": []}}, "error": null}',
               b'{"custom_id": "gw-extract-000004", "response": {"status_code": 503, "request_id": "r", "body": null}, "error": null}']
    found, skipped = read_results(lines + garbage, members, max_line_bytes=4096)
    ok = found["gw-extract-000001"].response
    assert ok.ok and json.loads(ok.text)["entities"][0]["name"] == "Alice" and (ok.prompt_tokens, ok.completion_tokens) == (52, 21)
    http_400 = found["gw-extract-000002"]  # OpenAI's HTTP error line (vLLM's 404 line for the same id comes later: first wins)
    assert not http_400.retry and "HTTP 400 (invalid_value): Invalid value: 'object'" in http_400.response.error
    expired = found["gw-extract-000003"]
    assert expired.retry and "batch_expired" in expired.response.error
    assert found["gw-extract-000004"].retry and "HTTP 503" in found["gw-extract-000004"].response.error
    assert found["k-bad"].retry and "malformed response body" in found["k-bad"].response.error
    assert "k-long" not in found  # over the line bound: unanswered, sent again
    assert skipped == 3 + 4 + 1  # the later vLLM lines for ids already read, four garbage lines, the long one
    vllm_only, _ = read_results((EXAMPLES / "vllm_output.jsonl").read_bytes().splitlines(), members, 4096)
    assert vllm_only["gw-extract-000001"].response.ok
    assert "HTTP 404 (404): The model `NonExistModel` does not exist." in vllm_only["gw-extract-000002"].response.error
    assert "HTTP 400: URL /bad_url was used" in vllm_only["gw-extract-000003"].response.error
    assert not vllm_only["gw-extract-000002"].retry and not vllm_only["gw-extract-000003"].retry


def test_batch_objects_of_the_api_are_read_with_their_errors():
    from openai.types import Batch

    from graphwright.engines.llm.batch.providers import _info

    done = _info(Batch.model_validate_json((EXAMPLES / "openai_batch_object.json").read_text()))
    assert (done.status, done.output_file_id, done.error_file_id) == ("completed", "file-cvaTdG", "file-HOWS94")
    failed = _info(Batch.model_validate_json((EXAMPLES / "openai_batch_failed.json").read_text()))
    assert failed.status == "failed" and failed.errors.startswith("token_limit_exceeded: Enqueued token limit reached")
