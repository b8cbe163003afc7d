"""Target presets (``llvm``, ``cuda``, ``arm64``) and parsing of target JSON."""

from __future__ import annotations

import difflib
import json
import os
import re

import tvm

from database.errors import error_summary
from tuner.errors import TuneFarmError

PRESETS = ("llvm", "cuda", "arm64")
CUDA_ARCH = re.compile(r"sm_[1-9][0-9]{1,2}[a-z]?")  # sm_80, sm_90a, sm_100f, sm_120


def host_cpu() -> str:
    """LLVM's name for this machine's CPU (e.g. ``znver3``), so kernels use AVX2/FMA."""
    from tvm.target import codegen

    return str(codegen.llvm_get_system_cpu())


def detect_cuda_arch() -> str | None:
    """``sm_XY`` of GPU 0, or None without a GPU."""
    dev = tvm.cuda(0)
    if not dev.exist:
        return None
    return "sm_" + dev.compute_version.replace(".", "")


def preset(name: str, arch: str | None = None) -> dict:
    """The target dict of a preset."""
    cores = os.cpu_count() or 1
    if name == "llvm":
        return {"kind": "llvm", "mcpu": arch or host_cpu(), "num-cores": cores}
    if name == "cuda":
        arch = arch or detect_cuda_arch()
        if arch is None:
            raise TuneFarmError("no CUDA GPU detected; name its architecture with --arch sm_XY")
        return {
            "kind": "cuda",
            "arch": arch,
            # MetaSchedule's thread binding needs these (the values of every sm_70+ GPU)
            "max_threads_per_block": 1024,
            "max_shared_memory_per_block": 49152,
            "thread_warp_size": 32,
            "host": {"kind": "llvm", "mcpu": host_cpu(), "num-cores": cores},
        }
    if name == "arm64":
        return {
            "kind": "llvm",
            "mtriple": "aarch64-linux-gnu",
            "mattr": ["+neon"],
            "mcpu": arch or "generic",
            "num-cores": 4,
        }
    raise TuneFarmError(f"unknown target preset {name!r}; valid: {', '.join(PRESETS)} or JSON")


def check_cpu(cpu: str, triple: str | None) -> None:
    """Refuse a CPU name LLVM does not know for ``triple`` (default: this host's), listing
    the ones it does."""
    from tvm.target import codegen

    triple = triple or str(codegen.llvm_get_system_triple())
    if codegen.llvm_is_valid_cpu(cpu, triple):
        return
    probe = tvm.target.Target({"kind": "llvm", "mtriple": triple})
    valid = sorted(str(c) for c in codegen.llvm_get_cpu_archlist(probe))
    close = difflib.get_close_matches(cpu, valid, n=3)
    hint = f"did you mean {', '.join(close)}? " if close else ""
    raise TuneFarmError(
        f"unknown CPU {cpu!r} for {triple}: {hint}LLVM knows {', '.join(valid)} "
        "(pass it with --arch, or leave --arch out for this machine's CPU)"
    )


def check_cuda_arch(arch: str) -> None:
    """Refuse a CUDA architecture that is not ``sm_XY``."""
    if not CUDA_ARCH.fullmatch(arch):
        raise TuneFarmError(f"unknown CUDA arch {arch!r}: expected sm_XY, e.g. sm_80 or sm_90a")


def _check_archs(config: dict) -> None:
    """The CPU and GPU architectures a target dict names, checked against LLVM and sm_XY."""
    if not isinstance(config, dict):
        return
    if config.get("kind") == "llvm" and isinstance(config.get("mcpu"), str):
        triple = config.get("mtriple")
        check_cpu(config["mcpu"], triple if isinstance(triple, str) else None)
    if config.get("kind") == "cuda" and isinstance(config.get("arch"), str):
        check_cuda_arch(config["arch"])
    if isinstance(config.get("host"), dict):
        _check_archs(config["host"])


def resolve_target(spec: str, arch: str | None = None) -> tvm.target.Target:
    """A preset name or a TVM target dict as JSON → ``tvm.target.Target``."""
    spec = spec.strip()
    if spec.startswith("{"):
        try:
            config = json.loads(spec)
        except json.JSONDecodeError as err:
            raise TuneFarmError(f"target is not valid JSON: {err}") from None
    else:
        config = preset(spec, arch)
    _check_archs(config)
    try:
        return tvm.target.Target(config)
    except Exception as err:
        raise TuneFarmError(
            f"invalid target {spec}: {error_summary(err, with_type=False)}"
        ) from None


def device_kind(target: tvm.target.Target) -> str:
    """The kind of device a target's kernels run on: ``cuda``, ``arm64`` (an aarch64 triple:
    ARM nodes or RPC devices) or ``cpu``."""
    if target.kind.name == "cuda":
        return "cuda"
    if str(target.attrs.get("mtriple", "")).startswith("aarch64"):
        return "arm64"
    return "cpu"
