"""Compiled hot modules: mypyc builds of the timer's and executor's per-record code.

``./dev`` (setup) compiles :data:`NATIVE_MODULES` with mypyc into ``.state/native/<tag>/``
(:mod:`infra.native`) and writes a manifest of the sources it compiled. A compiled package
calls :func:`extend_path` from its ``__init__``: when every listed source still hashes as
the manifest says, the build's directory goes in front of the package's ``__path__``, so
its modules import compiled; otherwise (a source edited since, another interpreter, no
build, ``KAFKRON_NATIVE=0``) everything imports from the ``.py`` files, as without a build.
A stale build is never half used: it is all the compiled modules or none.

Same code, same tests, either way: mypyc only adds the checks its types imply (an argument
of a compiled class's type must be one).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import sys
import sysconfig
from functools import cache
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

ROOT = Path(__file__).resolve().parent.parent
NATIVE_MODULES: tuple[str, ...] = (
    "services.executor.assignment",
    "services.executor.backpressure",
    "services.executor.chains",
    "services.executor.commit",
    "services.executor.deadlines",
    "services.executor.dedup",
    "services.executor.due_view",
    "services.executor.holds",
    "services.executor.lane_buffers",
    "services.executor.loop",
    "services.executor.offsets",
    "services.executor.outcomes",
    "services.executor.result_bytes",
    "services.executor.runs",
    "services.timer.drain",
    "services.timer.fairness",
    "services.timer.due_bytes",
    "services.timer.firing",
    "services.timer.inputs",
    "services.timer.keys",
    "services.timer.pacing",
    "services.timer.record_bytes",
    "services.timer.results",
    "services.timer.retention",
    "services.timer.state",
    "services.timer.stored_state",
    "services.timer.wheel",
)
"""What mypyc compiles: the modules a record passes through, in packages that call
:func:`extend_path`. Left out on purpose: modules tests replace parts of at run time
(``streams.state``), ``services.executor.runner`` (a variable typed as one exception class
holds others, which compiled code refuses) and ones mypyc cannot compile yet
(``services.executor.consuming``: an attribute named ``_thread`` becomes a C keyword)."""
GENERATED_INPUTS: tuple[str, ...] = (
    "streams/avro_source.py",
    "streams/avro_reader.py",
    "streams/generated_modules.py",
    "schemas/*.avsc",
    "schemas/bounds.json",
)
"""What the compiled generated decoders (:mod:`streams.generated_modules`) are made from
besides the listed modules: the generator and the schemas. A change to any makes the build
stale, as an edited module does."""
MANIFEST = "manifest.json"
DISABLE_ENV = "KAFKRON_NATIVE"


def build_dir(root: Path = ROOT) -> Path:
    """Where this interpreter's build lives (one per interpreter: extensions are ABI-bound)."""
    return root / ".state" / "native" / sys.implementation.cache_tag


def source_path(module: str, root: Path = ROOT) -> Path:
    return root.joinpath(*module.split(".")).with_suffix(".py")


def source_hashes(root: Path = ROOT) -> dict[str, str]:
    """The SHA-256 of each listed module's source, as the manifest records them."""
    return {
        module: hashlib.sha256(source_path(module, root).read_bytes()).hexdigest()
        for module in NATIVE_MODULES
    }


def input_hashes(root: Path = ROOT) -> dict[str, str]:
    """The SHA-256 of each file of :data:`GENERATED_INPUTS`, by its path under ``root``."""
    paths = sorted({path for pattern in GENERATED_INPUTS for path in root.glob(pattern)})
    return {
        path.relative_to(root).as_posix(): hashlib.sha256(path.read_bytes()).hexdigest()
        for path in paths
    }


def manifest(root: Path = ROOT) -> dict[str, Any]:
    """The build's manifest (empty without one)."""
    try:
        loaded: dict[str, Any] = json.loads((build_dir(root) / MANIFEST).read_text())
    except (OSError, ValueError):
        return {}
    return loaded


def abi() -> str:
    """What a build is bound to: the interpreter's extension suffix and version."""
    return f"{sysconfig.get_config_var('EXT_SUFFIX')} {sys.version}"


def stale_reason(root: Path = ROOT) -> str | None:
    """Why the build in :func:`build_dir` cannot be used now, or None when it can."""
    manifest_path = build_dir(root) / MANIFEST
    try:
        manifest = json.loads(manifest_path.read_text())
    except FileNotFoundError:
        return f"no build in {manifest_path.parent} (./dev setup builds it)"
    except (OSError, ValueError) as exc:
        return f"unreadable {manifest_path}: {exc}"
    if manifest.get("abi") != abi():
        return f"built for another interpreter ({manifest.get('abi')!r})"
    built = manifest.get("modules", {})
    changed = sorted(m for m, digest in source_hashes(root).items() if built.get(m) != digest)
    if changed:
        return f"sources changed since the build: {', '.join(changed)} (./dev setup rebuilds)"
    inputs = input_hashes(root)
    if manifest.get("inputs") != inputs:
        built_inputs = manifest.get("inputs") or {}
        changed = sorted(set(inputs) ^ set(built_inputs))
        changed += sorted(
            p for p in set(inputs) & set(built_inputs) if inputs[p] != built_inputs[p]
        )
        return f"generator or schemas changed since the build: {', '.join(changed)}"
    return None


@cache
def active(root: Path = ROOT) -> bool:
    """Whether the compiled modules are used in this process (decided once, logged once)."""
    if os.environ.get(DISABLE_ENV, "1") == "0":
        return False
    reason = stale_reason(root)
    if reason is None:
        return True
    # No build at all is a machine without a compiler (setup said so once); a build that
    # no longer matches is a developer's edit that runs slower until rebuilt: say so.
    no_build = not (build_dir(root) / MANIFEST).exists()
    log.log(
        logging.INFO if no_build else logging.WARNING,
        "compiled modules not used, running pure Python: %s",
        reason,
    )
    return False


def extend_path(package_path: list[str], package: str, root: Path = ROOT) -> list[str]:
    """``package``'s ``__path__`` with the build's directory first when the build is fresh."""
    if not active(root):
        return package_path
    directory = build_dir(root)
    if str(directory) not in sys.path:  # the group's shared library is a top-level module
        sys.path.append(str(directory))
    return [str(directory.joinpath(*package.split("."))), *package_path]


def compiled(module: object) -> bool:
    """Whether an imported module is a compiled extension."""
    return str(getattr(module, "__file__", "")).endswith(
        str(sysconfig.get_config_var("EXT_SUFFIX"))
    )
