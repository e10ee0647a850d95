"""A/B runs that alternate: noise that drifts over a session (load) hits both sides alike."""

from __future__ import annotations

import argparse
import dataclasses
import os
import subprocess
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, Protocol, TypeVar

T = TypeVar("T")


class Side(Protocol):
    """One side of an A/B run: an options dataclass with a ``label`` (``""``: this tree)."""

    @property
    def label(self) -> str: ...


S = TypeVar("S", bound=Side)

ROOT = Path(__file__).resolve().parent.parent


def alternating(sides: Sequence[T], repeat: int) -> Iterator[tuple[int, T]]:
    """``(run, side)`` for ``repeat`` runs of every side, every other run in reverse order."""
    for run in range(repeat):
        for side in sides if run % 2 == 0 else sides[::-1]:
            yield run, side


def timer_sides(options: S, baseline_root: Path | None, **baseline_changes: Any) -> list[S]:
    """``options``; with ``baseline_root`` also the same run with that checkout's timer
    (its ``timer_root``), labelled ``"baseline "``, ``baseline_changes`` applied."""
    sides = [options]
    if baseline_root is not None:
        baseline = dataclasses.replace(  # type: ignore[type-var]
            options, timer_root=baseline_root.resolve(), label="baseline ", **baseline_changes
        )
        sides.append(baseline)
    return sides


def announced_runs(sides: Sequence[S], repeat: int) -> Iterator[S]:
    """The sides in :func:`alternating` order, each run announced (``--- run 1/3: this tree``)."""
    for run, side in alternating(sides, repeat):
        print(f"--- run {run + 1}/{repeat}: {side.label or 'this tree'}", flush=True)
        yield side


def compare_trees(
    script: Path, child_args: list[str], baseline_root: Path | None, repeat: int
) -> None:
    """Run ``script --child *child_args`` with this tree and with ``baseline_root``,
    alternating, ``repeat`` times each; print each child's output line.

    The child runs in the tree (first on ``PYTHONPATH``, and its working directory) but from
    this tree's ``script``, so the baseline need not have the benchmark. Import this module
    in the parent only: a child importing it would get the baseline's ``bench``.
    """
    trees = [("this tree", ROOT)]
    if baseline_root is not None:
        trees.append(("baseline", baseline_root.resolve()))
    command = [sys.executable, str(script.resolve()), "--child", *child_args]
    for run, (label, root) in alternating(trees, repeat):
        env = {**os.environ, "PYTHONPATH": str(root)}
        done = subprocess.run(
            command, cwd=root, env=env, capture_output=True, text=True, check=True
        )
        print(f"run {run + 1} {label:9}: {done.stdout.strip()}")


def child_flags(args: argparse.Namespace, *names: str) -> list[str]:
    """The options ``names`` (argparse dests) as a child's command line: ``--name=value``,
    a ``store_true`` option as its bare flag when it is set (and left out when not)."""
    flags = []
    for name in names:
        value, flag = getattr(args, name), f"--{name.replace('_', '-')}"
        if isinstance(value, bool):
            flags.extend([flag] * value)
        else:
            flags.append(f"{flag}={value}")
    return flags


def compare_with_args(script: Path, args: argparse.Namespace, *names: str) -> None:
    """A micro-benchmark's parent side: print the options ``names`` and the load, then
    :func:`compare_trees` with them (``args.baseline_root``, ``args.repeat``)."""
    child_args = child_flags(args, *names)
    print(f"{' '.join(child_args)}, load {os.getloadavg()[0]:.1f}")
    compare_trees(script, child_args, args.baseline_root, args.repeat)


def add_ab_options(parser: argparse.ArgumentParser, process: str, runs: str) -> None:
    """``--baseline-root DIR`` (also run ``process`` from that checkout, alternating) and
    ``--repeat N`` (``runs`` per checkout)."""
    parser.add_argument(
        "--baseline-root", type=Path, default=None,
        help=f"also run the {process} of this checkout (e.g. `git archive HEAD | tar -x -C "
        "DIR`), alternating with this one's, for a same-run A/B",
    )  # fmt: skip
    parser.add_argument("--repeat", type=int, default=1, help=f"{runs} per checkout")
