"""Does measuring the known matrix-vector tilings first pay on a decoder's decode step?

Per seed, a **pair**: two decode-only jobs on a random-init Qwen2-0.5B-shaped decoder (``tune
FOLDER --shape prompt=1 --shape context=256 --trials N --seed S``), one with ``--matvec`` (the
default: every matrix-vector task first measures :mod:`tuner.search.matvec`'s tilings) and
one with ``--no-matvec``, in that order for even pairs and the other for odd ones, each in a
fresh SQLite database; each is built, and the two libraries and PyTorch eager (a
``DynamicCache``, as ``generate`` runs it) are timed decoding side by side, in interleaved
rounds, at each context. Each finished pair is appended (JSON Lines, with host, CPU model and
commit) to the pairs file; ``--resume FILE`` adds pairs later, on any host.

Target: the decode step with the seeds at most 0.95x the step without them (paired ratio,
median over the contexts), verdict by :func:`tuner.paired.judge` (bootstrap 90% interval:
met / missed / undecided with the pairs it would take). Also reported: each variant against
eager, and the jobs' wall times.

Usage::

    python -m benchmarks matvec [--seeds 3] [--trials 64] [--contexts 64 1008]
        [--output FILE.jsonl | --resume FILE.jsonl] [--summary]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.common import RESULTS
from benchmarks.verdict import alternate, append_pair, next_seed, pair_header, pairs_of
from tuner.paired import judge

ROOT = Path(__file__).resolve().parent.parent
BENCHMARK = "matvec"
VARIANTS = ["matvec", "no-matvec"]
TARGET = 0.95  # decode step with the seeds / without: at least 5% faster
TOKENS = 4  # decode steps per timed sample
ROUNDS = 5  # interleaved rounds per context


def _cli(*args: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "tuner.cli", *args], cwd=ROOT, capture_output=True, text=True
    )
    if done.returncode != 0:
        raise RuntimeError(f"tunefarm {args[0]} failed: {done.stderr[-1500:]}")
    return done.stdout


def make_model(folder: Path) -> None:
    """The random-init Qwen2-0.5B-shaped folder (seeded: the same weights every run)."""
    if not (folder / "config.json").is_file():
        script = ROOT / "examples" / "make_tiny_decoder.py"
        subprocess.run(
            [sys.executable, str(script), str(folder), "--preset", "qwen2-0.5b"],
            check=True,
            capture_output=True,
        )


def tune_and_build(folder: Path, work: Path, variant: str, seed: int, trials: int) -> dict:
    """One decode-only job in a fresh database, then its build: wall times and the library."""
    db = f"sqlite:///{work}/{variant}.db"
    lib = work / f"{variant}.so"
    start = time.monotonic()
    out = _cli(
        "tune", str(folder), "--shape", "prompt=1", "--shape", "context=256",
        "--trials", str(trials), "--seed", str(seed), "--db", db, f"--{variant}", "--json",
    )  # fmt: skip
    wall = time.monotonic() - start
    job = json.loads(out[out.index("{") :])
    start = time.monotonic()
    _cli("build", str(folder), "-o", str(lib), "--db", db)
    return {
        "variant": variant,
        "wall_sec": wall,
        "build_sec": time.monotonic() - start,
        "trials": job["trials_measured"],
        "matvec_tasks": job.get("search", {}).get("matvec_tasks", 0),
        "lib": str(lib),
    }


def _samplers(sessions: dict[str, Any], model: Any, prompt: list[int], steps: list[int]) -> dict:
    """One sample's work per variant: ``steps`` decoded after ``prompt`` (the state of the
    prompt kept, or restored after each sample)."""
    import torch
    from transformers import DynamicCache

    from tuner.llm.bench import cache_kwarg

    out: dict[str, Any] = {}
    for name, s in sessions.items():
        _, cache0 = s.step(prompt, s.empty_cache())

        def run(s: Any = s, cache0: Any = cache0) -> None:
            cache = cache0
            for t in steps:
                _, cache = s.step([t], cache)

        out[name] = run
    cache, kw = DynamicCache(config=model.config), cache_kwarg(model)
    with torch.no_grad():
        model(input_ids=torch.tensor([prompt]), use_cache=True, **{kw: cache})

    def eager() -> None:
        with torch.no_grad():
            for i, t in enumerate(steps):
                pos = torch.tensor([[len(prompt) + i]])
                model(input_ids=torch.tensor([[t]]), position_ids=pos, **{kw: cache})
        cache.crop(-len(steps))

    out["eager"] = eager
    return out


def time_decode(folder: Path, libs: dict[str, Path], contexts: list[int]) -> dict[str, dict]:
    """ms per decode step of each library and of PyTorch eager, per context: the median of
    :data:`ROUNDS` interleaved rounds (order rotated), :data:`TOKENS` steps a sample."""
    import transformers

    from tuner.llm.runtime import DecoderSession

    sessions = {name: DecoderSession(folder, lib) for name, lib in libs.items()}
    model = transformers.AutoModelForCausalLM.from_pretrained(folder).eval()
    rng = np.random.default_rng(0)
    out: dict[str, dict] = {name: {} for name in [*libs, "eager"]}
    for ctx in contexts:
        prompt = rng.integers(0, model.config.vocab_size, ctx).tolist()
        steps = rng.integers(0, model.config.vocab_size, TOKENS).tolist()
        samplers = _samplers(sessions, model, prompt, steps)
        names = list(samplers)
        for fn in samplers.values():
            fn()  # warm-up
        samples: dict[str, list[float]] = {n: [] for n in names}
        for r in range(ROUNDS):
            k = r % len(names)
            for name in names[k:] + names[:k]:
                begin = time.perf_counter()
                samplers[name]()
                samples[name].append((time.perf_counter() - begin) / TOKENS * 1e3)
        for name in names:
            out[name][str(ctx)] = statistics.median(samples[name])
    return out


def run_pair(folder: Path, seed: int, index: int, trials: int, contexts: list[int]) -> dict:
    """Both jobs of seed ``seed`` (order alternating with ``index``), then their timing."""
    with tempfile.TemporaryDirectory(prefix="tunefarm-matvec-") as tmp:
        order = alternate(VARIANTS, index)
        runs = {v: tune_and_build(folder, Path(tmp), v, seed, trials) for v in order}
        decode = time_decode(folder, {v: Path(r.pop("lib")) for v, r in runs.items()}, contexts)
    return {
        "benchmark": BENCHMARK,
        "seed": seed,
        **pair_header(),
        "settings": {"trials": trials, "contexts": contexts, "threads": _threads()},
        "order": list(runs),
        "runs": [runs[v] | {"decode_ms": decode[v]} for v in VARIANTS],
        "eager_ms": decode["eager"],
    }


def _threads() -> int:
    return int(os.environ.get("TVM_NUM_THREADS") or os.cpu_count() or 1)


def _ratio(pair: dict[str, Any]) -> float:
    """Decode with the seeds / without: the median over the pair's contexts."""
    seeded, plain = pair["runs"]
    return statistics.median(
        seeded["decode_ms"][c] / plain["decode_ms"][c] for c in seeded["decode_ms"]
    )


