"""``tunefarm submit / jobs / status / logs / workers``: tune jobs on a Ray cluster, thin
commands over :mod:`tuner.cluster.client`.

``--address`` names the cluster's head on every command (see ``tuner.cluster.address``);
these commands talk to its dashboard, ``http://HEAD:8265`` unless an ``http://`` address
names another port. Jobs go through Ray's Jobs API on the dashboard: the model file
travels in the job's ``working_dir``, the job runs ``tunefarm tune`` on the cluster against
``--address auto``. Clusters with token authentication (the default in Ray 2.60 when a token
exists) get its token (see the client). The cluster's nodes, devices and runners
come from Ray's state API on the same address.
"""

from __future__ import annotations

import asyncio
import dataclasses
import shutil
import tempfile
import time
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.markup import escape
from rich.table import Table

from tuner.cli.common import (
    JsonOpt,
    ModelArg,
    TuneOptions,
    check_model_file,
    console,
    err_console,
    print_json,
    user_errors,
    with_tune_options,
)
from tuner.cli.render import json_text
from tuner.cluster.address import ray_address
from tuner.cluster.client import (
    cluster_workers,
    dashboard_url,
    failure_reason,
    job_client,
    job_dict,
    job_info,
    job_runtime_env,
    tune_command,
)
from tuner.errors import TuneFarmError

if TYPE_CHECKING:
    from tuner.services import ModelSource

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


def submit(
    model: ModelArg,
    opts: TuneOptions,
    address: AddressOpt = None,
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
    from tuner.symbolic.buckets import parse_shape_options
    from tuner.targets import resolve_target

    # everything that can be checked here is, before contacting the cluster (the options
    # were checked when opts was made)
    check_model_file(model)
    if opts.target in ("llvm", "arm64") or opts.target.lstrip().startswith("{"):
        resolve_target(opts.target, opts.arch)  # cuda's arch may come from the cluster's GPU
    parse_shape_options(opts.shape or [])
    job_runtime_env(".", rpc_tracker, rpc_key)
    client = job_client(address)
    name = opts.job or f"{model.stem}-{time.strftime('%Y%m%d-%H%M%S')}"
    options = dataclasses.replace(opts, job=name).flags()
    target, trials, db = opts.target, opts.trials, opts.db
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
            raise TuneFarmError(f"job submission failed: {failure_reason(err)}") from None
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


# where the jobs of `tunefarm tune` without a cluster are
LOCAL_JOBS = "the jobs of a local tune are in its database: tunefarm db list --jobs [--db URL]"


def jobs(
    address: AddressOpt = None,
    show_all: Annotated[bool, typer.Option("--all", help="Include non-TuneFarm jobs.")] = False,
    as_json: JsonOpt = False,
) -> None:
    """List the cluster's tune jobs, newest first (jobs run without a cluster are in the
    database: tunefarm db list --jobs)."""
    try:
        client = job_client(address)
        found = client.list_jobs()
    except TuneFarmError as err:
        raise TuneFarmError(f"{err}; {LOCAL_JOBS}") from None
    except Exception as err:
        raise TuneFarmError(f"cannot list jobs: {failure_reason(err)}; {LOCAL_JOBS}") from None
    found = [j for j in found if show_all or (j.metadata or {}).get("tunefarm")]
    found.sort(key=lambda j: j.start_time or 0, reverse=True)
    if as_json:
        print_json([job_dict(j) for j in found])
        return
    table = Table(title=f"jobs on {dashboard_url(address)}")
    for col in ("job", "status", "model", "target", "trials", "started", "duration"):
        table.add_column(col, justify="right" if col in ("trials", "duration") else "left")
    styles = {"SUCCEEDED": "green", "FAILED": "red", "RUNNING": "cyan", "STOPPED": "yellow"}
    for j in found:
        meta = j.metadata or {}
        status = job_dict(j)["status"]
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
    info = job_info(job_client(address), job)
    data = job_dict(info)
    if as_json:
        print_json(data)
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
        raise TuneFarmError(f"lost the log stream of {job}: {failure_reason(err)}") from None
    final = job_info(client, job)
    state = job_dict(final)["status"]
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
    job_info(client, job)
    if follow:
        _follow(client, job)
        return
    try:
        print(client.get_job_logs(job), end="")
    except Exception as err:
        raise TuneFarmError(f"cannot read the logs of {job}: {failure_reason(err)}") from None


def workers(address: AddressOpt = None, as_json: JsonOpt = False) -> None:
    """The cluster's nodes, devices, resources, runners, and which are busy or quarantined."""
    rows = cluster_workers(address)
    if as_json:
        print_json(rows)
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
    app.command(name="submit")(user_errors(with_tune_options(submit)))
    for fn in (jobs, status, logs, workers):
        app.command(name=fn.__name__)(user_errors(fn))


# ----------------------------------------------------------------- bench --address
def bench_cluster(
    source: ModelSource,
    address: str | None,
    devices: list[str] | None,
    shape: list[str] | None,
    as_json: bool,
    output: Path | None,
) -> None:
    """``tunefarm bench MODEL --address RAY [--devices KIND,...]``: one row per device kind."""
    import itertools

    from tuner.cluster.bench import bench_on_cluster, parse_devices
    from tuner.symbolic.buckets import choose_buckets, parse_shape_options
    from workers.config import MeasureConfig
    from workers.connection import RayConnection

    if address is None:
        raise TuneFarmError("--devices needs --address (the Ray cluster to bench on)")
    kinds = parse_devices(devices)  # before anything slow: a typo is one line at once
    given = parse_shape_options(shape or [])
    ray_addr = ray_address(address)  # reachable, before loading the model
    loaded = source.load()
    buckets = choose_buckets(loaded.mod, given, loaded.shape_vars)
    # the values given, else the largest bucket of each symbolic variable
    values = {name: given.get(name) or [vals[-1]] for name, vals in buckets.items()}
    shapes = [dict(zip(values, c, strict=True)) for c in itertools.product(*values.values())]
    storage = source.storage(create=False)
    log = None if as_json else (lambda msg: err_console.print(escape(msg), highlight=False))
    config = MeasureConfig(number=1, repeat=5, min_repeat_ms=50, run_timeout_s=300)
    try:
        with RayConnection(ray_addr):
            results = bench_on_cluster(loaded, storage, kinds, shapes or [{}], config, log)
    except ConnectionError as err:
        raise TuneFarmError(f"cannot reach the Ray cluster at {address}: {err}") from None
    model = source.path
    payload = {"model": model.name, "results": [r.to_dict() for r in results]}
    if as_json:
        print_json(payload)
    else:
        table = Table(title=f"{model.name} on the cluster: tuned vs untuned default")
        cols = ("device", "target", "shape", "untuned", "tuned", "speedup", "tuned kernels")
        for col in cols:
            table.add_column(col, justify="left" if col in cols[:3] else "right")
        from tuner.bench.results import shape_label
        from tuner.progress import fmt_sec

        for r in results:
            label = shape_label(r.shape)
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
    if output is not None:
        output.write_text(json_text(payload))
    if any(r.error for r in results):
        raise typer.Exit(2)
