"""Device slots: one Ray actor per device (a host CPU, one GPU, an ARM node, a board behind
TVM RPC) that measures one candidate at a time, how to start it (:class:`SlotSpec`), the
marker of a quarantined slot, and discovery of the cluster's devices of a kind."""

from __future__ import annotations

import dataclasses
import os
import platform
import time
from dataclasses import dataclass, field
from typing import Any

import ray

from workers.config import MeasureConfig, Screen
from workers.results import RunResult

DEFAULT_MEASURE_FN = "workers.measure:measure_artifact"
CPU_RESOURCE = "tunefarm_cpu"  # nodes whose host CPU measures candidates
ARM_RESOURCE = "tunefarm_arm64"  # native aarch64 nodes
HOST_KINDS = ("cpu", "arm64")  # kernels that run on the runner's own cores


def pin_host_threads(threads: int | None) -> int:
    """Size this process's TVM thread pool for timing host kernels, before its first use:
    ``threads``, else ``TVM_NUM_THREADS`` if set, else the machine's CPUs. Ray starts an actor
    that reserves no CPU with ``OMP_NUM_THREADS=1``, which TVM's pool reads when
    ``TVM_NUM_THREADS`` is unset: a runner would time every candidate on one thread while
    the model runs on all of the target's cores, and pick schedules for the wrong machine.
    (Here, not in :mod:`workers.measure`: an actor starts without importing TVM.)"""
    env = os.environ.get("TVM_NUM_THREADS", "")
    n = threads or (int(env) if env.isdigit() and int(env) > 0 else os.cpu_count() or 1)
    os.environ["TVM_NUM_THREADS"] = str(n)
    return n


@ray.remote(num_cpus=0, max_restarts=0, max_concurrency=1)
class DeviceRunner:
    """A Ray actor owning one device; it measures one candidate at a time."""

    def __init__(
        self,
        device_kind: str,
        config: MeasureConfig,
        measure_fn: str = DEFAULT_MEASURE_FN,
        slot: str = "",
    ) -> None:
        from workers.sandbox import resolve

        if device_kind in HOST_KINDS:
            pin_host_threads(config.threads)
        self.device_kind = device_kind
        self.config = config
        self.measure_fn = resolve(measure_fn)
        self.slot = slot or device_kind
        self.calls = 0
        self.fastest: dict[str, float] = {}  # a Screen's group -> its fastest mean timed here

    def __repr__(self) -> str:  # shown by Ray's state API and `tunefarm workers`
        return f"runner {self.slot}"

    def measure(
        self, artifact: bytes, args_info: list[Any], screen: Screen | None = None
    ) -> RunResult:
        """One candidate; ``screen``: what it is screened by (:class:`Screen`)."""
        self.calls += 1
        start = time.perf_counter()
        config = self.config
        group = screen.group if screen is not None else None
        if screen is not None and config.screen:
            known = [s for s in (screen.best_sec, self.fastest.get(group or "")) if s]
            if known:
                config = dataclasses.replace(config, screen_sec=config.screen * min(known))
        result = self.measure_fn(artifact, args_info, self.device_kind, config)
        if isinstance(result, RunResult):  # a fault-injecting measure_fn may answer garbage
            result = dataclasses.replace(result, device_sec=time.perf_counter() - start)
            if group and result.ok and result.run_secs:
                mean = sum(result.run_secs) / len(result.run_secs)
                self.fastest[group] = min(mean, self.fastest.get(group, mean))
        return result

    def measure_batch(
        self,
        args_infos: list[list[Any]],
        *artifacts: bytes,
        screens: list[Screen | None] | None = None,
    ) -> list[RunResult]:
        """Several candidates in one call, measured one after the other (artifacts are
        top-level arguments so Ray resolves their object refs)."""
        screens = screens or [None] * len(artifacts)
        return [
            self.measure(a, i, s) for a, i, s in zip(artifacts, args_infos, screens, strict=True)
        ]

    def ping(self) -> str:
        return f"{os.uname().nodename}:{os.getpid()}"


@dataclass(frozen=True)
class SlotSpec:
    """How to start the actor of one device slot."""

    name: str
    device: str = "cpu"  # TVM device the actor measures on
    node_id: str | None = None  # pin to this node (None: wherever resources allow)
    num_gpus: float = 0
    resources: dict[str, float] = field(default_factory=dict)
    measure_fn: str = DEFAULT_MEASURE_FN
    actor_cls: Any = None  # another actor class with the DeviceRunner interface (RPC bridge)
    actor_args: tuple = ()

    def start(self, config: MeasureConfig) -> Any:
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        opts: dict[str, Any] = {"name": None, "num_gpus": self.num_gpus}
        if self.resources:
            opts["resources"] = dict(self.resources)
        if self.node_id:
            opts["scheduling_strategy"] = NodeAffinitySchedulingStrategy(self.node_id, soft=False)
        if self.actor_cls is not None:
            return self.actor_cls.options(**opts).remote(*self.actor_args, config, self.name)
        return DeviceRunner.options(**opts).remote(self.device, config, self.measure_fn, self.name)

    def mark_quarantined(self, reason: str) -> Any:
        """A placeholder actor that shows the quarantine in Ray's state API."""
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        opts: dict[str, Any] = {}
        if self.node_id:
            opts["scheduling_strategy"] = NodeAffinitySchedulingStrategy(self.node_id, soft=True)
        return QuarantinedSlot.options(**opts).remote(self.name, reason)


