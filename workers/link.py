"""Link a candidate's object file the way ``g++ -shared -fPIC`` does, without the driver.

TVM's ``export_library`` links with ``g++ -shared -fPIC``: the driver, then ``collect2``,
then ``ld``, three processes for what ``ld`` alone does. On a 2-core AMD EPYC that link took
23 ms of a candidate's ~110 ms build and the ``ld`` command below 11 ms (``ld`` with all of
the driver's arguments about twice that: half of it resolving ``-lstdc++``, which a TVM
kernel's object never references).
:func:`host_linker` asks the driver once per process (``g++ -###``) for the exact ``ld``
command it would run, drops the LTO plug-in options and ``-lstdc++``, and links every later
object with that command. Where the driver does not say (another compiler, no ``g++``, no
``ld`` on the path), a caller passes compiler options, or ``ld`` fails, the build falls back to
TVM's own ``create_shared`` (whose error, if it fails too, is the build's).
"""

from __future__ import annotations

import functools
import os
import shlex
import shutil
import subprocess
from collections.abc import Callable, Sequence
from typing import Any

from tvm.support import cc

_OUT = "@tunefarm-out@.so"
_IN = "@tunefarm-in@.o"
# the driver's arguments that ``ld`` either cannot take without the driver (the LTO plug-in,
# fed by the driver's temporary files) or that a TVM kernel never needs (C++'s library)
_DROP_WITH_VALUE = {"-plugin"}
_DROP_PREFIX = ("-plugin-opt",)
_DROP = {"-lstdc++"}


@functools.cache
def link_command(compiler: str | None = None) -> tuple[str, ...] | None:
    """The ``ld`` command ``compiler -shared -fPIC`` runs, with placeholders for the output and
    the objects, or None when the driver does not show one (not GCC's, or absent)."""
    compiler = compiler or cc.get_cc() or "g++"
    try:
        shown = subprocess.run(
            [compiler, "-###", "-shared", "-fPIC", "-o", _OUT, _IN],
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        ).stderr
        ld = subprocess.run(
            [compiler, "-print-prog-name=ld"],
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    linker = shutil.which(ld) if ld else None
    if linker is None:
        return None
    for line in shown.splitlines():
        try:
            words = shlex.split(line)
        except ValueError:
            continue
        if not words or os.path.basename(words[0]) not in ("collect2", "ld"):
            continue
        args: list[str] = []
        skip = False
        for word in words[1:]:
            if skip:
                skip = False
            elif word in _DROP_WITH_VALUE:
                skip = True
            elif not word.startswith(_DROP_PREFIX) and word not in _DROP:
                args.append(word)
        if args.count(_OUT) == 1 and args.count(_IN) == 1:
            return (linker, *args)
    return None


def link_shared(output: str, objects: Sequence[str], command: Sequence[str]) -> None:
    """Run ``command`` (from :func:`link_command`) for ``objects`` into ``output``; raises
    ``RuntimeError`` with the linker's message when it fails."""
    argv: list[str] = []
    for word in command:
        if word == _OUT:
            argv.append(output)
        elif word == _IN:
            argv.extend(objects)
        else:
            argv.append(word)
    done = subprocess.run(argv, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"linking {output} failed: {(done.stderr or done.stdout).strip()}")


def host_linker() -> Callable[..., None] | None:
    """An ``export_library`` ``fcompile`` that links with :func:`link_command`'s ``ld`` (TVM's
    ``create_shared`` for calls with compiler options), or None where no command is known."""
    command = link_command()
    if command is None:
        return None

    def fcompile(output: str, objects: Sequence[str], options: Any = None, **kwargs: Any) -> None:
        if not (options or kwargs or any(not str(o).endswith(".o") for o in objects)):
            try:
                link_shared(output, list(objects), command)
                return
            except (OSError, RuntimeError):  # TVM's link says what is wrong, or succeeds
                pass
        cc.create_shared(output, list(objects), options, **kwargs)

    fcompile.get_target_triple = cc.create_shared.get_target_triple  # type: ignore[attr-defined]
    return fcompile
