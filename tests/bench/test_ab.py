"""The A/B helpers: a child's flags, the sides of a run and their alternating order."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path

import pytest

from bench.ab import announced_runs, child_flags, timer_sides


def test_child_flags_name_each_value_and_each_set_switch_only() -> None:
    args = argparse.Namespace(per_commit=25_000, run_length=1, profile=True, no_collect=False)
    flags = child_flags(args, "per_commit", "run_length", "profile", "no_collect")
    assert flags == ["--per-commit=25000", "--run-length=1", "--profile"]


@dataclass(frozen=True)
class _Side:
    jobs: int
    timer_root: Path = Path("/this")
    label: str = ""
    profile: Path | None = None


def test_a_baseline_side_runs_the_baseline_timer_with_the_changes_given() -> None:
    options = _Side(jobs=5, profile=Path("x.svg"))
    assert timer_sides(options, None) == [options]
    sides = timer_sides(options, Path("/base"), profile=Path("x-baseline.svg"))
    assert sides == [
        options,
        _Side(5, Path("/base").resolve(), "baseline ", Path("x-baseline.svg")),
    ]


def test_runs_alternate_and_each_is_announced(capsys: pytest.CaptureFixture[str]) -> None:
    this, base = _Side(1), _Side(1, label="baseline ")
    assert list(announced_runs([this, base], 2)) == [this, base, base, this]
    lines = capsys.readouterr().out.splitlines()
    assert lines == [
        "--- run 1/2: this tree",
        "--- run 1/2: baseline ",
        "--- run 2/2: baseline ",
        "--- run 2/2: this tree",
    ]
