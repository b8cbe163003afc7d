"""Compile one candidate into a shared library, in memory (the artifact is bytes)."""

from __future__ import annotations

import json
import os
import tempfile
import time
from typing import TYPE_CHECKING

import tvm

from database.errors import error_summary
from workers import fast_math
from workers.results import BUILDER_CRASHED, BuildResult, ErrorKind

fast_math.install()  # builds measure the erf lowering that `tunefarm build` ships

if TYPE_CHECKING:
    from workers.sandbox import Sandbox


def export_options(target: tvm.target.Target) -> dict:
    """``export_library`` options for ``target``: cross-compile for an aarch64 triple, else the
    host C compiler."""
    triple = str(target.attrs.get("mtriple", "")) if target.kind.name == "llvm" else ""
    if triple.startswith("aarch64"):
        from tvm.support import cc

        return {"fcompile": cc.cross_compiler("aarch64-linux-gnu-gcc")}
    return {}


def _compile(mod: tvm.IRModule, target: tvm.target.Target) -> tvm.runtime.Module:
    """MetaSchedule's default build, without importing ``tvm.s_tir.tensor_intrin``.

    That import registers every tensor intrinsic by parsing TVMScript (~40 s of a core); a
    scheduled module already carries its tensorized bodies, so a builder does not need it.
    """
    from tvm.s_tir.transform import RemoveWeightLayoutRewriteBlock

    mod = RemoveWeightLayoutRewriteBlock(skip_tensor_rewrite=True)(mod)
    return tvm.driver.build(mod, target=target)


def build_artifact(mod_json: str, target_json: str) -> tuple[BuildResult, bytes | None]:
    """Build the scheduled TIR module for the target and return the exported ``.so`` bytes."""
    from workers.fingerprint import cpu_fingerprint

    start = time.perf_counter()
    worker = f"{os.uname().nodename}:{os.getpid()}"
    try:
        mod = tvm.ir.load_json(mod_json)
        target = tvm.target.Target(json.loads(target_json))
        rt_mod = _compile(mod, target)
        with tempfile.TemporaryDirectory(prefix="tunefarm-build-") as tmp:
            path = os.path.join(tmp, "candidate.so")
            rt_mod.export_library(path, **export_options(target))
            with open(path, "rb") as f:
                data = f.read()
    except Exception as err:
        return (
            BuildResult(
                error_kind=ErrorKind.BUILD_ERROR,
                error_msg=ErrorKind.BUILD_ERROR.message(error_summary(err, limit=500)),
                build_sec=time.perf_counter() - start,
                worker=f"{worker} ({cpu_fingerprint()})",
            ),
            None,
        )
    return BuildResult(build_sec=time.perf_counter() - start, worker=worker), data


DEFAULT_BUILD_FN = "workers.build:build_artifact"


def sandboxed_build(
    mod_json: str,
    target_json: str,
    timeout_s: float,
    build_fn: str = DEFAULT_BUILD_FN,
    sandbox: Sandbox | None = None,
) -> tuple[BuildResult, bytes | None]:
    """``build_fn`` in a killable child process (by default this process's shared one): a
    build that hangs past ``timeout_s``, crashes or returns garbage becomes an error value."""
    from workers.sandbox import SandboxFailure, shared_sandbox

    start = time.perf_counter()
    worker = f"{os.uname().nodename}:{os.getpid()}"
    box = sandbox or shared_sandbox()
    out = box.call(build_fn, (mod_json, target_json), timeout_s)
    if isinstance(out, SandboxFailure):
        kind = ErrorKind.BUILD_TIMEOUT if out.timed_out else ErrorKind.BUILD_ERROR
        detail = out.detail if out.reason != "crashed" else f"{BUILDER_CRASHED}: {out.detail}"
        return (
            BuildResult(
                error_kind=kind,
                error_msg=kind.message(detail),
                build_sec=time.perf_counter() - start,
                worker=worker,
                crashed=out.reason == "crashed",
            ),
            None,
        )
    if (
        not isinstance(out, tuple)
        or len(out) != 2
        or not isinstance(out[0], BuildResult)
        or not (out[1] is None or isinstance(out[1], bytes))
        or (out[0].ok and not out[1])
    ):
        kind = ErrorKind.BUILD_ERROR
        msg = kind.message(f"builder returned {type(out).__name__}, not (BuildResult, bytes)")
        return BuildResult(error_kind=kind, error_msg=msg, worker=worker), None
    return out
