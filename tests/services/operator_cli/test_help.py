"""``--help`` of every command lists its options and the environment variables it reads;
``--version``; usage errors exit 2 (no broker needed)."""

from __future__ import annotations

from importlib.metadata import version

import click
import pytest

from services import cli


def _commands(group: click.Group, path: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    found = []
    for name, command in sorted(group.commands.items()):
        found.append((*path, name))
        if isinstance(command, click.Group):
            found.extend(_commands(command, (*path, name)))
    return found


COMMANDS = _commands(cli.root)


def _command(path: tuple[str, ...]) -> click.Command:
    command: click.Command = cli.root
    for name in path:
        assert isinstance(command, click.Group)
        command = command.commands[name]
    return command


def test_every_command_of_the_issue_is_there() -> None:
    wanted = {("submit",), ("list",), ("show",), ("history",), ("cancel",), ("pause",),
              ("resume",), ("trigger",), ("dlq", "list"), ("dlq", "replay"), ("backfill",),
              ("broker",), ("topics",), ("up",), ("timer",), ("dag",), ("executor",),
              ("api",)}  # fmt: skip
    assert wanted <= set(COMMANDS), wanted - set(COMMANDS)


@pytest.mark.parametrize("path", COMMANDS, ids=" ".join)
def test_help_lists_options_and_environment(
    path: tuple[str, ...], capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main([*path, "--help"]) == 0
    text = capsys.readouterr().out
    command = _command(path)
    assert text.startswith(f"Usage: kafkron {' '.join(path)}")
    if isinstance(command, click.Group):
        assert all(name in text for name in command.commands)
        return
    assert "KAFKRON_" in text, text  # every command reads some of the environment
    for param in command.params:
        if isinstance(param, click.Option):
            assert any(opt in text for opt in param.opts), (param.opts, text)
            envvar = param.envvar
            if isinstance(envvar, str):
                assert envvar in text, (envvar, text)
    names = {o for p in command.params if isinstance(p, click.Option) for o in p.opts}
    if "--api" in names:
        assert "KAFKRON_API_URL" in text and "KAFKRON_PROFILE" in text
    if "--bootstrap" in names:
        for var in ("KAFKRON_BOOTSTRAP_SERVERS", "KAFKRON_NAMESPACE", "KAFKRON_LIBRDKAFKA"):
            assert var in text, (var, text)


def test_root_help_names_the_commands_and_the_exit_codes(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert cli.main(["--help"]) == 0
    text = capsys.readouterr().out
    assert "Exit codes: 0 done, 1 refused" in text
    assert "KAFKRON_API_URL" in text
    assert all(name in text for name in cli.root.commands)


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["--version"]) == 0
    assert capsys.readouterr().out == f"kafkron, version {version('kafkron')}\n"


@pytest.mark.parametrize(
    "args", [[], ["nonsense"], ["broker", "explode"], ["dlq"], ["dlq", "list", "--limit", "-1"]]
)
def test_usage_errors_exit_2(args: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(args) == 2
    assert "Usage: kafkron" in capsys.readouterr().err
