"""Build the compiled hot modules (:mod:`streams.native`) with mypyc.

Run: ``.venv/bin/python -m infra.native [build | status] [--force]``. ``./dev`` runs
``build`` at setup: it compiles only when the sources or the interpreter changed since the
last build, and when it cannot (no C compiler, no Python headers) it says what to install
and leaves kafkron on pure Python, which runs the same code more slowly.

mypyc writes its C and runs ``setup.py build_ext`` in a scratch directory under ``.state/``
(out of the checkout's root: setuptools would read the project's ``pyproject.toml``); the
extensions go to :func:`streams.native.build_dir` with the manifest written last, so an
interrupted build is never taken for a finished one.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import time
from collections.abc import Iterator
from pathlib import Path

from streams import generated_modules, native
from streams.exceptions import KafkronError


class NativeBuildError(KafkronError):
    """The compiled modules could not be built (kafkron still runs, in pure Python)."""


def missing_tools() -> list[str]:
    """What a build needs and this machine lacks, as a person would install it."""
    missing = []
    compiler = (sysconfig.get_config_var("CC") or "cc").split()[0]  # unset in some builds
    if shutil.which(compiler) is None:
        missing.append("a C compiler (e.g. apt-get install gcc)")
    if not Path(sysconfig.get_paths()["include"], "Python.h").is_file():
        version = f"{sys.version_info.major}.{sys.version_info.minor}"
        missing.append(f"the Python {version} headers (e.g. apt-get install python{version}-dev)")
    return missing


@contextlib.contextmanager
def _working_directory(path: Path) -> Iterator[None]:
    previous = Path.cwd()
    os.chdir(path)
    try:
        yield
    finally:
        os.chdir(previous)


def build(root: Path = native.ROOT) -> Path:
    """Compile :data:`~streams.native.NATIVE_MODULES` into a fresh build directory."""
    missing = missing_tools()
    if missing:
        raise NativeBuildError(f"cannot compile: install {' and '.join(missing)}")
    try:
        import mypyc.build  # noqa: F401
        import setuptools  # noqa: F401
    except ImportError as exc:
        raise NativeBuildError(f"cannot compile: {exc} (pip install -e '.[dev]')") from exc
    target = native.build_dir(root)
    scratch = root / ".state" / "native-build"
    for directory in (target, scratch):
        shutil.rmtree(directory, ignore_errors=True)
        directory.mkdir(parents=True)
    hashes, inputs = native.source_hashes(root), native.input_hashes(root)
    sources = [str(native.source_path(module, root)) for module in native.NATIVE_MODULES]
    generated = write_generated(root, scratch / "generated")
    refused: list[str] = []
    try:
        _compile(root, target, scratch, [*sources, *generated.values()])
    except NativeBuildError as exc:
        if not generated:
            raise
        # Generated code mypyc refuses must not cost the hand-written modules their build:
        # the decoders (all of them: mypyc's error does not say which) stay exec'd.
        print(f"{exc}\ncompiling without the generated decoders", file=sys.stderr)
        refused, generated = sorted(generated), {}
        for directory in (target, scratch / "temp"):
            shutil.rmtree(directory, ignore_errors=True)
        target.mkdir(parents=True)
        _compile(root, target, scratch, sources)
    if generated:
        (target / generated_modules.PACKAGE / "__init__.py").write_text("")
    if native.source_hashes(root) != hashes or native.input_hashes(root) != inputs:
        raise NativeBuildError("sources changed during the build: run it again")
    manifest = {
        "abi": native.abi(),
        "modules": hashes,
        "inputs": inputs,
        "generated": sorted(generated),
        "generated_refused": refused,
    }
    (target / native.MANIFEST).write_text(json.dumps(manifest, indent=1, sort_keys=True))
    shutil.rmtree(scratch, ignore_errors=True)
    return target


def write_generated(root: Path, directory: Path) -> dict[str, str]:
    """Write the hot readers' generated code (:mod:`streams.generated_modules`) as modules
    under ``directory``: their paths by module name. The sources come from a pure Python
    process (no compiled module of an older build generates them)."""
    script = (
        "import json, sys\n"
        "from streams import generated_modules as g\n"
        "json.dump(g.generated_sources(), sys.stdout)\n"
    )
    env = {**os.environ, native.DISABLE_ENV: "0"}
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=root, env=env, capture_output=True, text=True
    )
    if done.returncode != 0:
        raise NativeBuildError(f"generating the decoders failed: {done.stderr.strip()}")
    package = directory / generated_modules.PACKAGE
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    paths = {}
    for text in json.loads(done.stdout):
        name = generated_modules.module_name(text)
        path = package / f"{name}.py"
        path.write_text(text)
        paths[name] = str(path)
    return paths


def _compile(root: Path, target: Path, scratch: Path, sources: list[str]) -> None:
    from mypyc.build import mypycify
    from setuptools import setup

    with _working_directory(scratch):
        try:
            extensions = mypycify(
                [f"--config-file={root / 'pyproject.toml'}", *sources],
                opt_level="3",
                group_name="kafkron_native",
            )
            setup(
                name="kafkron-native",
                ext_modules=extensions,
                script_args=[
                    "--quiet",
                    "build_ext",
                    f"--build-lib={target}",
                    f"--build-temp={scratch / 'temp'}",
                ],
            )
        except (Exception, SystemExit) as exc:  # setuptools reports failure as SystemExit
            raise NativeBuildError(f"mypyc build failed: {exc}") from exc


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m infra.native", description=__doc__)
    parser.add_argument("action", choices=["build", "status"], nargs="?", default="build")
    parser.add_argument("--force", action="store_true", help="build even when fresh")
    args = parser.parse_args(argv)
    reason = native.stale_reason()
    if args.action == "status":
        print(_describe(native.ROOT, reason))
        return 0 if reason is None else 1
    if reason is None and not args.force:
        print(f"compiled modules up to date in {native.build_dir()}")
        return 0
    began = time.monotonic()
    try:
        target = build()
    except NativeBuildError as exc:
        print(f"{exc}; kafkron runs in pure Python (slower)", file=sys.stderr)
        return 1
    took_s = time.monotonic() - began
    print(f"compiled {len(native.NATIVE_MODULES)} modules into {target} in {took_s:.0f} s")
    print(status_line())
    return 0


def status_line(root: Path = native.ROOT) -> str:
    """What ``status`` prints: whether the build is used, and whether its generated
    decoders are compiled or were refused by mypyc (then exec'd)."""
    return _describe(root, native.stale_reason(root))


def _describe(root: Path, reason: str | None) -> str:
    """:func:`status_line` for a stale reason already computed (``status`` computes it once
    for both its line and its exit code)."""
    if reason is not None:
        return f"compiled modules: {reason}"
    manifest = native.manifest(root)
    refused, compiled = manifest.get("generated_refused", []), manifest.get("generated", [])
    decoders = (
        f"{len(refused)} generated decoders exec'd (mypyc refused them at the build)"
        if refused
        else f"{len(compiled)} generated decoders compiled"
    )
    return f"compiled modules: fresh, in use unless KAFKRON_NATIVE=0; {decoders}"


if __name__ == "__main__":
    sys.exit(main())
