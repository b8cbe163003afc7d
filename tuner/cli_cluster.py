"""``tunefarm submit / jobs / status / logs / workers``: tune jobs on a Ray cluster.

``--address`` names the cluster's head on every command (see ``cli_common.parse_address``);
these commands talk to its dashboard, ``http://HEAD:8265`` unless an ``http://`` address
names another port. Jobs go through Ray's Jobs API on the dashboard: the model file
travels in the job's ``working_dir``, the job runs ``tunefarm tune`` on the cluster against
``--address auto``. Clusters with token authentication (the default in Ray 2.60 when a token
exists) get ``Authorization: Bearer <token>`` from ``$RAY_AUTH_TOKEN``, the file named by
``$RAY_AUTH_TOKEN_PATH`` or ``~/.ray/auth_token``. The cluster's nodes, devices and runners
come from Ray's state API on the same address.
"""

from __future__ import annotations

import asyncio
import json
import os
import shlex
import shutil
import tempfile
import time
import uuid
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape
from rich.table import Table

from database.errors import error_summary
from tuner.cli_common import (
    ArchOpt,
    CostModelOpt,
    DbOpt,
    EntryOpt,
    JobOpt,
    KeepParamsOpt,
    MinRepeatOpt,
    ModelArg,
    PerIterOpt,
    SeedOpt,
    ShapeOpt,
    TargetOpt,
    TransferOpt,
    TrialsOpt,
    check_model_file,
    check_output_file,
    check_tune_options,
    console,
    err_console,
    parse_address,
    ray_address,
    user_errors,
)
from tuner.errors import TuneFarmError

