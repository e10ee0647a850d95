from __future__ import annotations

import functools
import textwrap
from pathlib import Path
from typing import Annotated

import pytest
from pydantic import TypeAdapter, ValidationError
from pydantic.types import StringConstraints

from services.executor.context import HandlerContext
from services.executor.exceptions import HandlerNotFoundError
from services.executor.handlers import (
    HandlerKind,
    HandlerRegistry,
    is_async_callable,
    is_valid_handler_name,
)
from streams.exceptions import ConfigurationError
from streams.identity import HANDLER_NAME_PATTERN

VALID = ["a", "reports.nightly", "billing.v2.charge_all", "x1", "a.b_c.d9", "a._x", "a.1"]
INVALID = [
    "",
    "Reports",
    "1abc",
    "_a",
    "a..b",
    "a.",
    ".a",
    "a-b",
    "a b",
    "reports.nightly\n",
    "a.B",
    "ünïcode",
    "a" * 201,
]


def sync_handler(ctx: HandlerContext) -> None:
    return None


async def async_handler(ctx: HandlerContext) -> None:
    return None


class AsyncCallable:
    async def __call__(self, ctx: HandlerContext) -> None:
        return None


@pytest.mark.parametrize("name", VALID)
def test_valid_names(name: str) -> None:
    assert is_valid_handler_name(name)


@pytest.mark.parametrize("name", INVALID)
def test_invalid_names_are_refused(name: str) -> None:
    assert not is_valid_handler_name(name)
    with pytest.raises(ConfigurationError, match="invalid handler name"):
        HandlerRegistry().register(name, sync_handler)


def test_the_exported_pattern_means_the_same_in_pydantic() -> None:
    adapter = TypeAdapter(Annotated[str, StringConstraints(pattern=HANDLER_NAME_PATTERN)])
    for name in VALID:
        adapter.validate_python(name)
    for name in INVALID[:-1]:  # the length limit is separate from the pattern
        with pytest.raises(ValidationError):
            adapter.validate_python(name)


def test_register_and_resolve() -> None:
    registry = HandlerRegistry()
    registered = registry.register("reports.nightly", sync_handler)
    assert registry.resolve("reports.nightly") is registered
    assert registered.kind is HandlerKind.PYTHON
    assert registered.is_async is False
    assert "reports.nightly" in registry
    assert len(registry) == 1
    assert registry.names() == ["reports.nightly"]


def test_resolve_unknown_names_the_registered_ones() -> None:
    registry = HandlerRegistry()
    registry.register("b.two", sync_handler)
    registry.register("a.one", sync_handler)
    with pytest.raises(HandlerNotFoundError, match=r"'nope'.*a\.one, b\.two") as info:
        registry.resolve("nope")
    assert info.value.retryable is False


def test_duplicates_and_non_callables_are_refused() -> None:
    registry = HandlerRegistry()
    registry.register("a", sync_handler)
    with pytest.raises(ConfigurationError, match="already registered"):
        registry.register("a", async_handler)
    with pytest.raises(ConfigurationError, match="not callable"):
        registry.register("b", "not a function")  # type: ignore[arg-type]


def test_async_is_detected_once_at_registration() -> None:
    assert is_async_callable(async_handler)
    assert is_async_callable(functools.partial(async_handler))
    assert is_async_callable(AsyncCallable())
    assert not is_async_callable(sync_handler)
    assert not is_async_callable(lambda ctx: None)
    registry = HandlerRegistry()
    assert registry.register("x", AsyncCallable()).is_async


@pytest.fixture
def plugin_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An importable module and an installed distribution declaring kafkron.handlers."""
    (tmp_path / "kafkron_test_plugin.py").write_text(
        textwrap.dedent(
            """
            async def nightly(ctx):
                return None

            def cleanup(ctx):
                return None

            class Group:
                @staticmethod
                def member(ctx):
                    return None

            NOT_CALLABLE = 3
            """
        )
    )
    dist = tmp_path / "kafkron_test_plugin-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: kafkron-test-plugin\nVersion: 1.0\n"
    )
    (dist / "entry_points.txt").write_text(
        "[kafkron.handlers]\n"
        "reports.nightly = kafkron_test_plugin:nightly\n"
        "ops.cleanup = kafkron_test_plugin:cleanup\n"
        "[kafkron.broken_handlers]\n"
        "broken.one = kafkron_test_plugin:missing\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    return tmp_path


def test_load_entry_points(plugin_dir: Path) -> None:
    registry = HandlerRegistry()
    assert registry.load_entry_points() == ["ops.cleanup", "reports.nightly"]
    nightly = registry.resolve("reports.nightly")
    assert nightly.is_async
    assert "entry point" in nightly.source
    assert registry.resolve("ops.cleanup").is_async is False


def test_a_broken_entry_point_is_a_configuration_error(plugin_dir: Path) -> None:
    with pytest.raises(ConfigurationError, match=r"broken\.one"):
        HandlerRegistry().load_entry_points("kafkron.broken_handlers")


def test_load_specs(plugin_dir: Path) -> None:
    registry = HandlerRegistry()
    names = registry.load_specs(
        [
            "reports.nightly = kafkron_test_plugin:nightly",
            "ops.member=kafkron_test_plugin:Group.member",
        ]
    )
    assert names == ["reports.nightly", "ops.member"]
    assert registry.resolve("reports.nightly").is_async
    assert not registry.resolve("ops.member").is_async


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("no_equals", "must look like"),
        ("a=kafkron_test_plugin", "must look like"),
        ("a=kafkron_test_plugin:", "invalid attribute"),
        ("a=os.system; rm:x", "must look like"),
        ("a=kafkron_no_such_module:x", "cannot load"),
        ("a=kafkron_test_plugin:missing", "cannot load"),
        ("a=kafkron_test_plugin:NOT_CALLABLE", "not callable"),
        ("Bad=kafkron_test_plugin:nightly", "invalid handler name"),
    ],
)
def test_bad_specs_are_configuration_errors(plugin_dir: Path, spec: str, message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        HandlerRegistry().load_spec(spec)
