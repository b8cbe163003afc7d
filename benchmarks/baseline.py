"""Baselines (numpy/OpenBLAS, the SGEMM peak) timed away from TVM's thread pool.

After a kernel call TVM's pool workers spin-wait (``sched_yield`` in a loop,
``TVM_THREAD_POOL_SPIN_COUNT`` iterations, 300,000 by default) and fight OpenBLAS's threads for
the cores: numpy timed in the same process right after TVM calls spreads by up to 7,100%.
:class:`BaselineProcess` is a long-lived child process that never imports tvm and times the
baselines there, with as many OpenBLAS threads as TVM uses. Before each baseline sample the
parent waits until its own threads are idle (:func:`wait_quiet`), and the child does the same
after each sample, so neither side's spinning threads overlap the other's timing.
:func:`interleave` alternates TVM and baseline repeats so that load changes hit both.

``TVM_THREAD_POOL_SPIN_COUNT=0`` stops the spinning, but TVM reads it once per process (at the
pool's first use), so it cannot be switched off for a phase; setting it for the whole run would
change the TVM figures themselves (a wake-up per parallel launch), hence the wait.

:func:`invalid_reason` says why a figure must not be printed as a ratio: a spread over repeats
above :data:`INVALID_SPREAD` or a rate above the measured SGEMM peak.

The child speaks JSON lines on stdin/stdout: ``python -m benchmarks.baseline --serve``.
"""

from __future__ import annotations

import ast
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any

import numpy as np

from benchmarks.common import stat

INVALID_SPREAD = 0.25  # (max - min) / median above this: the figure is invalid
QUIET_CPU = 0.10  # a process is quiet when it uses less than this share of a core...
QUIET_WINDOW_S = 0.02  # ...over a window this long
QUIET_TIMEOUT_S = 3.0
MATMUL = {"kind": "matmul"}


# --------------------------------------------------------------------------- validity
def invalid_reason(t: Any, peak_gflops: float | None = None) -> str | None:
    """Why the timed figure ``t`` (a :func:`stat` dict, maybe with ``gflops``) is invalid, or
    None: its spread is above :data:`INVALID_SPREAD`, or its rate is above the measured peak."""
    if not isinstance(t, dict) or "spread" not in t:
        return None
    if t["spread"] > INVALID_SPREAD:
        text = f"{t['spread']:.0%}"
        if float(text.rstrip("%")) <= INVALID_SPREAD * 100:  # 25.3% is not "25%"
            text = f"{t['spread']:.1%}"
        return f"spread {text}"
    if peak_gflops and t.get("gflops") and t["gflops"] / peak_gflops > 1.0:
        return "above measured peak"
    return None


def measured_peak(calibrations: list[Any]) -> tuple[float | None, str | None]:
    """The reference peak of a run: the best SGEMM calibration whose spread is valid (load only
    lowers a peak), and None or the reason why every calibration is invalid."""
    cals = [c for c in calibrations if isinstance(c, dict) and c.get("gflops")]
    good = [c["gflops"] for c in cals if not invalid_reason(c.get("sec"))]
    if good:
        return max(good), None
    if not cals:
        return None, None
    worst = min(cals, key=lambda c: c.get("sec", {}).get("spread", 0.0))
    return max(c["gflops"] for c in cals), f"peak {invalid_reason(worst.get('sec'))}"


def timed_figures(results: Any) -> Iterator[tuple[str, dict[str, Any]]]:
    """Every timed figure (a :func:`stat` dict) in a results tree, with its path
    (``kernels[128].numpy``: list items are labelled by their ``M`` or ``b``)."""

    def walk(obj: Any, path: str) -> Iterator[tuple[str, dict[str, Any]]]:
        if isinstance(obj, dict):
            if "median" in obj and "spread" in obj:
                yield path, obj
                return
            for k, v in obj.items():
                yield from walk(v, f"{path}.{k}" if path else str(k))
        elif isinstance(obj, list):
            for i, v in enumerate(obj):
                label = v.get("M", v.get("b", i)) if isinstance(v, dict) else i
                yield from walk(v, f"{path}[{label}]")

    yield from walk(results, "")


