"""A real multi-node Ray cluster started with ``ray start`` (head + nodes) for CLI tests.

Every port is a free one and the cluster has its own temp dir and auth token, so it never
meets another developer's Ray on a shared machine; it is stopped by killing the process groups
it started (never ``ray stop``, which would stop every Ray of this user).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def repo_pythonpath() -> str:
    """``PYTHONPATH`` with this repository first, so Ray workers import its test helpers."""
    return os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)


@contextlib.contextmanager
def repo_on_pythonpath() -> Iterator[None]:
    """Set :func:`repo_pythonpath` for Ray workers started inside; restore it after."""
    old = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = repo_pythonpath()
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = old


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _ray_bin() -> str:
    return str(Path(sys.executable).with_name("ray"))


def _node_ports() -> list[str]:
    out = []
    for flag in (
        "--node-manager-port",
        "--object-manager-port",
        "--metrics-export-port",
        "--dashboard-agent-listen-port",
        "--dashboard-agent-grpc-port",
        "--runtime-env-agent-port",
    ):
        out += [flag, str(free_port())]
    return out


@dataclass
class RayProcesses:
    """Head and worker nodes of one private cluster; use as a context manager. A worker's
    ``"GPU": n`` declares n logical GPUs (no device behind them)."""

    worker_resources: list[dict[str, float]] = field(default_factory=lambda: [{}])
    head_cpus: int = 1
    token: str = field(default_factory=lambda: uuid.uuid4().hex + uuid.uuid4().hex)
    temp_dir: str = ""
    gcs_port: int = 0
    dashboard_port: int = 0
    pgids: list[int] = field(default_factory=list)

    @property
    def dashboard(self) -> str:
        return f"http://127.0.0.1:{self.dashboard_port}"

    @property
    def gcs_address(self) -> str:
        return f"127.0.0.1:{self.gcs_port}"

    def env(self) -> dict[str, str]:
        """Environment of the cluster's processes (and of clients that should reach it)."""
        return {
            **os.environ,
            "RAY_USAGE_STATS_ENABLED": "0",
            "RAY_AUTH_MODE": "token",
            "RAY_AUTH_TOKEN": self.token,
            "PYTHONPATH": repo_pythonpath(),
            "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
        }

    def _start(self, args: list[str]) -> None:
        proc = subprocess.Popen(
            [_ray_bin(), "start", "--disable-usage-stats", *args],
            env=self.env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,  # its daemons share this process group
        )
        self.pgids.append(proc.pid)
        out, _ = proc.communicate(timeout=180)
        if proc.returncode != 0:
            raise RuntimeError(f"ray start failed:\n{out[-3000:]}")

    def __enter__(self) -> RayProcesses:
        import json

        self.temp_dir = tempfile.mkdtemp(prefix="tfr-", dir="/tmp")  # short: socket paths
        self.gcs_port, self.dashboard_port = free_port(), free_port()
        try:
            self._start(
                [
                    "--head",
                    "--node-ip-address=127.0.0.1",
                    f"--port={self.gcs_port}",
                    "--dashboard-host=127.0.0.1",
                    f"--dashboard-port={self.dashboard_port}",
                    f"--ray-client-server-port={free_port()}",
                    f"--temp-dir={self.temp_dir}",
                    f"--num-cpus={self.head_cpus}",
                    *_node_ports(),
                ]
            )
            for resources in self.worker_resources:
                resources = dict(resources)
                gpus = int(resources.pop("GPU", 0))  # logical GPUs: `ray start --num-gpus`
                self._start(
                    [
                        f"--address={self.gcs_address}",
                        "--node-ip-address=127.0.0.1",
                        "--num-cpus=1",
                        f"--num-gpus={gpus}",
                        f"--resources={json.dumps(resources)}",
                        *_node_ports(),
                    ]
                )
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _stragglers(self) -> list[int]:
        """Processes whose environment carries this cluster's unique token."""
        needle = f"RAY_AUTH_TOKEN={self.token}".encode()
        found = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit() or int(entry.name) == os.getpid():
                continue
            with contextlib.suppress(OSError):
                if needle in (entry / "environ").read_bytes():
                    found.append(int(entry.name))
        return found

    def stop(self) -> None:
        """Kill the process groups this cluster started, and nothing else."""
        for sig in (signal.SIGTERM, signal.SIGKILL):
            for pgid in self.pgids:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(pgid, sig)
            if sig == signal.SIGTERM:
                time.sleep(2)
        self.pgids.clear()
        for pid in self._stragglers():  # e.g. a job's driver, which runs in its own session
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        if self.temp_dir:
            shutil.rmtree(self.temp_dir, ignore_errors=True)
