"""The service subcommands ``services/commands.py`` registers, and the member each probe names."""

from __future__ import annotations

import importlib
import os

import click
import pytest

from services import commands
from services.dag.settings import default_instance_id as dag_default_id
from services.executor.settings import default_worker_id
from services.readiness import Probe, Readiness
from services.timer.settings import default_instance_id as timer_default_id
from streams.settings import KafkaSettings

_ID_ENV = {
    "timer": ("KAFKRON_TIMER_INSTANCE_ID", timer_default_id),
    "dag": ("KAFKRON_DAG_INSTANCE_ID", dag_default_id),
    "executor": ("KAFKRON_EXECUTOR_WORKER_ID", default_worker_id),
}


def test_up_runs_the_processors_before_the_api_and_each_is_a_command() -> None:
    assert [name for name, _ in commands.LOCAL_SERVICES] == ["timer", "dag", "executor", "api"]
    group = click.Group("kafkron")
    for register in commands.REGISTRARS:
        register(group)
    for name, argv in commands.LOCAL_SERVICES:
        assert argv == [name]
        command = group.commands[name]
        assert command.help and command.epilog and "KAFKRON_BOOTSTRAP_SERVERS" in command.epilog
        assert name in commands.READINESS


@pytest.mark.parametrize("module", ["timer", "dag", "executor", "ingest"])
def test_each_command_runs_a_main_that_exists(module: str) -> None:
    assert callable(importlib.import_module(f"services.{module}.main").main)


@pytest.mark.parametrize("service", sorted(_ID_ENV))
def test_the_probe_names_the_member_the_started_process_runs_as(
    service: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[tuple[str, str | None]] = []

    def fake_group_probe(kafka: KafkaSettings, group_id: str, member: str | None = None) -> Probe:
        seen.append((group_id, member))
        return lambda: Readiness(True, group_id)

    monkeypatch.setattr(commands, "group_probe", fake_group_probe)
    env, default_id = _ID_ENV[service]
    kafka = KafkaSettings(namespace="ns.")
    pid = os.getpid() + 1
    monkeypatch.delenv(env, raising=False)
    commands.READINESS[service](kafka, pid)
    monkeypatch.setenv(env, "set-by-env")
    commands.READINESS[service](kafka, pid)
    assert seen == [(f"ns.{service}", default_id(pid)), (f"ns.{service}", "set-by-env")]
