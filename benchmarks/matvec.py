"""Does measuring the known tilings first pay on a decoder's decode step (matrix-vector
products) and on its prefill (matrix products)?

Per seed, a **pair**: two jobs on a random-init Qwen2-0.5B-shaped decoder, in a fresh SQLite
database each, one with the tilings (the default: ``--matvec``, every matrix-vector task first
measures :mod:`tuner.search.matvec`'s; ``--gemm``, every matrix-product task
:mod:`tuner.search.gemm`'s) and one without (``--no-matvec`` / ``--no-gemm``), in that order for
even pairs and the other for odd ones. ``matvec`` pairs are decode-only jobs (``--shape
prompt=1 --shape context=256``) timed decoding at each context; ``gemm`` pairs are prefill jobs
(``--shape prompt=64,256 --shape context=64``) timed prefilling each prompt length. Each job is
built, and the two libraries and PyTorch eager (a ``DynamicCache``, as ``generate`` runs it)
are timed side by side, in interleaved rounds. Each finished pair is appended (JSON Lines, with
host, CPU model and commit) to the pairs file; ``--resume FILE`` adds pairs later, on any host.

Target: with the tilings at most 0.95x the time without them (paired ratio, median over the
lengths), verdict by :func:`tuner.paired.judge` (bootstrap 90% interval: met / missed /
undecided with the pairs it would take). Also reported: each variant against eager, and the
jobs' wall times.

Usage::

    python -m benchmarks matvec [--seeds 3] [--trials 64] [--contexts 64 1008]
        [--output FILE.jsonl | --resume FILE.jsonl] [--summary]
    python -m benchmarks gemm [--seeds 3] [--trials 64] [--prompts 64 256] [...]
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
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.common import RESULTS
from benchmarks.verdict import (
    alternate,
    append_pair,
    next_seed,
    pair_header,
    pairs_of,
    resume,
)
from tuner.paired import judge

ROOT = Path(__file__).resolve().parent.parent
TARGET = 0.95  # with the tilings / without: at least 5% faster
TOKENS = 4  # decode steps per timed sample
ROUNDS = 5  # interleaved rounds per length


@dataclass(frozen=True)
class Phase:
    """What one benchmark pairs: the tilings' switch, the jobs' buckets, what is timed."""

    name: str  # the benchmark, the tune switch (--NAME / --no-NAME) and its stats' key
    shape: tuple[str, ...]  # the jobs' --shape values
    lengths: str  # the timed lengths' option and settings key: contexts or prompts
    default: tuple[int, ...]
    timed: str  # decode or prefill

    @property
    def variants(self) -> list[str]:
        return [self.name, f"no-{self.name}"]


PHASES = {
    "matvec": Phase("matvec", ("prompt=1", "context=256"), "contexts", (64, 1008), "decode"),
    "gemm": Phase("gemm", ("prompt=64,256", "context=64"), "prompts", (64, 256), "prefill"),
}


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


def tune_and_build(
    folder: Path, work: Path, variant: str, seed: int, trials: int, phase: Phase
) -> dict:
    """One job of ``phase`` in a fresh database, then its build: wall times and the library."""
    db = f"sqlite:///{work}/{variant}.db"
    lib = work / f"{variant}.so"
    shapes = [arg for value in phase.shape for arg in ("--shape", value)]
    start = time.monotonic()
    out = _cli(
        "tune", str(folder), *shapes, "--trials", str(trials), "--seed", str(seed),
        "--db", db, f"--{variant}", "--json",
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
        f"{phase.name}_tasks": job.get("search", {}).get(f"{phase.name}_tasks", 0),
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
    sessions, model = _sessions(folder, libs)
    rng = np.random.default_rng(0)
    out: dict[str, dict] = {}
    for ctx in contexts:
        prompt = rng.integers(0, model.config.vocab_size, ctx).tolist()
        steps = rng.integers(0, model.config.vocab_size, TOKENS).tolist()
        samplers = _samplers(sessions, model, prompt, steps)
        for name, ms in _interleaved(samplers).items():
            out.setdefault(name, {})[str(ctx)] = ms / TOKENS
    return out


def time_prefill(folder: Path, libs: dict[str, Path], prompts: list[int]) -> dict[str, dict]:
    """ms per prefill of each library and of PyTorch eager (a fresh cache each), per prompt
    length: the median of :data:`ROUNDS` interleaved rounds (order rotated)."""
    import torch
    from transformers import DynamicCache

    from tuner.llm.bench import cache_kwarg, last_logits_kwargs

    sessions, model = _sessions(folder, libs)
    kw, last = cache_kwarg(model), last_logits_kwargs(model)
    rng = np.random.default_rng(0)
    out: dict[str, dict] = {}
    for length in prompts:
        prompt = rng.integers(0, model.config.vocab_size, length).tolist()
        samplers: dict[str, Any] = {
            name: (lambda s=s, p=prompt: s.step(p, s.empty_cache())) for name, s in sessions.items()
        }

        def eager(prompt: list[int] = prompt) -> None:
            with torch.no_grad():
                cache = DynamicCache(config=model.config)
                model(input_ids=torch.tensor([prompt]), use_cache=True, **{kw: cache}, **last)

        samplers["eager"] = eager
        for name, ms in _interleaved(samplers).items():
            out.setdefault(name, {})[str(length)] = ms
    return out


def _sessions(folder: Path, libs: dict[str, Path]) -> tuple[dict[str, Any], Any]:
    import transformers

    from tuner.llm.runtime import DecoderSession

    sessions = {name: DecoderSession(folder, lib) for name, lib in libs.items()}
    return sessions, transformers.AutoModelForCausalLM.from_pretrained(folder).eval()


def _interleaved(samplers: dict[str, Any]) -> dict[str, float]:
    """ms per call of each sampler: a warm-up each, then the median of :data:`ROUNDS` rounds,
    the order rotated each round."""
    names = list(samplers)
    for fn in samplers.values():
        fn()
    samples: dict[str, list[float]] = {n: [] for n in names}
    for r in range(ROUNDS):
        k = r % len(names)
        for name in names[k:] + names[:k]:
            begin = time.perf_counter()
            samplers[name]()
            samples[name].append((time.perf_counter() - begin) * 1e3)
    return {name: statistics.median(samples[name]) for name in names}


def run_pair(
    folder: Path, seed: int, index: int, trials: int, lengths: list[int], phase: Phase
) -> dict:
    """Both jobs of seed ``seed`` (order alternating with ``index``), then their timing."""
    with tempfile.TemporaryDirectory(prefix=f"tunefarm-{phase.name}-") as tmp:
        order = alternate(phase.variants, index)
        runs = {v: tune_and_build(folder, Path(tmp), v, seed, trials, phase) for v in order}
        libs = {v: Path(r.pop("lib")) for v, r in runs.items()}
        timer = time_decode if phase.timed == "decode" else time_prefill
        timed = timer(folder, libs, lengths)
    key = f"{phase.timed}_ms"
    return {
        "benchmark": phase.name,
        "seed": seed,
        **pair_header(),
        "settings": {"trials": trials, phase.lengths: lengths, "threads": _threads()},
        "order": list(runs),
        "runs": [runs[v] | {key: timed[v]} for v in phase.variants],
        "eager_ms": timed["eager"],
    }


def _threads() -> int:
    return int(os.environ.get("TVM_NUM_THREADS") or os.cpu_count() or 1)


def _ratio(pair: dict[str, Any]) -> float:
    """With the tilings / without: the median over the pair's lengths."""
    seeded, plain = pair["runs"]
    key = _timed_key(pair)
    return statistics.median(seeded[key][c] / plain[key][c] for c in seeded[key])


