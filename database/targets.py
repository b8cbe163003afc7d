"""How a target is keyed in the database: a canonical JSON form, its kind and architecture."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import tvm


def _canonical(obj: Any) -> Any:
    """Plain JSON values from a target export (which holds TVM Maps, Arrays and IntImms)."""
    if isinstance(obj, Mapping) or hasattr(obj, "items"):
        items = sorted((str(k), v) for k, v in obj.items())
        return {k: _canonical(v) for k, v in items if k != "tag" or v}
    if isinstance(obj, (bool, int, float)) or obj is None:
        return obj
    if isinstance(obj, str):
        return str(obj)
    if hasattr(obj, "value") and isinstance(obj.value, (bool, int, float)):
        return obj.value
    if isinstance(obj, Sequence) or hasattr(obj, "__len__"):
        return [_canonical(v) for v in obj]
    return str(obj)


X86_MACHINES = ("x86_64", "amd64", "i386", "i686")


@dataclass(frozen=True)
class TargetKey:
    """A target as the database sees it.

    ``key`` identifies the exact target; ``arch`` (the LLVM CPU, the CUDA arch or the
    triple) and ``kind`` are the coarser levels used by lookup fallbacks. A CPU of a
    non-x86 triple is qualified by the triple's architecture (``aarch64:generic``), so an
    ARM target never shares an ``arch`` with an x86 one of the same CPU name (``generic``).
    """

    key: str
    json: str
    kind: str
    arch: str | None

    @staticmethod
    def of(target: tvm.target.Target) -> TargetKey:
        """Describe ``target``."""
        exported = _canonical(target.export())
        text = json.dumps(exported, sort_keys=True, separators=(",", ":"))
        attrs = exported if isinstance(exported, dict) else {}
        arch = attrs.get("mcpu") or attrs.get("arch") or attrs.get("mtriple")
        machine = str(attrs.get("mtriple") or "").split("-", 1)[0]
        if attrs.get("mcpu") and machine and machine not in X86_MACHINES:
            arch = f"{machine}:{attrs['mcpu']}"
        return TargetKey(
            key=hashlib.sha1(text.encode()).hexdigest(),
            json=text,
            kind=target.kind.name,
            arch=str(arch) if arch else None,
        )
