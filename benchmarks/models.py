"""Model benchmark: each example model tuned at a fixed budget, then ``tunefarm bench`` in a fresh
process: TuneFarm tuned and untuned beside the model's reference (numpy, PyTorch eager) and the
runtimes users pick instead (``torch.compile`` and ONNX Runtime, for ``.pt2`` and ``.onnx``
models), at several values of each symbolic dim, on the same threads, outputs checked against
the reference.

Each bench runs in its own process (the ``tunefarm bench`` command itself): there the reference
and the other runtimes are timed before any TVM kernel of that process, so neither tuning nor
another model's TVM calls leave spinning pool threads behind them. ``make bench`` runs this as
its ``models`` part (:func:`suite_part`); ``python -m benchmarks models`` on its own writes
``benchmarks/results/<date>-<hostname>-models.json``.

``--hf`` benches Hugging Face models as users bring them instead: BERT, GPT-2 (no cache) and
ViT exported with plain ``torch.export`` by ``examples/export_hf_models.py`` (random weights,
no download), their dims addressed as ``INPUT.AXIS``; ``--trials-per-task N`` gives each model
N trials per bucket task (the model's budget is N times its task count). Usage::

    python -m benchmarks models [--trials 32 | --trials-per-task 64]
                                [--models examples/transformer_encoder.pt2 ... | --hf [NAME ...]]
                                [--db URL] [--quick]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.common import machine_header, results_path

ROOT = Path(__file__).resolve().parent.parent
# Model -> the --shape values it is tuned at and benched at (none: a static model).
MODELS: dict[str, dict[str, list[str]]] = {
    "examples/mlp.py": {},
    "examples/conv2d_block.py": {},
    "examples/transformer_encoder.pt2": {"tune": ["s=16,64"], "bench": ["s=1,16,40,64,100"]},
    "examples/mlp_batch.onnx": {"tune": ["batch=1,16,64"], "bench": ["batch=1,16,40,64,129"]},
}
# Hugging Face models (examples/export_hf_models.py), "hf:NAME" -> as MODELS; every swept length
# from 16 up, the buckets among them and spanning them (as a user tunes the range they serve:
# values between buckets run the dispatch's padded kernels, ViT's flattened c * b kernels too).
HF_MODELS: dict[str, dict[str, list[str]]] = {
    "hf:bert": {"tune": ["input_ids.1=16,64,128"], "bench": ["input_ids.1=16,32,64,100,128"]},
    "hf:gpt2": {"tune": ["input_ids.1=16,64,128"], "bench": ["input_ids.1=16,32,64,100,128"]},
    "hf:vit": {"tune": ["pixel_values.0=1,8,16"], "bench": ["pixel_values.0=1,4,8,16"]},
}
DEFAULT_MODELS = list(MODELS)
SUITE_MODELS = ["examples/transformer_encoder.pt2", "examples/mlp_batch.onnx"]
OTHER_RUNTIMES = ("torch.compile", "onnxruntime")


def _cli(args: list[str], env: dict[str, str], timeout: int) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "tuner.cli", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        timeout=timeout,
    )


def _json_of(text: str) -> Any:
    return json.loads(text[text.index("{") :])


def _shape_opts(values: list[str]) -> list[str]:
    return [a for v in values for a in ("--shape", v)]


def export_hf(names: list[str], out: Path) -> dict[str, str]:
    """Export the ``hf:NAME`` models to ``out`` (plain torch.export); ``hf:NAME`` -> path."""
    sys.path.insert(0, str(ROOT / "examples"))
    try:
        from export_hf_models import export_all
    finally:
        sys.path.pop(0)
    paths = export_all(out, [n.removeprefix("hf:") for n in names])
    return {f"hf:{k}": str(v) for k, v in paths.items()}


def task_count(path: str, shapes: list[str]) -> int:
    """How many bucket tasks ``tunefarm tune PATH --shape ...`` tunes (deduplicated)."""
    from tuner.model import load_model
    from tuner.symbolic.buckets import bucket_tasks, choose_buckets, parse_shape_options
    from tuner.targets import resolve_target

    loaded = load_model(path)
    target = resolve_target("llvm")
    buckets = choose_buckets(loaded.mod, parse_shape_options(shapes), loaded.shape_vars)
    return len(bucket_tasks(loaded.mod, target, buckets))


def row_of(model: str, tune_sec: float, res: dict[str, Any]) -> dict[str, Any]:
    """One flat row per model and shape: times in ms, tuned's speed relative to each other
    runtime (its time / tuned's time: above 1 the tuned build is faster), and why a runtime
    did not run or did not match."""
    ms = lambda sec: sec * 1e3 if sec else None  # noqa: E731
    shape = ",".join(f"{k}={v}" for k, v in res["shape"].items()) or "static"
    ref = res["reference"] if res["reference"] != "untuned" else None
    rts = res.get("runtimes", {})
    row: dict[str, Any] = {
        "model": model,
        "shape": shape,
        "tuned_ms": ms(res["tuned_sec"]),
        "untuned_ms": ms(res["untuned_sec"]),
        "reference": ref or "-",
        "reference_ms": ms(res.get("reference_sec")),
    }
    for name in OTHER_RUNTIMES:
        row[f"{name}_ms"] = ms(rts[name]["sec"]) if name in rts else None
    row["tuned_vs_untuned"] = res["speedup"]
    row["tuned_vs_reference"] = res.get("vs_reference")
    for name in OTHER_RUNTIMES:
        row[f"tuned_vs_{name}"] = rts[name]["tuned_speedup"] if name in rts else None
    row["torch.compile_warmup_sec"] = rts.get("torch.compile", {}).get("warmup_sec")
    row["agree"] = res["agree"]
    notes = []
    for name in OTHER_RUNTIMES:
        rt = rts.get(name)
        if rt and rt.get("error"):
            notes.append(f"{name}: {rt['error']}")
        elif rt and rt.get("agree") is False:
            notes.append(f"{name}: MISMATCH (max err {rt.get('max_abs_err')})")
    from tuner.bench.results import NOISY  # a figure whose repeats spread more is noisy

    spread = {**res.get("spread", {})}  # (max - min) / median of its interleaved repeats
    spread |= {n: rts[n]["spread"] for n in OTHER_RUNTIMES if rts.get(n, {}).get("spread")}
    # the ratios are paired rounds (tuner.bench.timing.time_paired): their own spread
    spread |= {f"{n}/tuned": v["spread"] for n, v in res.get("paired", {}).items()}
    noisy = sorted(k for k, v in spread.items() if v is not None and v > NOISY)
    if noisy:
        notes.append(f"noisy (repeats spread over {NOISY:.0%}): {', '.join(noisy)}")
    row["notes"] = "; ".join(notes) or None
    row["tune_wall_sec"] = tune_sec
    return row


def run(
    models: list[str],
    trials: int,
    db: str | None = None,
    log: Any = print,
    timeout: int = 3600,
    *,
    trials_per_task: int | None = None,
) -> dict[str, Any]:
    """Tune each model (``tunefarm tune``) and bench it (``tunefarm bench --json``), each in
    its own process, with ``TVM_NUM_THREADS`` (every runtime's thread count) set. Models named
    ``hf:NAME`` are exported first (:func:`export_hf`). With ``trials_per_task``, each model's
    budget is that many trials per bucket task instead of ``trials``."""
    env = dict(os.environ)
    env.setdefault("TVM_NUM_THREADS", str(os.cpu_count() or 1))
    tmp = tempfile.TemporaryDirectory(prefix="tunefarm-models-")
    url = db or f"sqlite:///{tmp.name}/models.db"
    rows: list[dict[str, Any]] = []
    failures: dict[str, str] = {}
    budgets: dict[str, dict[str, int]] = {}
    with tmp:
        hf = [m for m in models if m in HF_MODELS]
        paths = export_hf(hf, Path(tmp.name) / "hf") if hf else {}
        for model in models:
            spec = {**MODELS, **HF_MODELS}.get(model, {})
            path = paths.get(model, model)
            budget = trials
            if trials_per_task is not None:
                tasks = task_count(path, spec.get("tune", []))
                budget = trials_per_task * tasks
                budgets[model] = {"tasks": tasks, "trials": budget}
            log(f"model {model}: tune ({budget} trials)")
            start = time.perf_counter()
            tune_args = ["tune", path, "--trials", str(budget), "--db", url, "--seed", "0"]
            proc = _cli([*tune_args, *_shape_opts(spec.get("tune", []))], env, timeout)
            tune_sec = time.perf_counter() - start
            if proc.returncode != 0:
                failures[model] = f"tune failed: {(proc.stderr or proc.stdout).strip()[-300:]}"
                log(f"  {failures[model]}")
                continue
            log(f"  tuned in {tune_sec:.0f} s; bench")
            bench_args = ["bench", path, "--db", url, "--json"]
            proc = _cli([*bench_args, *_shape_opts(spec.get("bench", []))], env, timeout)
            try:
                results = _json_of(proc.stdout)["results"]
            except (ValueError, KeyError):
                failures[model] = f"bench failed: {(proc.stderr or proc.stdout).strip()[-300:]}"
                log(f"  {failures[model]}")
                continue
            rows += [row_of(model, tune_sec, r) for r in results]
    return {
        "threads": int(env["TVM_NUM_THREADS"]),
        "trials": trials,
        "trials_per_task": trials_per_task,
        "budgets": budgets,
        "note": (
            "*_ms: median of interleaved repeats; tuned_vs_X = X's time / tuned's time (above "
            "1 the tuned build is faster); torch.compile's warm-up compilation is excluded"
        ),
        "rows": rows,
        "failures": failures,
    }


def suite_part(quick: bool = False) -> dict[str, Any]:
    """``make bench``'s ``models`` part: the .pt2 encoder and the .onnx MLP against PyTorch
    eager, torch.compile and ONNX Runtime (fewer trials and only the encoder when quick)."""
    models = SUITE_MODELS[:1] if quick else SUITE_MODELS
    return run(models, trials=8 if quick else 32, log=lambda m: print(f"  {m}", flush=True))


def print_table(data: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console()
    table = Table(
        title="models: TuneFarm vs the runtimes users pick, "
        + (
            f"{data['trials_per_task']} trials per bucket task"
            if data.get("trials_per_task")
            else f"{data['trials']} trials"
        )
        + f", {data['threads']} threads each",
        caption="(N.NNx) = that runtime's time / tuned's time, the median of rounds timing "
        "the two back to back: above 1, tuned is faster",
    )
    cols = ["model", "shape", "tuned", "untuned", "reference", "torch.compile", "onnxruntime"]
    for col in cols:
        table.add_column(col, justify="left" if col in ("model", "shape") else "right")

    def cell(msec: float | None, ratio: float | None, name: str = "") -> str:
        if msec is None:
            return "-"
        return f"{msec:.3f} ms" + (f" ({ratio:.2f}x)" if ratio else "") + name

    for r in data["rows"]:
        ref = f" {r['reference']}" if r["reference"] != "-" else ""
        table.add_row(
            Path(r["model"]).name,
            r["shape"],
            f"{r['tuned_ms']:.3f} ms" + ("" if r["agree"] else " MISMATCH"),
            cell(r["untuned_ms"], r["tuned_vs_untuned"]),
            cell(r["reference_ms"], r["tuned_vs_reference"], ref),
            cell(r["torch.compile_ms"], r["tuned_vs_torch.compile"]),
            cell(r["onnxruntime_ms"], r["tuned_vs_onnxruntime"]),
        )
    console.print(table)
    for note in sorted(
        {f"{Path(r['model']).name}: {r['notes']}" for r in data["rows"] if r["notes"]}
    ):
        console.print(note)
    for model, why in data["failures"].items():
        console.print(f"{model}: {why}", style="red")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks models", description=__doc__)
    parser.add_argument("--trials", type=int, default=32)
    parser.add_argument(
        "--trials-per-task", type=int, default=None, help="budget per bucket task (not --trials)"
    )
    parser.add_argument("--models", nargs="*", default=DEFAULT_MODELS)
    parser.add_argument(
        "--hf",
        nargs="*",
        choices=[m.removeprefix("hf:") for m in HF_MODELS],
        default=None,
        help="Hugging Face models (all when none is named) instead of --models",
    )
    parser.add_argument("--db", default=None, help="default: a fresh SQLite file")
    parser.add_argument("--quick", action="store_true", help="the .pt2 encoder only, 8 trials")
    parser.add_argument("--out", type=Path, default=None, help="results JSON path")
    args = parser.parse_args(argv)
    if args.trials_per_task is not None and args.trials_per_task < 1:
        parser.error("--trials-per-task must be at least 1")
    models = args.models
    if args.hf is not None:
        models = [f"hf:{n}" for n in args.hf] or list(HF_MODELS)
    models = SUITE_MODELS[:1] if args.quick else models
    trials = 8 if args.quick else args.trials
    data = run(models, trials, args.db, trials_per_task=args.trials_per_task, timeout=7200)
    print_table(data)
    out = args.out or results_path("models")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(
        json.dumps(
            {
                "machine": machine_header(),
                "loadavg": list(os.getloadavg()),
                **data,
            },
            indent=2,
        )
    )
    print(f"wrote {out}")
    ok = not data["failures"] and all(r["agree"] for r in data["rows"])
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