def _timed_key(pair: dict[str, Any]) -> str:
    """The runs' timed figure: its phase's, named by the pair's benchmark."""
    return f"{PHASES[pair['benchmark']].timed}_ms"


def read_pairs(path: Path, benchmark: str = "matvec") -> list[dict[str, Any]]:
    """The pairs of ``benchmark`` (matvec or gemm) in a pairs file."""
    return pairs_of(path, benchmark)


def table(pairs: list[dict[str, Any]]) -> str:
    """The verdict, then each pair's figures, as markdown."""
    on, off = (r["variant"] for r in pairs[0]["runs"])
    key = _timed_key(pairs[0])
    timed, length = key.removesuffix("_ms"), "context" if key == "decode_ms" else "prompt"
    j = judge([math.log(_ratio(p)) for p in pairs], TARGET)
    need = f" (~{j.needed} pairs)" if j.verdict == "undecided" and j.needed else ""
    lines = [
        f"| target | pairs | {on} / {off} (90% CI) | verdict |",
        "|---|---|---|---|",
        f"| {timed} <= {TARGET}x | {len(pairs)} | {j.interval.ratio:.2f}x "
        f"({j.interval.low:.2f}–{j.interval.high:.2f}) | {j.verdict}{need} |",
        "",
        f"| seed | {length} | {on} ms | {off} ms | eager ms | {on} / eager | wall s |",
        "|---|---|---|---|---|---|---|",
    ]
    for p in pairs:
        seeded, plain = p["runs"]
        for c, ms in seeded[key].items():
            lines.append(
                f"| {p['seed']} | {c} | {ms:.1f} | {plain[key][c]:.1f} "
                f"| {p['eager_ms'][c]:.1f} | {ms / p['eager_ms'][c]:.2f}x "
                f"| {seeded['wall_sec']:.0f} / {plain['wall_sec']:.0f} |"
            )
    return "\n".join(lines)


def main(argv: list[str] | None = None, benchmark: str = "matvec") -> int:
    phase = PHASES[benchmark]
    parser = argparse.ArgumentParser(prog=f"python -m benchmarks {phase.name}")
    parser.add_argument("--seeds", type=int, default=3, help="Pairs to add.")
    parser.add_argument("--trials", type=int, default=64, help="Each job's trials.")
    parser.add_argument(f"--{phase.lengths}", type=int, nargs="+", default=list(phase.default))
    parser.add_argument("--model", type=Path, help="The decoder folder (made when missing).")
    parser.add_argument("--output", type=Path, help="A new pairs file (.jsonl).")
    parser.add_argument("--resume", type=Path, help="Add pairs to this pairs file.")
    parser.add_argument("--summary", action="store_true", help="Only print FILE's verdict.")
    args = parser.parse_args(argv)
    if args.resume is not None:
        path, pairs = args.resume, resume(parser, args, phase.name)
    else:
        path = args.output or RESULTS / f"{phase.name}_{time.strftime('%Y%m%d_%H%M')}.jsonl"
        pairs = []
    if not args.summary:
        folder = args.model or Path(tempfile.gettempdir()) / "tunefarm-qwen2-0.5b"
        make_model(folder)
        lengths = getattr(args, phase.lengths)
        for _ in range(args.seeds):
            seed = next_seed(pairs, {})
            pair = run_pair(folder, seed, len(pairs), args.trials, lengths, phase)
            append_pair(path, pair)
            pairs.append(pair)
            print(json.dumps(pair["runs"]), flush=True)
    if pairs:
        print(table(pairs))
    print(f"pairs file: {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
