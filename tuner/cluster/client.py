"""A client of a Ray cluster's dashboard, as Ray keeps ``cli.py`` thin over ``sdk.py``: Jobs
API submission, job info, Ray's state API (nodes, actors, tasks) and the GPU check.

Clusters with token authentication (the default in Ray 2.60 when a token exists) get
``Authorization: Bearer <token>`` from ``$RAY_AUTH_TOKEN``, the file named by
``$RAY_AUTH_TOKEN_PATH`` or ``~/.ray/auth_token``.
"""

from __future__ import annotations

import json
import os
import shlex
from pathlib import Path
from typing import Any

from database.errors import error_summary
from tuner.cluster.address import parse_address
from tuner.errors import TuneFarmError

RUNNER_CLASSES = ("DeviceRunner", "ArmBridge")
TERMINAL = ("SUCCEEDED", "FAILED", "STOPPED")


def dashboard_url(address: str | None) -> str:
    """The dashboard URL of ``--address``, the environment, or the local default: a bare
    ``HOST`` or ``HOST:PORT`` (a GCS address) means the dashboard's port 8265 on that host."""
    addr = (
        address
        or os.environ.get("TUNEFARM_RAY_DASHBOARD")
        or os.environ.get("RAY_API_SERVER_ADDRESS")
        or "http://127.0.0.1:8265"
    )
    return parse_address(addr).dashboard


def unreachable(url: str, err: BaseException) -> TuneFarmError:
    reason = failure_reason(err)
    hint = (
        "; is the dashboard elsewhere? give it as --address http://HOST:8265"
        if reason == "connection refused"
        else ""
    )
    return TuneFarmError(f"cannot reach the Ray cluster's dashboard at {url}: {reason}{hint}")


def auth_token() -> str | None:
    """The cluster's token: ``$RAY_AUTH_TOKEN``, ``$RAY_AUTH_TOKEN_PATH``, ``~/.ray/auth_token``."""
    token = os.environ.get("RAY_AUTH_TOKEN", "").strip()
    if token:
        return token
    path = Path(os.environ.get("RAY_AUTH_TOKEN_PATH") or Path.home() / ".ray" / "auth_token")
    try:
        return path.read_text().strip() or None
    except OSError:
        return None


def auth_headers() -> dict[str, str]:
    token = auth_token()
    return {"Authorization": f"Bearer {token}"} if token else {}


def failure_reason(err: BaseException) -> str:
    text = " ".join(str(err).split())
    if "401" in text or "Unauthorized" in text:
        return "authentication required: set RAY_AUTH_TOKEN or ~/.ray/auth_token"
    if "403" in text or "Forbidden" in text:
        return "the cluster rejected the authentication token"
    if "Connection refused" in text or "Failed to connect" in text or "connect" in text.lower():
        return "connection refused"
    return error_summary(err)


def job_client(address: str | None) -> Any:
    """A ``JobSubmissionClient`` with the cluster's auth header; unreachable → TuneFarmError."""
    import logging

    from ray.job_submission import JobSubmissionClient

    url = dashboard_url(address)
    logging.getLogger("ray").setLevel(logging.ERROR)
    try:
        return JobSubmissionClient(url, headers=auth_headers())
    except Exception as err:
        raise unreachable(url, err) from None


def state_get(address: str | None, resource: str, **params: Any) -> list[dict[str, Any]]:
    """Rows of Ray's state API (``/api/v0/<resource>``) on the dashboard."""
    import requests

    url = dashboard_url(address)
    query = {"limit": 10000, "detail": "true", "timeout": 30, **params}
    try:
        resp = requests.get(
            f"{url}/api/v0/{resource}", params=query, headers=auth_headers(), timeout=35
        )
        resp.raise_for_status()
        body = resp.json()
    except Exception as err:
        raise unreachable(url, err) from None
    if not body.get("result", False):
        raise TuneFarmError(f"Ray state API error on {resource}: {body.get('msg', '')[:200]}")
    return list(body["data"]["result"]["result"])


def job_info(client: Any, job: str) -> Any:
    try:
        return client.get_job_info(job)
    except Exception as err:
        if "404" in str(err) or "does not exist" in str(err):
            raise TuneFarmError(f"no job {job!r} on this cluster (see `tunefarm jobs`)") from None
        raise TuneFarmError(f"cannot read job {job!r}: {failure_reason(err)}") from None


def tune_command(model_name: str, options: dict[str, Any], python: str) -> str:
    """The entrypoint a submitted job runs on the cluster."""
    cmd = [python, "-m", "tuner.cli", "tune", model_name, "--address", "auto"]
    for flag, value in options.items():
        if "/" in flag:  # an on/off pair (--x/--no-x): whichever the value says
            cmd.append(flag.split("/")[0 if value else 1])
            continue
        if value is None or value is False:
            continue
        if isinstance(value, list):
            for v in value:
                cmd += [flag, str(v)]
        elif value is True:
            cmd.append(flag)
        else:
            cmd += [flag, str(value)]
    return shlex.join(cmd)


