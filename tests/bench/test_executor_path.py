"""The executor record-path micro-benchmark runs every record to SUCCEEDED and reports it."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_every_record_runs_and_the_figures_are_printed() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "bench.executor_path", "--child", "--records=3000",
         "--partitions=3", "--per-commit=2000"],
        cwd=ROOT, capture_output=True, text=True, timeout=120, check=True,
    )  # fmt: skip
    line = done.stdout.strip().splitlines()[-1]
    match = re.fullmatch(
        r"record path ([\d.]+) us CPU per execution \(([\d.]+) in commits\), ([\d.]+) changelog "
        r"records and ([\d.]+) outputs per execution",
        line,
    )
    assert match is not None, line
    cpu_us, commit_us, changelog, outputs = map(float, match.groups())
    assert 0 < commit_us < cpu_us
    assert outputs == 1.0  # one SUCCEEDED per execution, nothing else
    assert 0 < changelog <= 1.01  # the dedup changelog of the two commits (v3: ~0.001)
