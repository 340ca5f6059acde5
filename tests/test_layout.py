"""The package's shape: no import circles, small modules, and a pipeline declared as data whose
stages read and write tables that have contracts."""

import ast
from pathlib import Path

import pytest

from graphwright.config import PipelineConfig
from graphwright.pipeline import definition, plan
from graphwright.storage import contracts

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "graphwright"
MAX_LINES = 400
FILES = ("sources", "vectors/", "lexical/", "graph/", "exports/")  # what stages read and write besides tables


def _module(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules() -> dict[str, Path]:
    return {_module(p): p for p in PACKAGE.rglob("*.py")}


def _imports(path: Path, modules: dict[str, Path]) -> set[str]:
    """Every graphwright module `path` imports, at module level or inside a function (a lazy
    import still ties the two modules together); `if TYPE_CHECKING:` blocks are left out."""
    tree = ast.parse(path.read_text())
    skip = {id(n) for node in ast.walk(tree) if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
            for n in ast.walk(node)}
    out = set()
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names if a.name in modules)
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("graphwright"):
            for a in node.names:  # `from pkg import submodule` imports the submodule
                out.add(f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in modules else node.module)
    return out


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index, low, stack, on, found, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_no_import_circles():
    modules = _modules()
    graph = {m: _imports(p, modules) - {m} for m, p in modules.items()}
    assert _cycles(graph) == []


def test_the_cycle_finder_finds_a_circle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


@pytest.mark.parametrize("module", sorted(_modules()))
def test_modules_stay_small(module):
    lines = len(_modules()[module].read_text().splitlines())
    assert lines <= MAX_LINES, f"{module} has {lines} lines: split it by role (see docs/architecture.md)"


def test_every_stage_reads_and_writes_declared_tables():
    known = set(contracts.all_schemas()) | set(FILES)
    for stage in (*definition.INDEX, *definition.DELETE):
        assert set(stage.reads) <= known, stage.name
        assert set(stage.writes) <= known, stage.name


def test_every_data_table_is_written_by_exactly_one_index_stage():
    writers: dict[str, list[str]] = {}
    for stage in definition.INDEX:
        for table in stage.writes:
            writers.setdefault(table, []).append(stage.name)
    # llm_cache and llm_calls are shared by every stage that calls an LLM
    shared = {"llm_cache", "llm_calls"}
    for table, names in writers.items():
        assert len(names) == 1 or table in shared, (table, names)
    from graphwright.storage.manifest import DATA_TABLES

    assert set(DATA_TABLES) <= set(writers)


def test_plan_lists_the_declared_stages_in_order():
    cfg = PipelineConfig()
    assert [r["stage"] for r in plan.describe(cfg)] == [s.name for s in definition.INDEX if s.enabled(cfg)]
    with_exports = PipelineConfig.model_validate({"publish": {"exports": ["graphrag"]}})
    assert [r["stage"] for r in plan.describe(with_exports)][-1] == "export"
