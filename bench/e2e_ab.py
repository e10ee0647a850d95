"""The end-to-end herd (``bench.e2e_herd``) alternating between this tree and a baseline tree.

Run: ``.venv/bin/python -m bench.e2e_ab --baseline-root DIR [--repeat 2] -- [e2e_herd options]``
(for example ``-- --jobs 100000 --skip-pipe``). Each run is one ``bench.e2e_herd`` child whose
timer runs from this tree or from ``--baseline-root``; the executors always run from
``--baseline-root`` (a snapshot: a shared working tree changes under a session), unless
``--executors-follow``: then they run from the same tree as the timer (run it from a snapshot
of this tree too, e.g. a ``git worktree``), so a change to both services is compared whole.
The bench itself runs from this tree. Every other run goes baseline first, so load that
drifts over the session hits both sides alike. Prints each run's completion time and CPU per
execution.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

from bench.ab import ROOT, alternating

_CHILD = (
    "import sys; from pathlib import Path; import bench.herd as herd; "
    "herd.TimerProcess.root = Path(sys.argv[1]); import bench.e2e_herd as e2e; "
    "e2e.ExecutorChild.root = Path(sys.argv[2]); "
    "sys.argv = ['bench.e2e_herd', *sys.argv[3:]]; e2e.main()"
)
_KEPT = ("SUCCEEDED committed", "results:", "STOPPED", "raw pipe:")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--baseline-root", type=Path, required=True)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument(
        "--executors-follow",
        action="store_true",
        help="run the executors from the same tree as the timer (default: the baseline)",
    )
    parser.add_argument("herd_args", nargs="*", help="options of bench.e2e_herd, after --")
    args = parser.parse_args()
    trees = [("this tree", ROOT), ("baseline", args.baseline_root.resolve())]
    for run, (label, root) in alternating(trees, args.repeat):
        executors = str(root if args.executors_follow else trees[1][1])
        command = [sys.executable, "-c", _CHILD, str(root), executors, *args.herd_args]
        done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, check=False)
        lines = [line.strip() for line in done.stdout.splitlines()]
        kept = [line for line in lines if any(mark in line for mark in _KEPT)]
        print(f"run {run + 1} {label:9} (exit {done.returncode}):", flush=True)
        for line in kept or done.stdout.splitlines()[-15:] + done.stderr.splitlines()[-15:]:
            print(f"    {line}", flush=True)


if __name__ == "__main__":
    main()