AddressOpt = Annotated[
    str | None,
    typer.Option(
        "--address",
        "-a",
        help="The Ray cluster's head: HOST, HOST:PORT (the GCS, port 6379), ray://HOST:10001, "
        "http://HOST:8265 or auto; reached through its dashboard (http://HOST:8265 unless an "
        "http:// address names another port).",
        show_default="$TUNEFARM_RAY_DASHBOARD, $RAY_API_SERVER_ADDRESS or http://127.0.0.1:8265",
    ),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON.")]
RUNNER_CLASSES = ("DeviceRunner", "ArmBridge")
TERMINAL = ("SUCCEEDED", "FAILED", "STOPPED")


# ----------------------------------------------------------------- connection
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


def _unreachable(url: str, err: BaseException) -> TuneFarmError:
    reason = _reason(err)
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


def _reason(err: BaseException) -> str:
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
        raise _unreachable(url, err) from None


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
        raise _unreachable(url, err) from None
    if not body.get("result", False):
        raise TuneFarmError(f"Ray state API error on {resource}: {body.get('msg', '')[:200]}")
    return list(body["data"]["result"]["result"])


def _job_info(client: Any, job: str) -> Any:
    try:
        return client.get_job_info(job)
    except Exception as err:
        if "404" in str(err) or "does not exist" in str(err):
            raise TuneFarmError(f"no job {job!r} on this cluster (see `tunefarm jobs`)") from None
        raise TuneFarmError(f"cannot read job {job!r}: {_reason(err)}") from None


# ----------------------------------------------------------------- submit
def tune_command(model_name: str, options: dict[str, Any], python: str) -> str:
    """The entrypoint a submitted job runs on the cluster."""
    cmd = [python, "-m", "tuner.cli", "tune", model_name, "--address", "auto"]
    for flag, value in options.items():
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


def submit(
    model: ModelArg,
    address: AddressOpt = None,
    target: TargetOpt = "llvm",
    arch: ArchOpt = None,
    trials: TrialsOpt = 64,
    db: DbOpt = None,
    job: JobOpt = None,
    seed: SeedOpt = None,
    per_iter: PerIterOpt = 64,
    min_repeat_ms: MinRepeatOpt = 50,
    shape: ShapeOpt = None,
    entry: EntryOpt = "Module",
    keep_params: KeepParamsOpt = False,
    cost_model: CostModelOpt = "tunefarm",
    transfer: TransferOpt = False,
    python: Annotated[
        str, typer.Option(help="Python of TuneFarm's environment on the cluster.")
    ] = "python",
    rpc_tracker: Annotated[
        str | None,
        typer.Option(help="TVM RPC tracker HOST:PORT of devices that cannot run Ray (arm64)."),
    ] = None,
    rpc_key: Annotated[str, typer.Option(help="Device key on the RPC tracker.")] = "arm",
    follow: Annotated[
        bool, typer.Option("--follow", "-f", help="Stream the job's logs until it ends.")
    ] = False,
) -> None:
    """Submit a tune job for MODEL to a Ray cluster (Jobs API); prints its id."""
    from tuner.buckets import parse_shape_options
    from tuner.targets import resolve_target

    # everything that can be checked here is, before contacting the cluster
    check_model_file(model)
    check_tune_options(trials, per_iter, min_repeat_ms)
    if target in ("llvm", "arm64") or target.lstrip().startswith("{"):
        resolve_target(target, arch)  # cuda's arch may come from the cluster's GPU
    parse_shape_options(shape or [])
    job_runtime_env(".", rpc_tracker, rpc_key)
    client = job_client(address)
    name = job or f"{model.stem}-{time.strftime('%Y%m%d-%H%M%S')}"
    options = {
        "--target": target,
        "--arch": arch,
        "--trials": trials,
        "--db": db,
        "--job": name,
        "--seed": seed,
        "--per-iter": per_iter,
        "--min-repeat-ms": min_repeat_ms,
        "--shape": shape or [],
        "--entry": entry,
        "--keep-params": keep_params,
        "--cost-model": cost_model,
        "--transfer": transfer,
    }
    submission_id = f"tunefarm-{name}-{uuid.uuid4().hex[:6]}"
    with tempfile.TemporaryDirectory(prefix="tunefarm-submit-") as work:
        shutil.copy2(model, Path(work) / model.name)
        try:
            client.submit_job(
                entrypoint=tune_command(model.name, options, python),
                submission_id=submission_id,
                runtime_env=job_runtime_env(work, rpc_tracker, rpc_key),
                metadata={
                    "tunefarm": "tune",
                    "model": model.name,
                    "target": target,
                    "trials": str(trials),
                    "job_name": name,
                },
            )
        except Exception as err:
            raise TuneFarmError(f"job submission failed: {_reason(err)}") from None
    console.print(f"submitted [bold]{submission_id}[/bold]", highlight=False)
    if db is None:
        err_console.print(
            "[yellow]note:[/yellow] no --db: the job uses the cluster's $TUNEFARM_DB "
            "(or a SQLite file in its temporary working dir)"
        )
    if follow:
        _follow(client, submission_id)
    else:
        console.print(f"follow it with: tunefarm logs {submission_id} --follow", highlight=False)


# ----------------------------------------------------------------- jobs, status, logs
def _ts(ms: int | None) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ms / 1000)) if ms else "-"


def _duration(info: Any) -> str:
    if not info.start_time:
        return "-"
    end = info.end_time or time.time() * 1000
    return f"{(end - info.start_time) / 1000:.0f} s"


def _job_dict(info: Any) -> dict[str, Any]:
    return {
        "id": info.submission_id or info.job_id,
        "status": str(info.status.value if hasattr(info.status, "value") else info.status),
        "message": info.message,
        "entrypoint": info.entrypoint,
        "metadata": info.metadata or {},
        "start_time": info.start_time,
        "end_time": info.end_time,
    }


