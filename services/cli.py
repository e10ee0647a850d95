"""The ``kafkron`` command: the local broker, topics, the services and the local cluster."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence

from infra.broker import LocalBroker
from infra.fetch import fetch_jars
from infra.settings import BrokerSettings
from services import commands
from streams.admin import ensure_topics
from streams.exceptions import KafkronError
from streams.settings import KafkaSettings

Command = Callable[[argparse.Namespace], int]


def _broker(args: argparse.Namespace) -> int:
    settings = BrokerSettings()
    broker = LocalBroker(settings)
    if args.action == "fetch":
        print(f"Kafka jars in {fetch_jars(settings)}")
    elif args.action == "start":
        state = broker.start()
        print(f"broker ready on {state.bootstrap} (pid {state.pid}, home {broker.home})")
    elif args.action == "stop":
        print("broker stopped" if broker.stop() else "no broker was running")
    else:
        running = broker.running_state()
        if running is None:
            print(f"no broker running from {broker.home}")
            return 1
        ok = broker.answers(running.bootstrap)
        verdict = "ready" if ok else "NOT answering"
        print(f"broker pid {running.pid} on {running.bootstrap}: {verdict}")
        return 0 if ok else 1
    return 0


def _topics(args: argparse.Namespace) -> int:
    settings = KafkaSettings()
    for report in ensure_topics(settings):
        verb = "created" if report.created else "exists"
        print(f"{verb:8} {report.name} ({report.partitions} partitions)")
    return 0


def _up(args: argparse.Namespace) -> int:
    from services.local_cluster import run_local_cluster

    return run_local_cluster(BrokerSettings(), KafkaSettings(), demo=args.demo, check=args.check)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of every ``kafkron`` subcommand."""
    parser = argparse.ArgumentParser(prog="kafkron", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    broker = sub.add_parser("broker", help="the local single-node Kafka broker")
    broker.add_argument("action", choices=["fetch", "start", "stop", "status"])
    broker.set_defaults(func=_broker)
    topics = sub.add_parser("topics", help="kafkron's topics")
    topics.add_argument("action", choices=["create"])
    topics.set_defaults(func=_topics)
    up = sub.add_parser("up", help="broker + topics + every service, until Ctrl-C")
    up.add_argument("--demo", action="store_true", help="submit demo jobs and show them run")
    up.add_argument("--check", action="store_true", help="start everything, report, then stop")
    up.set_defaults(func=_up)
    for register in _service_commands():
        register(sub)
    return parser


def _service_commands() -> list[commands.Registrar]:
    """Subcommands that each service contributes."""

    return commands.REGISTRARS


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``kafkron`` console script."""
    args = build_parser().parse_args(argv)
    func: Command = args.func
    try:
        return func(args)
    except KafkronError as exc:
        print(f"kafkron: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
