"""A/B runs that alternate: noise that drifts over a session (load) hits both sides alike."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")

ROOT = Path(__file__).resolve().parent.parent


def alternating(sides: Sequence[T], repeat: int) -> Iterator[tuple[int, T]]:
    """``(run, side)`` for ``repeat`` runs of every side, every other run in reverse order."""
    for run in range(repeat):
        for side in sides if run % 2 == 0 else sides[::-1]:
            yield run, side


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


def add_ab_options(parser: argparse.ArgumentParser, process: str, runs: str) -> None:
    """``--baseline-root DIR`` (also run ``process`` from that checkout, alternating) and
    ``--repeat N`` (``runs`` per checkout)."""
    parser.add_argument(
        "--baseline-root", type=Path, default=None,
        help=f"also run the {process} of this checkout (e.g. `git archive HEAD | tar -x -C "
        "DIR`), alternating with this one's, for a same-run A/B",
    )  # fmt: skip
    parser.add_argument("--repeat", type=int, default=1, help=f"{runs} per checkout")
