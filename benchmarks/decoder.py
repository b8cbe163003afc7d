"""Decoder benchmark: ``make demo-llm``'s small decoder tuned and built as the demo does, then
``tunefarm bench`` on it (prefill per prompt length, decode per context, against PyTorch
eager, torch.compile and the memory-bandwidth bound), once per thread count, each run timing
every variant side by side in interleaved rounds.

Usage: ``python -m benchmarks decoder [--trials 256] [--threads 1 2] [--arch llama]
[--name decoder] [--workdir DIR]`` (the results file: ``<date>-<host>-<name>.json``;
``--workdir`` keeps the model folder, its database and library).

``--preset qwen2-0.5b``: the issue's target size instead (a random-init Qwen2-0.5B shape, 2 GB
of float32), tuned at ``prompt=1,64,256 x context=64,256,1024`` within ``--time-budget`` with
``--cache-flush`` (every run timed with its weights cold, as they are in the model: 2 GB do
not stay in any cache), benched at prompts 64, 256 and contexts 64, 256, 1008 against eager
and torch.compile (the untuned build, seconds per token at this size, left out).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from benchmarks.common import machine_header, results_path
from benchmarks.verdict import git_commit

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent


def _run(cmd: list[str], env: dict[str, str] | None = None) -> str:
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT, check=False)
    if out.returncode not in (0, 2):  # bench exits 2 on an output mismatch: still recorded
        sys.exit(f"{' '.join(cmd)} failed:\n{out.stderr[-2000:]}")
    return out.stdout


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=256)
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--arch", default="llama")
    parser.add_argument("--name", default="decoder", help="the results file's suffix")
    parser.add_argument("--preset", choices=("qwen2-0.5b",), help="a published model's shape")
    parser.add_argument("--time-budget", default="40m", help="with --preset: the tune's budget")
    parser.add_argument(
        "--workdir", type=Path, help="keep the model folder, database and library here"
    )
    args = parser.parse_args(argv)
    py, tunefarm = sys.executable, str(BIN / "tunefarm")
    runs: list[dict[str, Any]] = []
    commit = git_commit()  # the code that tunes, builds and benches (taken before it runs)
    if args.preset:
        tune_args = ["--shape", "prompt=1,64,256", "--shape", "context=64,256,1024",
                     "--trials", str(args.trials), "--time-budget", args.time_budget,
                     "--cache-flush"]  # fmt: skip
        bench_args = ["--shape", "prompt=64,256", "--shape", "context=64,256,1008",
                      "--runtimes", "torch.compile"]  # fmt: skip
        model = f"examples/make_tiny_decoder.py --preset {args.preset}"
    else:
        tune_args = ["--shape", "prompt=1,16", "--shape", "context=64,256",
                     "--trials", str(args.trials)]  # fmt: skip
        bench_args = []
        model = f"examples/make_tiny_decoder.py --arch {args.arch} (hidden 128, 2 layers)"
    if args.workdir:
        args.workdir.mkdir(parents=True, exist_ok=True)
    place = (
        contextlib.nullcontext(str(args.workdir.resolve()))
        if args.workdir
        else tempfile.TemporaryDirectory(prefix="tunefarm-decoder-")
    )
    with place as tmp:
        name = args.preset or f"tiny-{args.arch}"
        folder, lib, db = f"{tmp}/{name}", f"{tmp}/model.so", f"sqlite:///{tmp}/t.db"
        make = ["--preset", args.preset] if args.preset else ["--arch", args.arch]
        _run([py, "examples/make_tiny_decoder.py", folder, *make])
        _run([tunefarm, "tune", folder, *tune_args, "--db", db, "--seed", "0"])
        _run([tunefarm, "build", folder, "--db", db, "-o", lib])
        for threads in args.threads:
            env = {**os.environ, "TVM_NUM_THREADS": str(threads)}
            out = _run([tunefarm, "bench", folder, "--lib", lib, *bench_args, "--json"], env)
            runs.append(json.loads(out[out.index("{") :]))
            print(f"threads {threads}: {json.dumps(runs[-1]['decode'][0]['vs_tuned'])}")
    result = {
        "benchmark": "decoder",
        "machine": machine_header(),
        "commit": commit,
        "model": model,
        "tune": " ".join([*tune_args, "--seed", "0"]),
        "bench": " ".join(bench_args),
        "trials": args.trials,
        "threads": args.threads,
        "load_average": os.getloadavg(),
        "runs": runs,
    }
    path = results_path(args.name)
    path.write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
