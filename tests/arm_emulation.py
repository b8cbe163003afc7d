"""An emulated aarch64 TVM RPC device on an x86 host: set up once, start, stop.

``python -m tests.arm_emulation setup`` builds, into ``~/.cache/tunefarm/arm`` (or
``$TUNEFARM_ARM_CACHE``), an aarch64 CPython 3.11 sysroot unpacked from Debian's arm64 packages
(``dpkg -x``, nothing installed into ``/``), the aarch64 wheels of TVM's runtime, and a wrapper
that runs that Python under ``qemu-aarch64-static``. It is idempotent (a ``.ready`` stamp).
``start`` runs a TVM RPC tracker (x86) and an RPC server under emulation registered with a
device key; ``stop`` kills their process groups. Host packages (Debian 12, root):
``qemu-user-static gcc-aarch64-linux-gnu g++-aarch64-linux-gnu`` and ``dpkg
--add-architecture arm64``. Timings under emulation mean nothing; correctness and the path do.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

TVM_WHEELS = ("apache-tvm==0.27.0.post1", "apache-tvm-ffi==0.1.14.post0")
OTHER_WHEELS = ("numpy", "psutil", "cloudpickle", "tornado", "ml_dtypes", "typing_extensions")
PLATFORMS = ("manylinux_2_28_aarch64", "manylinux2014_aarch64", "manylinux_2_17_aarch64")
ARM_PACKAGES = [
    "python3.11-minimal",
    "libpython3.11-minimal",
    "libpython3.11-stdlib",
    "libc6",
    "libexpat1",
    "zlib1g",
    "libssl3",
    "libbz2-1.0",
    "libcrypt1",
    "libffi8",
    "liblzma5",
    "libncursesw6",
    "libreadline8",
    "libsqlite3-0",
    "libtinfo6",
    "libuuid1",
    "libstdc++6",
    "libgcc-s1",
    "libgomp1",
    "libzstd1",
    "libtirpc3",
    "libnsl2",
    "libdb5.3",
    "libgssapi-krb5-2",
    "libkrb5-3",
    "libk5crypto3",
    "libkrb5support0",
    "libcom-err2",
    "libkeyutils1",
]
HOST_PACKAGES = ("qemu-user-static", "gcc-aarch64-linux-gnu", "g++-aarch64-linux-gnu")
STAMP_VERSION = "1"


class EmulationUnavailable(RuntimeError):
    """The host lacks what the emulated worker needs (with the reason)."""


def cache_dir() -> Path:
    return Path(os.environ.get("TUNEFARM_ARM_CACHE") or Path.home() / ".cache/tunefarm/arm")


def _run(cmd: list[str], **kw: object) -> str:
    res = subprocess.run(cmd, capture_output=True, text=True, **kw)  # type: ignore[call-overload]
    if res.returncode != 0:
        raise EmulationUnavailable(f"{' '.join(cmd[:4])}... failed: {res.stderr.strip()[-500:]}")
    return res.stdout


def host_ready() -> str | None:
    """None if qemu and the cross compiler are there, else why not."""
    missing = [
        tool for tool in ("qemu-aarch64-static", "aarch64-linux-gnu-gcc") if not shutil.which(tool)
    ]
    if missing:
        return f"missing {', '.join(missing)} (apt-get install {' '.join(HOST_PACKAGES)})"
    return None


def install_host_packages() -> None:
    """apt-get the host packages (root only); a no-op when they are there."""
    if host_ready() is None:
        return
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        raise EmulationUnavailable(host_ready() or "")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    _run(["apt-get", "update", "-qq"], env=env)
    _run(["apt-get", "install", "-y", "--no-install-recommends", *HOST_PACKAGES], env=env)


def _sysroot(root: Path) -> Path:
    sysroot = root / "sysroot"
    if (sysroot / "usr/bin/python3.11").exists():
        return sysroot
    if "arm64" not in _run(["dpkg", "--print-foreign-architectures"]).split():
        if os.geteuid() != 0:
            raise EmulationUnavailable("dpkg has no arm64 architecture (dpkg --add-architecture)")
        _run(["dpkg", "--add-architecture", "arm64"])
        _run(["apt-get", "update", "-qq"])
    debs = root / "debs"
    debs.mkdir(parents=True, exist_ok=True)
    try:
        _run(["apt-get", "download", *[f"{p}:arm64" for p in ARM_PACKAGES]], cwd=debs)
    except EmulationUnavailable:
        _run(["apt-get", "update", "-qq"])
        _run(["apt-get", "download", *[f"{p}:arm64" for p in ARM_PACKAGES]], cwd=debs)
    tmp = root / "sysroot.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    for deb in sorted(debs.glob("*.deb")):
        _run(["dpkg", "-x", str(deb), str(tmp)])
    tmp.rename(sysroot)
    return sysroot


def _site(root: Path) -> Path:
    site = root / "site"
    if (site / "tvm/lib/libtvm_runtime.so").exists():
        return site
    wheels = root / "wheels"
    plat: list[str] = []
    for p in PLATFORMS:
        plat += ["--platform", p]
    common = ["--only-binary=:all:", "--python-version", "3.11", "--implementation", "cp", *plat]
    pip = [sys.executable, "-m", "pip"]
    pkgs = [*TVM_WHEELS, *OTHER_WHEELS]
    _run([*pip, "download", "--quiet", "--no-deps", *common, "-d", str(wheels), *pkgs])
    tmp = root / "site.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    install = [*pip, "install", "--quiet", "--no-deps", "--no-index", "--find-links"]
    _run([*install, str(wheels), *common, "--target", str(tmp), *pkgs])
    compiler = tmp / "tvm/lib/libtvm_compiler.so"
    if compiler.exists():
        compiler.unlink()  # a runtime-only worker: 240 MB less
    tmp.rename(site)
    return site


def setup(root: Path | None = None, *, install: bool = False) -> Path:
    """Build the emulated worker under ``root`` (idempotent); the wrapper's path."""
    root = root or cache_dir()
    wrapper = root / "python-aarch64"
    stamp = root / ".ready"
    ready = stamp.exists() and stamp.read_text() == STAMP_VERSION and wrapper.exists()
    if ready and host_ready() is None:
        return wrapper
    if install:
        install_host_packages()
    reason = host_ready()
    if reason:
        raise EmulationUnavailable(reason)
    root.mkdir(parents=True, exist_ok=True)
    sysroot, site = _sysroot(root), _site(root)
    wrapper.write_text(
        "#!/bin/sh\n"
        f'export QEMU_LD_PREFIX="{sysroot}"\n'
        f'export PYTHONPATH="{site}"\n'
        "export TVM_USE_RUNTIME_LIB=1\n"
        # -0: argv[0] is this wrapper, so TVM's server re-executes its child through qemu too
        f'exec qemu-aarch64-static -L "{sysroot}" -0 "$0" "{sysroot}/usr/bin/python3.11" "$@"\n'
    )
    wrapper.chmod(0o755)
    stamp.write_text(STAMP_VERSION)
    return wrapper


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class EmulatedDevice:
    """A running tracker + emulated RPC server; stop() kills both process groups."""

    tracker_port: int
    server_port: int
    key: str
    procs: list[subprocess.Popen] = field(default_factory=list)

    @property
    def tracker(self) -> str:
        return f"127.0.0.1:{self.tracker_port}"

    def stop_server(self) -> None:
        """Kill only the RPC server (a device that disconnects)."""
        if len(self.procs) > 1:
            _killpg(self.procs[1])

    def stop(self) -> None:
        for proc in reversed(self.procs):
            _killpg(proc)
        self.procs.clear()

    def __enter__(self) -> EmulatedDevice:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _killpg(proc: subprocess.Popen) -> None:
    for sig in (signal.SIGTERM, signal.SIGKILL):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, sig)
        try:
            proc.wait(timeout=3)
            return
        except subprocess.TimeoutExpired:
            continue


