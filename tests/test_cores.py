"""A container's CPU quota bounds the cores graphwright sizes its thread and process pools by."""

from __future__ import annotations

import os

import pytest

from graphwright.util import cores


def write(root, name, text):
    path = root / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


@pytest.mark.parametrize(
    "files, expected",
    [
        ({"cpu.max": "150000 100000\n"}, 2),  # docker --cpus 1.5: two cores, rounded up
        ({"cpu.max": "50000 100000\n"}, 1),
        ({"cpu.max": "max 100000\n"}, None),
        ({"cpu/cpu.cfs_quota_us": "100000\n", "cpu/cpu.cfs_period_us": "100000\n"}, 1),  # cgroup v1
        ({"cpu/cpu.cfs_quota_us": "-1\n", "cpu/cpu.cfs_period_us": "100000\n"}, None),
        ({"cpu.max": "garbage"}, None),
        ({"cpu.max": "100000 0"}, None),
        ({}, None),
    ],
)
def test_the_cgroup_quota_is_read_in_whole_cores(tmp_path, files, expected):
    for name, text in files.items():
        write(tmp_path, name, text)
    assert cores.cgroup_cpu_limit(tmp_path) == expected


def test_usable_cores_are_capped_by_the_quota(tmp_path, monkeypatch):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2, 3}, raising=False)
    monkeypatch.setattr(cores, "CGROUP_ROOT", tmp_path, raising=False)
    assert cores.usable_cores() == 4
    write(tmp_path, "cpu.max", "100000 100000\n")
    assert cores.usable_cores() == 1
