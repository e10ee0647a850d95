"""The command-line helpers the benchmarks share: children's flags, env items, options."""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from bench.cli import add_env_options, options_from_args


def test_env_items_collect_into_a_dict_per_child_and_leave_the_default_alone() -> None:
    parser = argparse.ArgumentParser()
    add_env_options(parser, "timer", "executor")
    args = parser.parse_args(["--timer-env", "A=1", "--timer-env", "B=x=y", "--timer-env", "A=2"])
    assert args.timer_env == {"A": "2", "B": "x=y"}
    assert args.executor_env == {}
    assert parser.parse_args([]).timer_env == {}  # the first parse did not fill the default


def test_an_env_item_without_a_value_is_refused() -> None:
    parser = argparse.ArgumentParser()
    add_env_options(parser, "timer")
    with pytest.raises(SystemExit):
        parser.parse_args(["--timer-env", "KAFKRON_TIMER_BATCH_SIZE"])


@dataclass(frozen=True)
class _Options:
    jobs: int = 1
    profile_dir: Path | None = None
    timer_env: dict[str, str] = field(default_factory=dict)
    label: str = "default"


def test_options_take_same_named_options_then_the_given_fields() -> None:
    args = argparse.Namespace(jobs=7, profile=Path("x"), timer_env={"A": "1"}, bootstrap="b:9092")
    options = options_from_args(_Options, args, profile_dir=args.profile)
    assert options == _Options(jobs=7, profile_dir=Path("x"), timer_env={"A": "1"})
