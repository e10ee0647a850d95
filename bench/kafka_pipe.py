"""Raw Kafka produce-then-consume of N small records: the baseline of every other benchmark.

Run: ``.venv/bin/python -m bench.kafka_pipe [--records 1000000] [--bootstrap HOST:PORT]``
(starts the local broker when no bootstrap is given).
"""

from __future__ import annotations

import argparse

from bench.pipe import measure_pipe
from infra.broker import LocalBroker
from infra.settings import BrokerSettings


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--bootstrap", default=None)
    args = parser.parse_args()
    bootstrap = args.bootstrap or LocalBroker(BrokerSettings()).start().bootstrap
    figures = measure_pipe(bootstrap, args.records)
    print(f"kafka_pipe records={figures.records}")
    print(f"  produce: {figures.produce_per_s:,.0f} msgs/s")
    print(f"  consume: {figures.consume_per_s:,.0f} msgs/s")


if __name__ == "__main__":
    main()
