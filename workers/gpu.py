"""Whether a node's GPUs can measure: TVM's CUDA runtime loads and sees a GPU.

The ``apache-tvm`` wheel ships its CUDA runtime as ``libtvm_runtime_cuda.so``, linked against
the NVIDIA driver (``libcuda.so.1``) and the CUDA 13 runtime (``libcudart.so.13``); where one is
missing TVM skips it without a word and ``tvm.runtime.enabled("cuda")`` is False, so such a
node would build every CUDA candidate and time none. Each GPU node is
asked once, in a Ray task pinned to it that takes no CPU and no GPU (so a busy GPU does not
delay the answer); the answer is cached per node for the driver's lifetime (a restarted node
gets a new node id).
"""

from __future__ import annotations

import ctypes
import os
import threading
from pathlib import Path
from typing import Any

INSTALL_DOC = "docs/cluster.md#gpu-nodes"
_cache: dict[str, str | None] = {}
_lock = threading.Lock()


def cuda_unusable_reason() -> str | None:
    """Why this process cannot time CUDA kernels, or None when it can."""
    import tvm

    if not tvm.runtime.enabled("cuda"):
        lib = Path(tvm.__file__).parent / "lib" / "libtvm_runtime_cuda.so"
        if lib.exists():  # the wheel ships it; TVM skips it silently when it cannot load
            try:
                ctypes.CDLL(str(lib), mode=os.RTLD_LOCAL)
            except OSError as err:
                return (
                    f"TVM's CUDA runtime does not load on this node ({err}): it needs the "
                    f"NVIDIA driver (libcuda.so.1) and the CUDA 13 runtime ({INSTALL_DOC})"
                )
        return (
            f"TVM {tvm.__version__} on this node has no CUDA runtime; "
            f"install a CUDA build of it ({INSTALL_DOC})"
        )
    if not tvm.cuda(0).exist:
        return "TVM's CUDA runtime sees no GPU (driver not loaded, or CUDA_VISIBLE_DEVICES empty)"
    return None


def gpu_nodes_status(node_ids: list[str], timeout_s: float = 120) -> dict[str, str | None]:
    """For each node id: None when its GPUs can measure, else the reason they cannot."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    with _lock:
        todo = [nid for nid in node_ids if nid not in _cache]
        probe = ray.remote(cuda_unusable_reason)
        refs: dict[str, Any] = {
            nid: probe.options(
                num_cpus=0,
                scheduling_strategy=NodeAffinitySchedulingStrategy(nid, soft=False),
            ).remote()
            for nid in todo
        }
        for nid, ref in refs.items():
            try:
                _cache[nid] = ray.get(ref, timeout=timeout_s)
            except Exception as err:  # any failure is the node's answer
                from database.errors import error_summary

                ray.cancel(ref, force=True)
                _cache[nid] = f"the node did not answer the CUDA check: {error_summary(err)}"
        return {nid: _cache[nid] for nid in node_ids}


def unusable_gpus() -> list[dict[str, Any]]:
    """The cluster's GPU nodes whose GPUs cannot measure: node id, GPU count, reason."""
    import ray

    nodes = [n for n in ray.nodes() if n.get("Alive") and n.get("Resources", {}).get("GPU")]
    status = gpu_nodes_status([n["NodeID"] for n in nodes])
    return [
        {"node_id": n["NodeID"], "gpus": int(n["Resources"]["GPU"]), "reason": status[n["NodeID"]]}
        for n in nodes
        if status[n["NodeID"]]
    ]


def no_usable_gpu_message() -> str:
    """One line: why a ``cuda`` job cannot measure on this cluster."""
    bad = unusable_gpus()
    if not bad:
        return "the cluster has no GPU node to measure cuda candidates on"
    first = bad[0]
    more = f" (and {len(bad) - 1} more GPU node(s))" if len(bad) > 1 else ""
    return (
        f"no usable GPU to measure cuda candidates: node {first['node_id'][:8]}'s "
        f"{first['gpus']} GPU(s): {first['reason']}{more}"
    )


def main(argv: list[str]) -> int:
    """``python -m workers.gpu``: whether this machine's GPU can time CUDA kernels (exit 1 with
    the reason if not). ``python -m workers.gpu GCS_ADDRESS NODE_ID...``: join the cluster as a
    driver and print ``{node_id: reason or null}`` as JSON (how ``tunefarm workers`` asks)."""
    import json
    import logging

    if not argv:
        reason = cuda_unusable_reason()
        print(f"error: {reason}" if reason else "this machine's GPU can time CUDA kernels")
        return 1 if reason else 0

    import ray

    ray.init(address=argv[0], logging_level=logging.ERROR, log_to_driver=False)
    try:
        print(json.dumps(gpu_nodes_status(argv[1:])))
    finally:
        ray.shutdown()
    return 0


if __name__ == "__main__":
    import sys

    raise SystemExit(main(sys.argv[1:]))
