from __future__ import annotations

import pytest
from _helpers import CORPUS, Indexed, copy_indexed, index_fresh, make_config

# Import the pipeline (and with it graphwright.progress, whose rich Console binds sys.stderr at
# import time) before any CliRunner swaps sys.stderr for a buffer it later closes.
import graphwright.pipeline.runner  # noqa: F401


@pytest.fixture
def config():
    return make_config()


@pytest.fixture(scope="session")
def indexed(tmp_path_factory) -> Indexed:
    """The test corpus indexed once with the fast profile. Read-only: use `indexed_copy` to modify."""
    return index_fresh(tmp_path_factory.mktemp("shared"), CORPUS)


@pytest.fixture
def indexed_copy(indexed, tmp_path) -> Indexed:
    """A private copy of the shared index and of its corpus (the copy's source paths differ)."""
    return copy_indexed(indexed, tmp_path)
