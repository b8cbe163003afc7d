"""Benchmarking as a service: tuned vs untuned builds of a model on the cluster's devices.

``tunefarm bench MODEL --address RAY`` builds the model twice per device kind (untuned, and with
the database's best schedules looked up for that device), and measures both on one device of
each kind through the same :class:`~workers.runner_pool.RunnerPool` and ``DeviceRunner`` actors
a tune job uses, one measurement at a time per device. The target of each kind comes from the
device's node (its CPU name and core count, its GPU architecture), so the build matches the
hardware and the database lookup can use the exact-device level.
"""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass
from typing import Any

import tvm

from database import Storage, TuneFarmDatabase
from database.errors import error_summary
from tuner.errors import TuneFarmError
from tuner.model import Model
from tuner.symbolic.walk import missing_vars
from workers.config import MeasureConfig

DEVICE_KINDS = ("cpu", "cuda", "arm64")
ALIASES = {"llvm": "cpu", "host": "cpu", "gpu": "cuda", "arm": "arm64", "aarch64": "arm64"}
MEASURE_VM = "workers.measure:measure_vm"


@dataclass(frozen=True)
class DeviceBench:
    """One device kind's result at one shape."""

    kind: str
    device: str  # the slot it ran on
    fingerprint: str | None  # the device fingerprint the measurement reports
    target: str
    shape: dict[str, int]
    untuned_sec: float | None
    tuned_sec: float | None
    tuned_share: float
    tuned_kernels: int
    kernels: int
    error: str | None = None

    @property
    def speedup(self) -> float | None:
        if self.untuned_sec and self.tuned_sec:
            return self.untuned_sec / self.tuned_sec
        return None

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "speedup": self.speedup}


def parse_devices(spec: list[str] | None) -> list[str] | None:
    """``["cpu,cuda"]`` → ``["cpu", "cuda"]``; unknown kinds are a one-line error."""
    if not spec:
        return None
    kinds: list[str] = []
    for item in spec:
        for name in item.split(","):
            name = name.strip().lower()
            if not name:
                continue
            kind = ALIASES.get(name, name)
            if kind not in DEVICE_KINDS:
                raise TuneFarmError(
                    f"unknown device kind {name!r}; valid: {', '.join(DEVICE_KINDS)}"
                )
            if kind not in kinds:
                kinds.append(kind)
    if not kinds:
        raise TuneFarmError(f"--devices names no device kind; valid: {', '.join(DEVICE_KINDS)}")
    return kinds


def _slots(kind: str) -> list[Any]:
    """Device slots of ``kind`` that can run a whole model (RPC bridges time kernels only)."""
    from workers.slots import discover_slots

    return [s for s in discover_slots(kind, measure_fn=MEASURE_VM) if s.actor_cls is None]


def cluster_kinds() -> dict[str, list[Any]]:
    """The device kinds the connected cluster has, with their slots."""
    return {kind: slots for kind in DEVICE_KINDS if (slots := _slots(kind))}


def _probe_device(kind: str) -> dict[str, Any]:
    """Runs on the device's node: what a target for it needs."""
    import os

    from tvm.target import codegen

    from workers.fingerprint import device_fingerprint

    info: dict[str, Any] = {
        "cpu": str(codegen.llvm_get_system_cpu()),
        "cores": os.cpu_count() or 1,
        "fingerprint": device_fingerprint("cuda" if kind == "cuda" else "cpu"),
        "cuda_arch": None,
    }
    if kind == "cuda":
        dev = tvm.cuda(0)
        if dev.exist:
            info["cuda_arch"] = "sm_" + dev.compute_version.replace(".", "")
    return info


def probe(slot: Any, kind: str, timeout_s: float = 180) -> dict[str, Any]:
    """Ask the slot's node about its device (a Ray task pinned to the node)."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    opts: dict[str, Any] = {"num_cpus": 0, "num_gpus": 1 if kind == "cuda" else 0}
    if slot.resources:
        opts["resources"] = dict(slot.resources)
    if slot.node_id:
        opts["scheduling_strategy"] = NodeAffinitySchedulingStrategy(slot.node_id, soft=False)
    ref = ray.remote(_probe_device).options(**opts).remote(kind)
    try:
        return ray.get(ref, timeout=timeout_s)
    except Exception as err:
        ray.cancel(ref, force=True)
        raise TuneFarmError(
            f"cannot reach the {kind} device {slot.name}: {error_summary(err)}"
        ) from None


def target_for(kind: str, info: dict[str, Any]) -> tvm.target.Target:
    """The build target of a device kind from its node's :func:`probe` answer."""
    host = {"kind": "llvm", "mcpu": info["cpu"], "num-cores": info["cores"]}
    if kind == "cpu":
        return tvm.target.Target(host)
    if kind == "cuda":
        if not info.get("cuda_arch"):
            raise TuneFarmError("the cuda device's node reports no GPU")
        return tvm.target.Target({"kind": "cuda", "arch": info["cuda_arch"], "host": host})
    from tuner.targets import preset

    return tvm.target.Target({**preset("arm64"), "num-cores": info["cores"]})