def invalid_figures(results: Any, peak: float | None, stamp: bool = True) -> list[str]:
    """Every timed figure in ``results`` that is invalid, as ``path (reason)``; with
    ``stamp``, each figure's ``invalid`` field is set to its reason."""
    out: list[str] = []
    for path, fig in timed_figures(results):
        why = invalid_reason(fig, peak)
        if stamp:
            fig["invalid"] = why
        if why:
            out.append(f"{path} ({why})")
    return out


def invalid_cell(reason: str) -> str:
    """How a report prints an invalid figure: ``invalid (spread 31%)``."""
    return f"invalid ({reason})"


def time_loop(fn: Callable[[], Any], min_ms: float) -> float:
    """Seconds per call of ``fn``, looping for at least ``min_ms`` (one repeat)."""
    number, start = 0, time.perf_counter()
    while True:
        fn()
        number += 1
        elapsed = time.perf_counter() - start
        if elapsed * 1e3 >= min_ms:
            return elapsed / number


def wait_quiet(
    timeout_s: float = QUIET_TIMEOUT_S, window_s: float = QUIET_WINDOW_S, busy: float = QUIET_CPU
) -> float | None:
    """Sleep until this process's threads (TVM's pool, OpenBLAS's) use less than ``busy`` of a
    core over ``window_s``. Returns the seconds waited, or None when still busy at the timeout."""
    start = time.perf_counter()
    cpu, wall = time.process_time(), start
    while True:
        time.sleep(window_s)
        cpu2, wall2 = time.process_time(), time.perf_counter()
        if cpu2 - cpu < busy * (wall2 - wall):
            return wall2 - start
        if wall2 - start >= timeout_s:
            return None
        cpu, wall = cpu2, wall2


def interleave(
    timers: dict[str, Callable[[], float]], repeats: int, warmup: bool = True
) -> dict[str, dict[str, Any]]:
    """Round-robin one sample of each timer per round (order rotated every round), so that a
    load change during the run hits every figure; returns :func:`stat` of each."""
    names = list(timers)
    if warmup:
        for name in names:
            timers[name]()
    samples: dict[str, list[float]] = {n: [] for n in names}
    for r in range(repeats):
        k = r % len(names) if names else 0
        for name in names[k:] + names[:k]:
            samples[name].append(timers[name]())
    return {n: stat(s) for n, s in samples.items()}


