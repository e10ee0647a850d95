"""Range scans over a store transaction holding many writes: the timer's backlog pattern.

Run: ``.venv/bin/python -m bench.txn_range [--baseline-root DIR] [--repeat N]``

While a herd's results come in, one wheel transaction of the timer collects many writes
before it commits: deletes of fired entries low in the key space (the collection of fired
fast entries, below the fired-through watermark) and tombstone entries far ahead (one per
finished one-off). Every punctuation scans the due range between them, and the collection
scans on from where it stopped. This replays that pattern on a real RocksDB (no Kafka):
per punctuation one due scan that finds nothing, one collection scan plus its deletes, and
``--results`` tombstone writes; a transaction is flushed every ``--punctuations``.

Prints CPU per due scan and per punctuation. With ``--baseline-root`` the same pattern runs
in a child process on that tree's ``streams.state`` too, alternating, for a ratio.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path

_STORED = 200_000  # fired fast entries waiting to be collected
_INSTANT_MS = 1_700_000_000_000
_RETENTION_MS = 7 * 24 * 3600 * 1000


def _key(fire_ms: int, index: int, kind: bytes) -> bytes:
    return fire_ms.to_bytes(8, "big") + f"job-{index:08d}".encode() + kind


def replay(punctuations: int, results: int, collect: int, transactions: int) -> dict[str, float]:
    """Run the pattern; CPU seconds of the due scans and of everything, per call."""
    from streams.state.partition import PartitionStore

    folder = Path(tempfile.mkdtemp(prefix="bench-txn-range-"))
    store = PartitionStore(folder / "0", 0, "bench.changelog")
    try:
        store.write({_key(_INSTANT_MS, i, b"S"): b"F" * 60 for i in range(_STORED)}, 0)
        watermark = _key(_INSTANT_MS, _STORED, b"S")
        due_bound = (_INSTANT_MS + 60_000).to_bytes(8, "big")
        tombstones = iter(
            [
                _key(_INSTANT_MS + _RETENTION_MS, i, b"T")
                for i in range(results * punctuations * transactions)
            ]
        )  # built ahead: the timed loop is the transaction's work only
        collect_from, offset = b"", 1
        scan_s = total_s = 0.0
        scans = 0
        for _ in range(transactions):
            txn = store.begin()
            started = time.process_time()
            for _ in range(punctuations):
                scan_started = time.process_time()
                assert txn.iter_range(watermark, due_bound, 1000) == []
                scan_s += time.process_time() - scan_started
                scans += 1
                fired = txn.iter_range(collect_from, watermark, collect)
                for key, _ in fired:
                    txn.delete(key)
                if fired:
                    collect_from = fired[-1][0] + b"\x00"
                for _ in range(results):
                    txn.set(next(tombstones), b"T")
            total_s += time.process_time() - started
            txn.prepare(_NullChangelog())
            txn.flush(offset)
            offset += 1
        calls = punctuations * transactions
        return {"scan_us": scan_s / scans * 1e6, "punctuation_us": total_s / calls * 1e6}
    finally:
        store.close()
        shutil.rmtree(folder)


class _NullChangelog:
    def produce(
        self, topic: str, key: bytes | None, value: bytes | None, partition: int | None = None
    ) -> None:
        pass


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--punctuations", type=int, default=100, help="per transaction")
    parser.add_argument("--results", type=int, default=100, help="tombstones per punctuation")
    parser.add_argument("--collect", type=int, default=100, help="deletes per punctuation")
    parser.add_argument("--transactions", type=int, default=5)
    parser.add_argument("--baseline-root", type=Path, default=None)
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        figures = replay(args.punctuations, args.results, args.collect, args.transactions)
        scan_us, punctuation_us = figures["scan_us"], figures["punctuation_us"]
        print(f"due scan {scan_us:.1f} us, punctuation {punctuation_us:.1f} us")
        return
    from bench.ab import compare_with_args  # here: a child runs with the other tree's bench

    compare_with_args(Path(__file__), args, "punctuations", "results", "collect", "transactions")


if __name__ == "__main__":
    main()
