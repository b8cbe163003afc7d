"""``bench`` on a decoder folder: prefill latency per prompt length and the time of one decode
step per context length, for the tuned and untuned builds, PyTorch eager (its
``DynamicCache``, as ``generate`` runs it) and ``torch.compile`` (transformers' static-cache
recipe), each output checked against eager's logits; and the memory-bandwidth bound of a
decode step (:func:`triad_bandwidth`).

Protocol: every variant runs on the same threads; the samples of one row are taken in rounds,
every variant once per round (the order rotated, the process quiet before each sample), so
the ratios reported (``vs_tuned``) are medians of per-round ratios, which a slow phase of a
shared machine hits on both sides alike. A first call of each variant at each length is not
timed (``torch.compile`` compiles there). A sample is the mean of enough calls to last
``min_sample_ms``.
"""

from __future__ import annotations

import os
import statistics
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from tuner.bench.timing import bench_threads, wait_quiet
from tuner.errors import TuneFarmError
from tuner.llm.config import DecoderConfig

TUNED, UNTUNED, EAGER, COMPILED = "tuned", "untuned", "eager", "torch.compile"
VARIANTS = (TUNED, UNTUNED, EAGER, COMPILED)
LOGITS_RTOL = 1e-3  # of the logits' scale: fp32 sums reordered across 2+ layers
PROMPTS = (16, 64, 256)
CONTEXTS = (64, 256, 1024)
DECODE_STEPS = 16  # decode steps per timed run, after the context


# ------------------------------------------------------------------------ bandwidth
def _llc_bytes() -> int:
    """The last-level cache's size (sysfs), 32 MiB when unknown."""
    best = 0
    for index in Path("/sys/devices/system/cpu/cpu0/cache").glob("index*"):
        try:
            text = (index / "size").read_text().strip().upper()
        except OSError:
            continue
        unit = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:], 1)
        digits = text.rstrip("KMG")
        if digits.isdigit():
            best = max(best, int(digits) * unit)
    return best or 32 << 20


