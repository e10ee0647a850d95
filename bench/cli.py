"""Command-line pieces the Kafka benchmarks share: children's extra environment, and a
run's options dataclass filled from the parsed command line."""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Sequence
from typing import Any, TypeVar

T = TypeVar("T")

_ENV_EXAMPLES = {
    "timer": "KAFKRON_TIMER_BATCH_SIZE=5000",
    "executor": "KAFKRON_EXECUTOR_MAX_HOLD_MS=0",
}


class _EnvItem(argparse.Action):
    """Collects ``NAME=VALUE`` items into an environment dict (a new dict per item, so the
    default is never changed)."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: str | Sequence[Any] | None,
        option_string: str | None = None,
    ) -> None:
        name, sep, value = str(values).partition("=")
        if not sep:
            parser.error(f"{option_string} wants NAME=VALUE, got {values!r}")
        setattr(namespace, self.dest, {**getattr(namespace, self.dest), name: value})


def add_env_options(parser: argparse.ArgumentParser, *children: str) -> None:
    """``--<child>-env NAME=VALUE`` (repeatable) per child process, e.g. ``"timer"``; parsed
    into a dict ``args.<child>_env``."""
    for child in children:
        parser.add_argument(
            f"--{child}-env", action=_EnvItem, default={}, metavar="NAME=VALUE",
            help=f"extra environment of the {child} child, e.g. {_ENV_EXAMPLES.get(child, 'A=B')}"
            "; repeatable",
        )  # fmt: skip


def options_from_args(cls: type[T], args: argparse.Namespace, **given: Any) -> T:
    """A run's options dataclass ``cls``: each field named as a parsed option takes its value,
    ``given`` the rest (fields named otherwise, or computed); other fields keep defaults."""
    names = {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    taken = {name: value for name, value in vars(args).items() if name in names}
    return cls(**{**taken, **given})
