"""Device fingerprints: what a measurement ran on, precisely enough to compare records."""

from __future__ import annotations

import functools
import os
import platform

_ISA_FLAGS = ("avx2", "fma", "avx512f", "avx512_vnni", "amx_tile", "asimd", "sve", "neon")


@functools.lru_cache(maxsize=1)
def cpu_fingerprint() -> str:
    """CPU model, ISA flags that matter for kernels, and the core count."""
    model, flags = platform.processor() or platform.machine(), set()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                key, _, value = line.partition(":")
                key = key.strip().lower()
                if key in ("model name", "cpu model") and model in ("", platform.machine()):
                    model = value.strip()
                elif key in ("flags", "features"):
                    flags.update(value.split())
    except OSError:
        pass
    isa = "+".join(f for f in _ISA_FLAGS if f in flags)
    return f"{model} | {platform.machine()} | {isa or 'base'} | {os.cpu_count()} cores"


def device_fingerprint(device_kind: str) -> str:
    """Fingerprint of device 0 of ``device_kind`` (``cpu`` or ``cuda``) on this host."""
    if device_kind != "cuda":
        return cpu_fingerprint()
    import tvm

    dev = tvm.cuda(0)
    if not dev.exist:
        return "cuda | absent"
    arch = "sm_" + dev.compute_version.replace(".", "")
    return f"{dev.device_name} | {arch} | driver {dev.driver_version}"


def local_device_for(target: object) -> str | None:
    """The fingerprint of this host's device that ``target`` would run on, if it has one.

    A build uses it for the exact-device lookup level: an llvm target for this machine's
    architecture runs on this CPU, a cuda target on GPU 0 (when there is one).
    """
    kind = target.kind.name  # type: ignore[attr-defined]
    if kind == "llvm":
        triple = str(target.attrs.get("mtriple", "") or "")  # type: ignore[attr-defined]
        machine = platform.machine()
        if triple and not triple.startswith(machine.replace("arm64", "aarch64")):
            return None
        return cpu_fingerprint()
    if kind == "cuda":
        fp = device_fingerprint("cuda")
        return None if fp.endswith("absent") else fp
    return None