def triad_bandwidth(
    threads: int,
    repeat: int = 5,
    array_bytes: int | None = None,
    target: Any = None,
) -> float:
    """Memory bandwidth in bytes/s, STREAM's triad ``a = b + s * c`` over float64 arrays of
    ``array_bytes`` each (default 4x the last-level cache, at least 64 MiB), best of
    ``repeat``, counted as STREAM counts it (24 bytes per element). The loop is compiled by
    TVM for ``target`` (default: this CPU) with its blocks in parallel over TVM's thread pool
    (``TVM_NUM_THREADS``, set to ``threads`` if unset) and 8 lanes vectorized, as the decode
    kernels run: a loop in numpy, one call per block, measured 14 GB/s on a 2-core Xeon whose
    decode step streamed its weights at 23."""
    import tvm
    from tvm import te

    from tuner.targets import resolve_target

    os.environ.setdefault("TVM_NUM_THREADS", str(threads))
    block, lanes = 1 << 13, 8
    size = array_bytes or max(4 * _llc_bytes(), 64 << 20)
    n = max(size // 8 // block, 1) * block
    b_in = te.placeholder((n,), "float64", name="b")
    c_in = te.placeholder((n,), "float64", name="c")
    a_out = te.compute((n,), lambda i: b_in[i] + tvm.tirx.const(3.0, "float64") * c_in[i])
    sch = tvm.s_tir.Schedule(te.create_prim_func([b_in, c_in, a_out]))
    loop = sch.get_loops(sch.get_sblock("compute"))[0]
    outer, _, vec = sch.split(loop, [None, block // lanes, lanes])
    sch.parallel(outer)
    sch.vectorize(vec)
    lib = tvm.tirx.build(sch.mod, target or resolve_target("llvm"))
    dev = tvm.cpu()
    b, c = tvm.runtime.tensor(np.full(n, 1.0), dev), tvm.runtime.tensor(np.full(n, 2.0), dev)
    a = tvm.runtime.empty((n,), "float64", dev)
    best = float("inf")
    for i in range(repeat + 1):  # the first pass faults the pages in: not counted
        start = time.perf_counter()
        lib["main"](b, c, a)
        if i:
            best = min(best, time.perf_counter() - start)
    if not np.isclose(a.numpy()[n // 2], 7.0):
        raise TuneFarmError("the bandwidth triad computed a wrong result")
    return 3 * 8 * n / best


def decode_bytes(cfg: DecoderConfig, params: Sequence[np.ndarray], names: Sequence[str]) -> int:
    """Weight bytes a decode step must read: every weight once, but of the embedding tables
    (tokens, positions, rotary) only the row looked up."""
    total = 0
    for name, p in zip(names, params, strict=True):
        lookup = name.endswith(("embed_tokens.weight", "wte.weight", "wpe.weight", "rope_cos"))
        lookup = lookup or name.endswith("rope_sin")
        total += p[0].nbytes if lookup else p.nbytes
    return total


def cache_bytes(cfg: DecoderConfig, context: int) -> int:
    """The K and V cache bytes a decode step at ``context`` reads (float32)."""
    return 2 * cfg.num_layers * context * cfg.num_kv_heads * cfg.head_dim * 4


# ------------------------------------------------------------------------ results
@dataclass(frozen=True)
class Check:
    """One variant's logits against eager's: the largest error and whether the argmax and the
    values agree."""

    max_abs_err: float
    same_argmax: bool
    close: bool

    @property
    def ok(self) -> bool:
        return self.same_argmax and self.close


@dataclass(frozen=True)
class Row:
    """One length of one phase (``prefill``: ``length`` prompt tokens, no cache; ``decode``:
    one token after ``length`` cached ones): per variant the median seconds per call, the
    median of per-round ratios to tuned (above 1: tuned is faster) and the output check;
    ``bound_sec``: the decode step's bandwidth bound."""

    phase: str
    length: int
    sec: dict[str, float]
    vs_tuned: dict[str, float]
    checks: dict[str, Check]
    bound_sec: float | None = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "phase": self.phase,
            "length": self.length,
            "ms": {k: round(v * 1e3, 4) for k, v in self.sec.items()},
            "vs_tuned": {k: round(v, 3) for k, v in self.vs_tuned.items()},
            "checks": {
                k: {"max_abs_err": c.max_abs_err, "same_argmax": c.same_argmax, "ok": c.ok}
                for k, c in self.checks.items()
            },
        }
        if self.bound_sec is not None:
            out["bound_ms"] = round(self.bound_sec * 1e3, 4)
            out["bound_tokens_per_sec"] = round(1.0 / self.bound_sec, 1)
            if TUNED in self.sec:
                out["tuned_of_bound"] = round(self.bound_sec / self.sec[TUNED], 4)
        return out


@dataclass(frozen=True)
class DecoderBenchReport:
    """``bench`` on a decoder: rows per phase and length, the variants that could not run and
    why, the machine's bandwidth and the bytes a decode step reads."""

    model: str
    threads: int
    rounds: int
    bandwidth: float  # bytes/s
    weight_bytes: int
    tuned_share: float | None
    rows: tuple[Row, ...]
    errors: dict[str, str] = field(default_factory=dict)

    @property
    def agree(self) -> bool:
        return all(c.ok for r in self.rows for c in r.checks.values())

    def to_dict(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "kind": "decoder",
            "threads": self.threads,
            "rounds": self.rounds,
            "bandwidth_gbs": round(self.bandwidth / 1e9, 2),
            "weight_bytes": self.weight_bytes,
            "tuned_share": None if self.tuned_share is None else round(self.tuned_share, 3),
            "agree": self.agree,
            "errors": dict(self.errors),
            "prefill": [r.to_dict() for r in self.rows if r.phase == "prefill"],
            "decode": [r.to_dict() for r in self.rows if r.phase == "decode"],
        }


# ------------------------------------------------------------------------ variants
def _one_line(err: BaseException) -> str:
    if isinstance(err, TuneFarmError):
        return str(err)
    from tuner.frontends.torch import root_cause

    return root_cause(err)


@dataclass(frozen=True)
class Work:
    """What one variant runs for a row: ``run`` the tokens (a prefill: one call; a decode:
    one step per token after the context) and return the logits checked (the last
    position's, per call); ``restore`` the state to the context, outside the time."""

    run: Callable[[], list[np.ndarray]]
    restore: Callable[[], None]
    calls: int


def _nothing() -> None:
    return None


class _TvmVariant:
    """A built library through :class:`DecoderSession`'s step, which is pure (the cache comes
    back grown, the one passed in untouched): restoring the context is keeping its cache."""

    def __init__(self, session: Any) -> None:
        self.s = session

    def prefill(self, ids: list[int]) -> Work | None:
        empty = self.s.empty_cache()
        return Work(lambda: [self.s.step(ids, empty)[0]], _nothing, 1)

    def decode(self, context: list[int], tokens: list[int]) -> Work:
        _, cache0 = self.s.step(context, self.s.empty_cache())

        def run() -> list[np.ndarray]:
            out, cache = [], cache0
            for t in tokens:
                logits, cache = self.s.step([t], cache)
                out.append(logits)
            return out

        return Work(run, _nothing, len(tokens))


def cache_kwarg(model: Any) -> str:
    """The forward's name for the cache (``cache`` in transformers >= 5.2x, before it
    ``past_key_values``)."""
    return "cache" if _forward_takes(model, "cache") else "past_key_values"


def last_logits_kwargs(model: Any) -> dict[str, int]:
    """What ``generate`` passes a model whose forward takes it: ``logits_to_keep=1`` (the head
    over the last token only); nothing for one that does not."""
    return {"logits_to_keep": 1} if _forward_takes(model, "logits_to_keep") else {}


def _forward_takes(model: Any, name: str) -> bool:
    import inspect

    return name in inspect.signature(model.forward).parameters


class _TorchVariant:
    """PyTorch with a cache object: eager with a ``DynamicCache``, as ``generate`` runs it
    (restored by cropping), or transformers' static-cache recipe, as
    ``generate(cache_implementation="static")`` runs it: a ``StaticCache`` and the model's own
    ``torch.compile`` of its forward (``get_compiled_call``, static shapes) for the decode
    steps, the prefill uncompiled (so not a torch.compile figure: None); restored by a reset
    and an uncompiled prefill of the context."""

    def __init__(self, model: Any, static_len: int | None = None) -> None:
        import torch

        self.torch, self.model, self.kw = torch, model, cache_kwarg(model)
        self.last = last_logits_kwargs(model)
        self.static_len = static_len
        self.fn = model.__call__ if static_len is None else model.get_compiled_call(None)

    def _cache(self) -> Any:
        from transformers import DynamicCache, StaticCache

        if self.static_len is None:
            return DynamicCache(config=self.model.config)
        return StaticCache(config=self.model.config, max_cache_len=self.static_len)

    def _run(self, fn: Callable, ids: list[int], start: int, cache: Any) -> np.ndarray:
        torch = self.torch
        pos = torch.arange(start, start + len(ids))
        with torch.no_grad():
            out = fn(
                input_ids=torch.tensor([ids]),
                position_ids=pos[None],
                cache_position=pos,
                use_cache=True,
                **{self.kw: cache},
                **self.last,
            ).logits
        return out[0, -1].float().numpy()

    def prefill(self, ids: list[int]) -> Work | None:
        if self.static_len is not None:
            return None
        return Work(lambda: [self._run(self.fn, ids, 0, self._cache())], _nothing, 1)

    def decode(self, context: list[int], tokens: list[int]) -> Work:
        cache, n = self._cache(), len(context)
        self._run(self.model.__call__, context, 0, cache)

        def run() -> list[np.ndarray]:
            return [self._run(self.fn, [t], n + i, cache) for i, t in enumerate(tokens)]

        def restore() -> None:
            if self.static_len is None:
                cache.crop(-len(tokens))
            else:
                cache.reset()
                self._run(self.model.__call__, context, 0, cache)

        return Work(run, restore, len(tokens))


# ------------------------------------------------------------------------ timing
def _sampler(work: Work, min_sec: float) -> tuple[list[np.ndarray], Callable[[], float]]:
    """Run ``work`` once (untimed: warm-up, compilation) and once timed; returns its first
    outputs and a sampler: seconds per call, the mean over enough runs to last ``min_sec``
    (the state restored after each, outside the time)."""
    out = work.run()
    work.restore()
    start = time.perf_counter()
    work.run()
    once = max(time.perf_counter() - start, 1e-6)
    work.restore()
    runs = max(1, round(min_sec / once))

    def sample() -> float:
        total = 0.0
        for _ in range(runs):
            begin = time.perf_counter()
            work.run()
            total += time.perf_counter() - begin
            work.restore()
        return total / (runs * work.calls)

    return out, sample


def _rounds(samplers: dict[str, Callable[[], float]], rounds: int) -> tuple[dict, dict]:
    """Medians of ``rounds`` rounds, each variant once per round (order rotated, the process
    quiet before each sample), and each variant's median per-round ratio to tuned."""
    names = list(samplers)
    samples: dict[str, list[float]] = {n: [] for n in names}
    for r in range(rounds):
        k = r % len(names)
        for name in names[k:] + names[:k]:
            wait_quiet()
            samples[name].append(samplers[name]())
    med = {n: statistics.median(v) for n, v in samples.items()}
    ratios = {}
    if TUNED in samples:
        for n in names:
            if n != TUNED:
                per = [a / t for a, t in zip(samples[n], samples[TUNED], strict=True) if t > 0]
                ratios[n] = statistics.median(per)
    return med, ratios


def _check(outs: list[np.ndarray], refs: list[np.ndarray]) -> Check:
    """Every call's logits against eager's: within :data:`LOGITS_RTOL` of their scale, and
    the same argmax."""
    err, same, close = 0.0, True, True
    for out, ref in zip(outs, refs, strict=True):
        e = float(np.abs(out.astype(np.float64) - ref.astype(np.float64)).max())
        scale = max(float(np.abs(ref).max()), 1e-6)
        err, close = max(err, e), close and e <= LOGITS_RTOL * scale
        same = same and int(np.argmax(out)) == int(np.argmax(ref))
    return Check(err, same, close)


def _row(
    phase: str,
    length: int,
    works: dict[str, Callable[[], Work | None]],
    errors: dict[str, str],
    rounds: int,
    min_sec: float,
) -> Row:
    """Prepare each variant's step (a failure drops that variant with its one-line reason),
    check its output against eager's, time them side by side."""
    outs: dict[str, list[np.ndarray]] = {}
    samplers: dict[str, Callable[[], float]] = {}
    for name, make in works.items():
        if name in errors:
            continue
        try:
            work = make()
            if work is None:  # not run at this phase (torch.compile's prefill)
                continue
            outs[name], samplers[name] = _sampler(work, min_sec)
        except Exception as err:  # a runtime that cannot run this length: one line
            errors[name] = f"{phase} {length}: {_one_line(err)}"
    if EAGER not in outs:
        raise TuneFarmError(f"PyTorch eager failed at {phase} {length}: {errors.get(EAGER)}")
    checks = {n: _check(o, outs[EAGER]) for n, o in outs.items() if n != EAGER}
    sec, ratios = _rounds(samplers, rounds)
    return Row(phase, length, sec, ratios, checks)


# ------------------------------------------------------------------------ bench
def _library(
    folder: Path, lib: Path | None, db: Any, target: Any, tmp: str, untuned: bool
) -> tuple:
    """(tuned library, untuned library or None, tuned share): ``lib`` as the tuned build, or
    one compiled from ``db``; the untuned build (with ``untuned``) compiled without one."""
    from tuner.compile import compile
    from tuner.llm.runtime import decoder_module

    _, mod, _ = decoder_module(folder)
    untuned_lib = None
    if untuned:
        untuned_lib = Path(tmp) / "untuned.so"
        compile(mod, target, None)[0].export_library(str(untuned_lib))
    share = None
    if lib is None:
        lib = Path(tmp) / "tuned.so"
        ex, report = compile(mod, target, db)
        ex.export_library(str(lib))
        share = report.tuned_share
    return lib, untuned_lib, share


def bench_decoder(
    folder: Path,
    target: Any,
    *,
    lib: Path | None = None,
    db: Any = None,
    prompts: Sequence[int] = PROMPTS,
    contexts: Sequence[int] = CONTEXTS,
    compiled: bool = True,
    untuned: bool = True,
    decode_steps: int = DECODE_STEPS,
    rounds: int = 5,
    min_sample_ms: float = 20.0,
    bandwidth: float | None = None,
) -> DecoderBenchReport:
    """Bench the decoder in ``folder``: the tuned build (``lib``, else compiled from ``db``),
    the untuned build (with ``untuned``), PyTorch eager and (with ``compiled``)
    ``torch.compile`` at each prompt length (prefill) and context length (``decode_steps``
    decode steps after that many cached tokens, per step); ``bandwidth`` (bytes/s) measured
    with :func:`triad_bandwidth` when not given."""
    import torch
    import transformers

    from tuner.llm.runtime import DecoderSession, decoder_module
    from tuner.llm.weights import load_params

    if target.kind.name != "llvm":
        raise TuneFarmError("bench on a decoder runs locally on the CPU; use an llvm target")
    cfg, _, names = decoder_module(folder)
    if not prompts and not contexts:
        raise TuneFarmError("nothing to bench: give prompt and/or context lengths")
    lengths = [*prompts, *(c + decode_steps for c in contexts)]
    if min([*prompts, *contexts]) < 1 or max(lengths) > cfg.max_positions:
        raise TuneFarmError(
            f"prompt lengths must lie in 1..{cfg.max_positions} and contexts in "
            f"1..{cfg.max_positions - decode_steps} (the model's {cfg.max_positions} positions, "
            f"{decode_steps} decode steps)"
        )
    threads = bench_threads(target)
    os.environ.setdefault("TVM_NUM_THREADS", str(threads))
    torch.set_num_threads(threads)
    try:
        model = transformers.AutoModelForCausalLM.from_pretrained(
            str(folder), dtype=torch.float32
        ).eval()
    except Exception as err:
        raise TuneFarmError(f"transformers cannot load {folder}: {_one_line(err)}") from None
    bw = bandwidth or triad_bandwidth(threads, target=target)
    weights = decode_bytes(cfg, load_params(folder, cfg, names), names)
    rng = np.random.default_rng(0)
    errors: dict[str, str] = {}
    with tempfile.TemporaryDirectory(prefix="tunefarm-bench-") as tmp:
        tuned_lib, untuned_lib, share = _library(folder, lib, db, target, tmp, untuned)
        variants: dict[str, Any] = {TUNED: _TvmVariant(DecoderSession(folder, tuned_lib))}
        if untuned_lib is not None:
            variants[UNTUNED] = _TvmVariant(DecoderSession(folder, untuned_lib))
        variants[EAGER] = _TorchVariant(model)
    if compiled:
        try:
            variants[COMPILED] = _TorchVariant(model, static_len=max(lengths))
        except Exception as err:
            errors[COMPILED] = _one_line(err)
    rows = []
    min_sec = min_sample_ms / 1e3
    for p in prompts:
        ids = rng.integers(0, cfg.vocab_size, p).tolist()
        works = {n: (lambda v=v, i=ids: v.prefill(i)) for n, v in variants.items()}
        rows.append(_row("prefill", p, works, errors, rounds, min_sec))
    for c in contexts:
        ctx = rng.integers(0, cfg.vocab_size, c).tolist()
        tokens = rng.integers(0, cfg.vocab_size, decode_steps).tolist()
        works = {n: (lambda v=v, c=ctx, t=tokens: v.decode(c, t)) for n, v in variants.items()}
        row = _row("decode", c, works, errors, rounds, min_sec)
        # the steps read the weights and, on average, the cache at the middle step
        bound = (weights + cache_bytes(cfg, c + decode_steps // 2)) / bw
        rows.append(Row(row.phase, c, row.sec, row.vs_tuned, row.checks, bound))
    return DecoderBenchReport(
        model=Path(folder).name,
        threads=threads,
        rounds=rounds,
        bandwidth=bw,
        weight_bytes=weights,
        tuned_share=share,
        rows=tuple(rows),
        errors=errors,
    )