def job_runtime_env(work_dir: str, rpc_tracker: str | None, rpc_key: str) -> dict[str, Any]:
    """The job's runtime env: the shipped folder, and where its RPC devices are."""
    env: dict[str, Any] = {"working_dir": work_dir}
    if rpc_tracker:
        host, _, port = rpc_tracker.rpartition(":")
        if not host or not port.isdigit():
            raise TuneFarmError(f"--rpc-tracker must be HOST:PORT, got {rpc_tracker!r}")
        env["env_vars"] = {"TUNEFARM_RPC_TRACKER": rpc_tracker, "TUNEFARM_RPC_KEY": rpc_key}
    return env


def job_dict(info: Any) -> dict[str, Any]:
    return {
        "id": info.submission_id or info.job_id,
        "status": str(info.status.value if hasattr(info.status, "value") else info.status),
        "message": info.message,
        "entrypoint": info.entrypoint,
        "metadata": info.metadata or {},
        "start_time": info.start_time,
        "end_time": info.end_time,
    }


GPU_CHECK_TIMEOUT_S = 60


def cluster_workers(address: str | None) -> list[dict[str, Any]]:
    """One row per node: resources, device runners, busy and quarantined slots."""
    nodes = state_get(address, "nodes")
    actors = state_get(
        address, "actors", filter_keys="state", filter_predicates="=", filter_values="ALIVE"
    )
    running = state_get(
        address, "tasks", filter_keys="state", filter_predicates="=", filter_values="RUNNING"
    )
    busy_actors = {t.get("actor_id") for t in running if t.get("name", "").endswith(".measure")}
    rows = []
    for n in sorted(nodes, key=lambda n: (not n.get("is_head_node"), n["node_id"])):
        nid = n["node_id"]
        total = n.get("resources_total") or {}
        runners, quarantined, busy = [], [], []
        for a in actors:
            if a.get("node_id") != nid:
                continue
            label = a.get("repr_name") or a.get("class_name", "")
            if a.get("class_name") == "QuarantinedSlot":
                quarantined.append(label)
            elif a.get("class_name") in RUNNER_CLASSES:
                runners.append(label)
                if a.get("actor_id") in busy_actors:
                    busy.append(label)
        building = sum(
            1 for t in running if t.get("node_id") == nid and t.get("name") == "_build_task"
        )
        devices = []
        if total.get("GPU"):
            devices.append(f"{int(total['GPU'])} GPU")
        devices += [f"{k}={v:g}" for k, v in sorted(total.items()) if k.startswith("tunefarm_")]
        rows.append(
            {
                "node_id": nid,
                "ip": n.get("node_ip"),
                "state": n.get("state"),
                "head": bool(n.get("is_head_node")),
                "cpus": total.get("CPU", 0),
                "gpus": total.get("GPU", 0),
                "memory_gb": round(total.get("memory", 0) / 2**30, 1),
                "devices": devices,
                "resources": total,
                "runners": runners,
                "busy": busy,
                "building": building,
                "quarantined": quarantined,
                "gpu_unusable": None,
            }
        )
    for nid, reason in gpu_check(address, [r["node_id"] for r in rows if r["gpus"]]).items():
        for r in rows:
            if r["node_id"] == nid:
                r["gpu_unusable"] = reason
    return rows


def gpu_check(address: str | None, node_ids: list[str]) -> dict[str, str | None]:
    """Whether each GPU node's TVM can time CUDA kernels (None: it can), asked by a driver
    process joined to the cluster's GCS (``$RAY_ADDRESS``, else ``--address``'s host at port
    6379); when no driver can join, every GPU node gets that as its reason."""
    if not node_ids:
        return {}
    import subprocess
    import sys

    gcs = os.environ.get("RAY_ADDRESS") or parse_address(address or dashboard_url(None)).gcs
    cmd = [sys.executable, "-m", "workers.gpu", gcs, *node_ids]
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=GPU_CHECK_TIMEOUT_S)
        if out.returncode == 0:
            return dict(json.loads(out.stdout))
        why = error_summary(RuntimeError(out.stderr or f"exit {out.returncode}"), with_type=False)
    except subprocess.TimeoutExpired:
        why = f"no answer in {GPU_CHECK_TIMEOUT_S} s (wrong RAY_ADDRESS or auth token?)"
    return dict.fromkeys(node_ids, f"not checked: cannot join {gcs} as a driver: {why}")