def wait_for_server(tracker: str, key: str, timeout: float = 120) -> None:
    """Until the tracker lists a free server for ``key``."""
    from tvm import rpc

    host, port = tracker.rsplit(":", 1)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(Exception):
            summary = rpc.connect_tracker(host, int(port)).summary()
            if summary.get("queue_info", {}).get(key, {}).get("free", 0) > 0:
                return
        time.sleep(1.0)
    raise EmulationUnavailable(f"no RPC server for key {key!r} within {timeout:.0f} s")


def start_server(
    wrapper: Path, tracker: str, key: str, port: int | None = None
) -> subprocess.Popen:
    """The emulated RPC server process (its own process group), registered with the tracker."""
    site = wrapper.parent / "site"
    port = port or free_port()
    log = open(wrapper.parent / f"server-{port}.log", "w")  # noqa: SIM115 (lives with the proc)
    extra = site / "tvm/lib/libtvm_runtime_extra.so"
    server = ["-m", "tvm.exec.rpc_server", "--host", "127.0.0.1", "--port", str(port)]
    server += ["--port-end", str(port + 1), "--tracker", tracker, "--key", key]
    return subprocess.Popen(
        [str(wrapper), *server, "--load-library", str(extra)],
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )


def start(key: str = "arm-qemu", root: Path | None = None, timeout: float = 180) -> EmulatedDevice:
    """Start a tracker and one emulated server; returns when the server is registered."""
    wrapper = setup(root)
    tport, sport = free_port(), free_port()
    ports = ["--port", str(tport), "--port-end", str(tport + 1)]
    tracker = subprocess.Popen(
        [sys.executable, "-m", "tvm.exec.rpc_tracker", "--host", "127.0.0.1", *ports],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    device = EmulatedDevice(tport, sport, key, [tracker])
    try:
        device.procs.append(start_server(wrapper, device.tracker, key, sport))
        wait_for_server(device.tracker, key, timeout)
    except BaseException:
        device.stop()
        raise
    return device


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("setup", help="build the emulated worker into the cache (idempotent)")
    s.add_argument("--install", action="store_true", help="apt-get the host packages (root)")
    r = sub.add_parser("serve", help="run a tracker + emulated server until Ctrl-C")
    r.add_argument("--key", default="arm-qemu")
    args = parser.parse_args()
    try:
        if args.cmd == "setup":
            print(setup(install=args.install))
            return
        with start(args.key) as dev:
            print(json.dumps({"tracker": dev.tracker, "key": dev.key}), flush=True)
            with contextlib.suppress(KeyboardInterrupt):
                while all(p.poll() is None for p in dev.procs):
                    time.sleep(1)
    except EmulationUnavailable as err:
        print(f"error: {err}", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