@ray.remote(num_cpus=0)
class QuarantinedSlot:
    """Holds no device; exists so that ``tunefarm workers`` can list quarantined slots."""

    def __init__(self, slot: str, reason: str) -> None:
        self.slot, self.reason = slot, reason

    def __repr__(self) -> str:
        return f"{self.slot}: {self.reason}"

    def info(self) -> str:
        return repr(self)


def discover_slots(kind: str, measure_fn: str = DEFAULT_MEASURE_FN) -> list[SlotSpec]:
    """The cluster's devices of ``kind`` (``cpu``, ``cuda``, ``arm64``), one slot each.

    ``cpu``: every node advertising the ``tunefarm_cpu`` resource, else the driver's node.
    ``cuda``: every GPU of every node whose TVM can time CUDA kernels (:mod:`workers.gpu`;
    the others are left out, :func:`workers.gpu.unusable_gpus` says why). ``arm64``: nodes
    advertising ``tunefarm_arm64``, plus RPC bridges (:func:`rpc_slots`), else the driver's
    node if it is an aarch64 machine.
    """
    nodes = [n for n in ray.nodes() if n.get("Alive")]
    cuda_ok: dict[str, str | None] = {}
    if kind == "cuda":
        from workers.gpu import gpu_nodes_status

        gpu_nodes = [n["NodeID"] for n in nodes if n.get("Resources", {}).get("GPU")]
        cuda_ok = gpu_nodes_status(gpu_nodes)
    slots: list[SlotSpec] = []
    for n in sorted(nodes, key=lambda n: n["NodeID"]):
        res, nid = n.get("Resources", {}), n["NodeID"]
        short = nid[:8]
        if kind == "cpu" and res.get(CPU_RESOURCE):
            slots.append(SlotSpec(f"cpu@{short}", "cpu", nid, measure_fn=measure_fn))
        elif kind == "cuda" and cuda_ok.get(nid) is None:
            for i in range(int(res.get("GPU", 0))):
                slots.append(
                    SlotSpec(f"cuda{i}@{short}", "cuda", nid, num_gpus=1, measure_fn=measure_fn)
                )
        elif kind == "arm64":
            for i in range(int(res.get(ARM_RESOURCE, 0))):
                slots.append(
                    SlotSpec(
                        f"arm{i}@{short}",
                        "cpu",
                        nid,
                        resources={ARM_RESOURCE: 1},
                        measure_fn=measure_fn,
                    )
                )
    if kind == "arm64":
        slots += rpc_slots()
    here = ray.get_runtime_context().get_node_id()
    native_arm = platform.machine() in ("aarch64", "arm64")
    if not slots and (kind == "cpu" or (kind == "arm64" and native_arm)):
        slots.append(SlotSpec(f"cpu@{here[:8]}", "cpu", here, measure_fn=measure_fn))
    return slots


def rpc_slots(
    tracker: str | None = None, key: str | None = None, count: int | None = None
) -> list[SlotSpec]:
    """Bridge slots to devices behind a TVM RPC tracker (default: ``$TUNEFARM_RPC_TRACKER``,
    ``$TUNEFARM_RPC_KEY``, ``$TUNEFARM_RPC_DEVICES`` bridges, else one per registered server).
    The bridge actors run on the driver's node."""
    tracker = tracker or os.environ.get("TUNEFARM_RPC_TRACKER")
    if not tracker:
        return []
    from workers.arm_bridge import ArmBridge

    key = key or os.environ.get("TUNEFARM_RPC_KEY", "arm")
    if count is None:
        count = int(os.environ.get("TUNEFARM_RPC_DEVICES", "0")) or _registered(tracker, key)
    here = ray.get_runtime_context().get_node_id()
    return [
        SlotSpec(f"rpc:{key}#{i}", "cpu", here, actor_cls=ArmBridge, actor_args=(tracker, key))
        for i in range(max(1, count))
    ]


def _registered(tracker: str, key: str) -> int:
    """Servers registered with the tracker under ``key`` (0 when it cannot be asked)."""
    try:
        from tvm import rpc

        host, _, port = tracker.rpartition(":")
        summary = rpc.connect_tracker(host, int(port)).summary()
        return sum(1 for s in summary.get("server_info", []) if s.get("key", "").endswith(key))
    except Exception:
        return 0