def read_pairs(path: Path) -> list[dict[str, Any]]:
    """The pairs of this benchmark in a pairs file."""
    return pairs_of(path, BENCHMARK)


def table(pairs: list[dict[str, Any]]) -> str:
    """The verdict, then each pair's figures, as markdown."""
    j = judge([math.log(_ratio(p)) for p in pairs], TARGET)
    need = f" (~{j.needed} pairs)" if j.verdict == "undecided" and j.needed else ""
    lines = [
        "| target | pairs | matvec / no-matvec (90% CI) | verdict |",
        "|---|---|---|---|",
        f"| decode <= {TARGET}x | {len(pairs)} | {j.interval.ratio:.2f}x "
        f"({j.interval.low:.2f}–{j.interval.high:.2f}) | {j.verdict}{need} |",
        "",
        "| seed | context | matvec ms | no-matvec ms | eager ms | matvec / eager | wall s |",
        "|---|---|---|---|---|---|---|",
    ]
    for p in pairs:
        seeded, plain = p["runs"]
        for c, ms in seeded["decode_ms"].items():
            lines.append(
                f"| {p['seed']} | {c} | {ms:.1f} | {plain['decode_ms'][c]:.1f} "
                f"| {p['eager_ms'][c]:.1f} | {ms / p['eager_ms'][c]:.2f}x "
                f"| {seeded['wall_sec']:.0f} / {plain['wall_sec']:.0f} |"
            )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks matvec")
    parser.add_argument("--seeds", type=int, default=3, help="Pairs to add.")
    parser.add_argument("--trials", type=int, default=64, help="Each job's trials.")
    parser.add_argument("--contexts", type=int, nargs="+", default=[64, 1008])
    parser.add_argument("--model", type=Path, help="The decoder folder (made when missing).")
    parser.add_argument("--output", type=Path, help="A new pairs file (.jsonl).")
    parser.add_argument("--resume", type=Path, help="Add pairs to this pairs file.")
    parser.add_argument("--summary", action="store_true", help="Only print FILE's verdict.")
    args = parser.parse_args(argv)
    if args.resume is not None:
        if not args.resume.is_file():
            parser.error(f"--resume: no such file {args.resume}")
        path, pairs = args.resume, read_pairs(args.resume)
        if pairs:
            args.trials = pairs[-1]["settings"]["trials"]
            args.contexts = pairs[-1]["settings"]["contexts"]
    else:
        path = args.output or RESULTS / f"matvec_{time.strftime('%Y%m%d_%H%M')}.jsonl"
        pairs = []
    if not args.summary:
        folder = args.model or Path(tempfile.gettempdir()) / "tunefarm-qwen2-0.5b"
        make_model(folder)
        for _ in range(args.seeds):
            seed = next_seed(pairs, {})
            pair = run_pair(folder, seed, len(pairs), args.trials, args.contexts)
            append_pair(path, pair)
            pairs.append(pair)
            print(json.dumps(pair["runs"]), flush=True)
    if pairs:
        print(table(pairs))
    print(f"pairs file: {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