def baseline_threads() -> int:
    """The thread count both sides use: TVM_NUM_THREADS, else OPENBLAS_NUM_THREADS, else cores."""
    for var in ("TVM_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        val = os.environ.get(var, "")
        if val.isdigit() and int(val) > 0:
            return int(val)
    return os.cpu_count() or 1


# --------------------------------------------------------------------------- the child's side
def load_plain_function(path: str | Path, name: str) -> Callable[..., Any]:
    """Function ``name`` of a model file without running its TVM parts: only imports of other
    packages than tvm, undecorated functions and literal assignments are executed."""
    tree = ast.parse(Path(path).read_text(), filename=str(path))
    keep: list[ast.stmt] = []
    for node in tree.body:
        if isinstance(node, ast.Import):
            if all(a.name.split(".")[0] != "tvm" for a in node.names):
                keep.append(node)
        elif isinstance(node, ast.ImportFrom):
            if node.level == 0 and (node.module or "").split(".")[0] != "tvm":
                keep.append(node)
        elif isinstance(node, ast.FunctionDef) and not node.decorator_list:
            keep.append(node)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
            try:
                ast.literal_eval(node.value)
            except ValueError:
                continue
            keep.append(node)
    module = ast.Module(body=keep, type_ignores=[])
    namespace: dict[str, Any] = {"__name__": f"baseline_{Path(path).stem}"}
    exec(compile(module, str(path), "exec"), namespace)  # the project's own model files
    if name not in namespace:
        raise KeyError(f"{path} has no plain-Python function {name!r}")
    return namespace[name]


def _make_fn(ref: dict[str, Any]) -> Callable[..., Any]:
    if ref["kind"] == "matmul":
        return lambda a, b: a @ b
    if ref["kind"] == "file":
        return load_plain_function(ref["path"], ref.get("name", "numpy_reference"))
    raise ValueError(f"unknown reference kind {ref['kind']!r}")


def serve(inp: IO[str], out: IO[str]) -> None:
    """The child's loop: one JSON request a line, one JSON reply a line."""
    funcs: dict[str, Callable[..., Any]] = {}
    args: dict[str, list[np.ndarray]] = {}
    for line in inp:
        req = json.loads(line)
        op = req["op"]
        try:
            if op == "hello":
                reply: dict[str, Any] = {
                    "pid": os.getpid(),
                    "tvm_imported": "tvm" in sys.modules,
                    "numpy": np.__version__,
                    "env": {
                        k: os.environ.get(k)
                        for k in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")
                    },
                }
            elif op == "load":
                funcs[req["key"]] = _make_fn(req["ref"])
                reply = {"tvm_imported": "tvm" in sys.modules}
            elif op == "args":
                if "npz" in req:
                    with np.load(req["npz"]) as data:
                        args[req["key"]] = [data[f"a{i}"] for i in range(len(data.files))]
                else:
                    rng = np.random.default_rng(req.get("seed", 0))
                    args[req["key"]] = [
                        rng.standard_normal(tuple(s), dtype=np.float32) for s in req["shapes"]
                    ]
                reply = {}
            elif op == "sample":
                fn, a = funcs[req["key"]], args[req["key"]]
                if req.get("warmup", False):
                    fn(*a)
                call = lambda fn=fn, a=a: fn(*a)  # noqa: E731
                secs = [time_loop(call, req["min_ms"]) for _ in range(req.get("n", 1))]
                # hand the cores back only once OpenBLAS's own threads stopped spinning
                reply = {"secs": secs, "quiet_s": wait_quiet(req.get("quiet_timeout_s", 3.0))}
            elif op == "exit":
                out.write(json.dumps({"ok": True}) + "\n")
                out.flush()
                return
            else:
                raise ValueError(f"unknown op {op!r}")
            reply["ok"] = True
        except Exception as err:  # reported to the parent, which raises it
            reply = {"ok": False, "error": f"{type(err).__name__}: {err}"}
        out.write(json.dumps(reply) + "\n")
        out.flush()


# --------------------------------------------------------------------------- the parent's side
class BaselineError(RuntimeError):
    """The baseline process failed or answered with an error."""


class BaselineProcess:
    """A long-lived child process (``python -m benchmarks.baseline --serve``, never imports tvm)
    that times numpy baselines with ``threads`` OpenBLAS threads. Use as a context manager."""

    def __init__(
        self, threads: int | None = None, quiet_timeout_s: float = QUIET_TIMEOUT_S
    ) -> None:
        self.threads = threads or baseline_threads()
        self.quiet_timeout_s = quiet_timeout_s
        self.info: dict[str, Any] = {}
        self.parent_quiet: list[float | None] = []  # the parent's waits before each sample
        self.child_quiet: list[float | None] = []
        self._proc: subprocess.Popen[str] | None = None
        self._tmp: tempfile.TemporaryDirectory[str] | None = None

    def __enter__(self) -> BaselineProcess:
        self.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def start(self) -> None:
        n = str(self.threads)
        env = dict(os.environ)
        env.update(OPENBLAS_NUM_THREADS=n, OMP_NUM_THREADS=n, MKL_NUM_THREADS=n, TVM_NUM_THREADS=n)
        root = str(Path(__file__).resolve().parent.parent)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "benchmarks.baseline", "--serve"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=env,
            cwd=root,
        )
        self._tmp = tempfile.TemporaryDirectory(prefix="tunefarm-baseline-")
        self.info = self._call({"op": "hello"})
        self.info["threads"] = self.threads

    def close(self) -> None:
        if self._proc is not None:
            try:
                if self._proc.poll() is None:
                    self._call({"op": "exit"})
                self._proc.wait(timeout=10)
            except (BaselineError, OSError, subprocess.TimeoutExpired):
                self._proc.kill()
                self._proc.wait()
            self._proc = None
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None

    def _call(self, req: dict[str, Any]) -> dict[str, Any]:
        proc = self._proc
        if proc is None or proc.stdin is None or proc.stdout is None:
            raise BaselineError("the baseline process is not running")
        try:
            proc.stdin.write(json.dumps(req) + "\n")
            proc.stdin.flush()
            line = proc.stdout.readline()
        except OSError as err:
            raise BaselineError(f"baseline process: {err}") from err
        if not line:
            raise BaselineError(f"the baseline process exited (code {proc.poll()})")
        reply = json.loads(line)
        if not reply.pop("ok", False):
            raise BaselineError(reply.get("error", "unknown error"))
        return reply

    def load(self, key: str, ref: dict[str, Any]) -> None:
        """Make ``ref`` the function of ``key``: :data:`MATMUL`, or
        ``{"kind": "file", "path": ..., "name": "numpy_reference"}``."""
        if self._call({"op": "load", "key": key, "ref": ref})["tvm_imported"]:
            raise BaselineError(f"loading {ref} imported tvm into the baseline process")

    def set_args(self, key: str, arrays: list[np.ndarray]) -> None:
        """The inputs of ``key``'s function (sent through a temporary .npz file)."""
        assert self._tmp is not None
        path = Path(self._tmp.name) / f"{len(os.listdir(self._tmp.name))}.npz"
        np.savez(path, **{f"a{i}": a for i, a in enumerate(arrays)})
        self._call({"op": "args", "key": key, "npz": str(path)})
        path.unlink()

    def set_random_args(self, key: str, shapes: list[tuple[int, ...]], seed: int = 0) -> None:
        """Standard-normal float32 inputs of these shapes, made in the child."""
        self._call({"op": "args", "key": key, "shapes": [list(s) for s in shapes], "seed": seed})

    def samples(self, key: str, min_ms: float, n: int = 1, warmup: bool = False) -> list[float]:
        """``n`` repeats of ``key`` (seconds per call), once this process's threads are idle."""
        self.parent_quiet.append(wait_quiet(self.quiet_timeout_s))
        req = {"op": "sample", "key": key, "min_ms": min_ms, "n": n, "warmup": warmup}
        reply = self._call(req | {"quiet_timeout_s": self.quiet_timeout_s})
        self.child_quiet.append(reply["quiet_s"])
        return reply["secs"]

    def sample(self, key: str, min_ms: float) -> float:
        """One repeat of ``key``: a timer for :func:`interleave`."""
        return self.samples(key, min_ms)[0]

    def time(self, key: str, repeats: int, min_ms: float) -> dict[str, Any]:
        """:func:`stat` of ``repeats`` repeats of ``key``, each after a quiet wait."""
        self.samples(key, min_ms, warmup=True)
        return stat([self.sample(key, min_ms) for _ in range(repeats)])

    def summary(self) -> dict[str, Any]:
        """What the report says about the protocol: the child, its threads, the quiet waits."""

        def waits(xs: list[float | None]) -> dict[str, Any]:
            done = [x for x in xs if x is not None]
            return {
                "n": len(xs),
                "timed_out": len(xs) - len(done),
                "median_ms": statistics.median(done) * 1e3 if done else None,
                "max_ms": max(done) * 1e3 if done else None,
            }

        return {
            **self.info,
            "parent_quiet": waits(self.parent_quiet),
            "child_quiet": waits(self.child_quiet),
            "quiet_cpu": QUIET_CPU,
            "invalid_spread": INVALID_SPREAD,
            "tvm_spin_count": os.environ.get("TVM_THREAD_POOL_SPIN_COUNT"),
        }


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv != ["--serve"]:
        print(__doc__)
        return 2
    out = os.fdopen(os.dup(sys.stdout.fileno()), "w")
    sys.stdout = sys.stderr  # stray prints must not corrupt the protocol
    serve(sys.stdin, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