def jobs(
    address: AddressOpt = None,
    show_all: Annotated[bool, typer.Option("--all", help="Include non-TuneFarm jobs.")] = False,
    as_json: JsonOpt = False,
) -> None:
    """List the cluster's tune jobs, newest first."""
    client = job_client(address)
    try:
        found = client.list_jobs()
    except Exception as err:
        raise TuneFarmError(f"cannot list jobs: {_reason(err)}") from None
    found = [j for j in found if show_all or (j.metadata or {}).get("tunefarm")]
    found.sort(key=lambda j: j.start_time or 0, reverse=True)
    if as_json:
        print(json.dumps([_job_dict(j) for j in found], indent=2))
        return
    table = Table(title=f"jobs on {dashboard_url(address)}")
    for col in ("job", "status", "model", "target", "trials", "started", "duration"):
        table.add_column(col, justify="right" if col in ("trials", "duration") else "left")
    styles = {"SUCCEEDED": "green", "FAILED": "red", "RUNNING": "cyan", "STOPPED": "yellow"}
    for j in found:
        meta = j.metadata or {}
        status = _job_dict(j)["status"]
        style = styles.get(status, "white")
        table.add_row(
            escape(j.submission_id or j.job_id or "-"),
            f"[{style}]{status}[/{style}]",
            escape(meta.get("model", "-")),
            escape(meta.get("target", "-")),
            meta.get("trials", "-"),
            _ts(j.start_time),
            _duration(j),
        )
    console.print(table)
    if not found:
        console.print("no TuneFarm jobs" + ("" if show_all else " (--all shows every job)"))


