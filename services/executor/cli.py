"""``kafkron executor`` (run one executor) and ``kafkron dlq list|replay`` subcommands."""

from __future__ import annotations

import argparse

from streams.settings import KafkaSettings


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the executor's subcommands to the ``kafkron`` parser."""
    executor = sub.add_parser(
        "executor", help="run one executor (settings: KAFKRON_EXECUTOR_*, KAFKRON_*)"
    )
    executor.set_defaults(func=_run_executor)
    dlq = sub.add_parser("dlq", help="the dead-letter queue")
    actions = dlq.add_subparsers(dest="dlq_action", required=True)
    listing = actions.add_parser("list", help="print every dead letter, oldest first")
    listing.add_argument("--limit", type=int, default=None, help="print at most this many")
    listing.set_defaults(func=_list)
    replay = actions.add_parser(
        "replay", help="run a dead execution again: attempt 1, trigger REPLAY, same id"
    )
    replay.add_argument("execution_id")
    replay.set_defaults(func=_replay)


def _run_executor(args: argparse.Namespace) -> int:
    from services.executor import main

    main.main()
    return 0


def _list(args: argparse.Namespace) -> int:
    from services.executor.dlq import describe, read_dead_letters
    from streams.codec import Codec

    rows = 0
    for row in read_dead_letters(KafkaSettings(), Codec.from_directory()):
        if args.limit is not None and rows >= args.limit:
            break
        print(describe(row))
        rows += 1
    print(f"{rows} dead letter(s)")
    return 0


def _replay(args: argparse.Namespace) -> int:
    from services.executor.dlq import replay
    from streams.codec import Codec

    event = replay(KafkaSettings(), Codec.from_directory(), args.execution_id)
    print(
        f"replayed {event['execution_id']} (handler {event['handler']}, priority "
        f"{event['priority']}) at {event['emitted_at_ms']}"
    )
    return 0
