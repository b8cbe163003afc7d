"""Compile one candidate into a shared library, in memory (the artifact is bytes).

Runs in a build worker's sandbox child (:mod:`workers.build_task`), which imports it before
its first call."""

from __future__ import annotations

import json
import os
import tempfile
import time

import tvm

from database.errors import error_summary
from workers import fast_math
from workers.link import host_linker
from workers.results import BuildResult, ErrorKind

fast_math.install()  # builds measure the erf lowering that `tunefarm build` ships


def export_options(target: tvm.target.Target) -> dict:
    """``export_library`` options for ``target``: cross-compile for an aarch64 triple, else
    link for the host with ``ld`` as ``g++ -shared`` would (:mod:`workers.link`; TVM's own
    ``g++`` link where the driver does not show its ``ld`` command)."""
    triple = str(target.attrs.get("mtriple", "")) if target.kind.name == "llvm" else ""
    if triple.startswith("aarch64"):
        from tvm.support import cc

        return {"fcompile": cc.cross_compiler("aarch64-linux-gnu-gcc")}
    fcompile = host_linker()
    return {"fcompile": fcompile} if fcompile is not None else {}


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