def status(
    job: Annotated[str, typer.Argument(help="The submission id printed by submit.")],
    address: AddressOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Status of one job (exit code 0 even if the job failed; see the status field)."""
    info = _job_info(job_client(address), job)
    data = _job_dict(info)
    if as_json:
        print(json.dumps(data, indent=2))
        return
    console.print(f"[bold]{escape(data['id'])}[/bold]: {data['status']}", highlight=False)
    if data["message"]:
        console.print(escape(data["message"]), highlight=False)
    console.print(f"started {_ts(info.start_time)}, ran {_duration(info)}", highlight=False)
    console.print(f"entrypoint: {escape(data['entrypoint'])}", highlight=False)


def _follow(client: Any, job: str) -> None:
    async def tail() -> None:
        async for chunk in client.tail_job_logs(job):
            print(chunk, end="", flush=True)

    try:
        asyncio.run(tail())
    except Exception as err:
        raise TuneFarmError(f"lost the log stream of {job}: {_reason(err)}") from None
    final = _job_info(client, job)
    state = _job_dict(final)["status"]
    console.print(f"job {job} {state}", highlight=False)
    if state != "SUCCEEDED":
        raise typer.Exit(1)


def logs(
    job: Annotated[str, typer.Argument(help="The submission id printed by submit.")],
    address: AddressOpt = None,
    follow: Annotated[
        bool, typer.Option("--follow", "-f", help="Stream until the job ends.")
    ] = False,
) -> None:
    """Print a job's logs (``--follow``: stream them; exit 1 if the job does not succeed)."""
    client = job_client(address)
    _job_info(client, job)
    if follow:
        _follow(client, job)
        return
    try:
        print(client.get_job_logs(job), end="")
    except Exception as err:
        raise TuneFarmError(f"cannot read the logs of {job}: {_reason(err)}") from None


# ----------------------------------------------------------------- workers
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


def workers(address: AddressOpt = None, as_json: JsonOpt = False) -> None:
    """The cluster's nodes, devices, resources, runners, and which are busy or quarantined."""
    rows = cluster_workers(address)
    if as_json:
        print(json.dumps(rows, indent=2))
        return
    table = Table(title=f"workers of {dashboard_url(address)}")
    for col in ("node", "ip", "state", "CPU", "GPU", "memory", "devices", "runners", "busy"):
        table.add_column(col, justify="right" if col in ("CPU", "GPU", "memory") else "left")
    table.add_column("quarantined")
    for r in rows:
        state = r["state"] or "-"
        devices = [escape(d) for d in r["devices"]]
        if r["gpu_unusable"]:  # the GPU entry comes first
            devices[0] += f" [red](unusable: {escape(r['gpu_unusable'])})[/red]"
        style = "green" if state == "ALIVE" else "red"
        busy = [*r["busy"], *([f"{r['building']} build(s)"] if r["building"] else [])]
        table.add_row(
            r["node_id"][:12] + (" (head)" if r["head"] else ""),
            r["ip"] or "-",
            f"[{style}]{state}[/{style}]",
            f"{r['cpus']:g}",
            f"{r['gpus']:g}",
            f"{r['memory_gb']:g} GiB",
            ", ".join(devices) or "-",
            escape(", ".join(r["runners"]) or "-"),
            escape(", ".join(busy) or "-"),
            "[red]" + escape(", ".join(r["quarantined"])) + "[/red]" if r["quarantined"] else "-",
        )
    console.print(table)
    alive = sum(r["state"] == "ALIVE" for r in rows)
    console.print(f"{alive}/{len(rows)} nodes alive", highlight=False)


def register(app: typer.Typer) -> None:
    """Add the cluster commands to the ``tunefarm`` app."""
    for fn in (submit, jobs, status, logs, workers):
        app.command(name=fn.__name__)(user_errors(fn))


# ----------------------------------------------------------------- bench --address
def bench_cluster(
    model: Path,
    address: str | None,
    devices: list[str] | None,
    db: str | None,
    shape: list[str] | None,
    json_out: Path | None,
    entry: str,
    keep_params: bool,
) -> None:
    """``tunefarm bench MODEL --address RAY [--devices KIND,...]``: one row per device kind."""
    import itertools

    from tuner.buckets import choose_buckets, parse_shape_options
    from tuner.cli_common import open_storage
    from tuner.cluster_bench import bench_on_cluster, parse_devices
    from tuner.model import load_model
    from tuner.progress import fmt_sec
    from workers.config import MeasureConfig
    from workers.ray_pool import RayConnection

    if address is None:
        raise TuneFarmError("--devices needs --address (the Ray cluster to bench on)")
    kinds = parse_devices(devices)  # before anything slow: a typo is one line at once
    given = parse_shape_options(shape or [])
    if json_out is not None and str(json_out) != "-":
        check_output_file(json_out, "--json")
    ray_addr = ray_address(address)  # reachable, before loading the model
    loaded = load_model(model, entry, keep_params=keep_params)
    buckets = choose_buckets(loaded.mod, given, loaded.shape_vars)
    # the values given, else the largest bucket of each symbolic variable
    values = {name: given.get(name) or [vals[-1]] for name, vals in buckets.items()}
    shapes = [dict(zip(values, c, strict=True)) for c in itertools.product(*values.values())]
    storage = open_storage(db, create=False)
    as_json = json_out is not None and str(json_out) == "-"
    log = None if as_json else (lambda msg: err_console.print(escape(msg), highlight=False))
    config = MeasureConfig(number=1, repeat=5, min_repeat_ms=50, run_timeout_s=300)
    try:
        with RayConnection(ray_addr):
            results = bench_on_cluster(loaded, storage, kinds, shapes or [{}], config, log)
    except ConnectionError as err:
        raise TuneFarmError(f"cannot reach the Ray cluster at {address}: {err}") from None
    payload = {"model": model.name, "results": [r.to_dict() for r in results]}
    if as_json:
        print(json.dumps(payload, indent=2))
    else:
        table = Table(title=f"{model.name} on the cluster: tuned vs untuned default")
        cols = ("device", "target", "shape", "untuned", "tuned", "speedup", "tuned kernels")
        for col in cols:
            table.add_column(col, justify="left" if col in cols[:3] else "right")
        for r in results:
            label = ",".join(f"{k}={v}" for k, v in r.shape.items()) or "static"
            table.add_row(
                escape(f"{r.kind} ({r.device})"),
                escape(r.target),
                label,
                fmt_sec(r.untuned_sec),
                fmt_sec(r.tuned_sec),
                f"{r.speedup:.2f}x" if r.speedup else "-",
                f"{r.tuned_share:.0%} ({r.tuned_kernels}/{r.kernels} calls)",
            )
        console.print(table)
        for r in results:
            if r.error:
                err_console.print(f"[red]{escape(r.kind)}:[/red] {escape(r.error)}")
        if json_out is not None:
            json_out.write_text(json.dumps(payload, indent=2))
    if any(r.error for r in results):
        raise typer.Exit(2)