def args_info_of(model: Model, shape: dict[str, int]) -> list[list[Any]]:
    """``[("TENSOR", dtype, shape), ...]`` of ``main``'s parameters at ``shape``."""
    from tvm import relax

    from tuner.bench.timing import eval_dim

    out: list[list[Any]] = []
    for param in model.mod["main"].params:
        ty = param.ty
        if not isinstance(ty, relax.TensorType) or ty.shape is None:
            raise TuneFarmError(f"parameter {param.name} is not a tensor of known rank")
        dims = []
        for dim in ty.shape.values:
            missing = missing_vars(dim, shape)
            if missing:
                raise TuneFarmError(f"symbolic dim {missing[0]} needs a value: pass --shape")
            dims.append(eval_dim(dim, shape))
        out.append(["TENSOR", str(ty.dtype), dims])
    return out


def _export(ex: Any, target: tvm.target.Target) -> bytes:
    import os
    import tempfile

    from workers.build import export_options

    with tempfile.TemporaryDirectory(prefix="tunefarm-bench-") as tmp:
        path = os.path.join(tmp, "model.so")
        ex.export_library(path, **export_options(target))
        with open(path, "rb") as f:
            return f.read()


def bench_on_cluster(
    model: Model,
    storage: Storage,
    kinds: list[str] | None,
    shapes: list[dict[str, int]],
    config: MeasureConfig,
    log: Any = None,
) -> list[DeviceBench]:
    """Build and measure ``model`` untuned and tuned on one device of each kind (connected
    to Ray already). ``kinds`` None: every kind the cluster has."""
    import ray

    from tuner.compile import compile as tf_compile
    from workers.runner_pool import RunnerPool

    have = cluster_kinds()
    if kinds is None:
        kinds = list(have)
    for kind in kinds:
        if kind not in have:
            has = ", ".join(have) or "none"
            extra = (
                " (ARM boards behind TVM RPC time single kernels only; whole models need a "
                "native aarch64 Ray node)"
                if kind == "arm64"
                else ""
            )
            raise TuneFarmError(f"the cluster has no {kind} device (it has: {has}){extra}")
    results: list[DeviceBench] = []
    for kind in kinds:
        slot = have[kind][0]
        info = probe(slot, kind)
        target = target_for(kind, info)
        if log:
            log(f"{kind}: building for {target.kind.name} on the driver, measuring on {slot.name}")
        db = TuneFarmDatabase(storage)
        db.device = info["fingerprint"]  # the exact-device lookup level for that device
        untuned_ex, _ = tf_compile(model.mod, target, None)
        tuned_ex, report = tf_compile(model.mod, target, db)
        refs = {
            "untuned": ray.put(_export(untuned_ex, target)),
            "tuned": ray.put(_export(tuned_ex, target)),
        }
        pool = RunnerPool([slot], config)
        try:
            for shape in shapes:
                args_info = args_info_of(model, shape)
                futures = {
                    name: pool.submit(ref, args_info, key=f"{kind}:{name}")
                    for name, ref in refs.items()
                }
                runs = {name: fut.result() for name, fut in futures.items()}
                secs = {
                    name: statistics.median(r.run_secs) if r.ok and r.run_secs else None
                    for name, r in runs.items()
                }
                errors = [f"{n}: {r.error_msg}" for n, r in runs.items() if not r.ok]
                results.append(
                    DeviceBench(
                        kind=kind,
                        device=slot.name,
                        fingerprint=next((r.device for r in runs.values() if r.device), None),
                        target=str(target.attrs.get("mcpu", "") or target.kind.name)
                        if kind != "cuda"
                        else str(target.attrs.get("arch", "cuda")),
                        shape=dict(shape),
                        untuned_sec=secs["untuned"],
                        tuned_sec=secs["tuned"],
                        tuned_share=report.tuned_share,
                        tuned_kernels=report.tuned_calls,
                        kernels=report.total_calls,
                        error="; ".join(errors) or None,
                    )
                )
        finally:
            pool.shutdown()
    return results
