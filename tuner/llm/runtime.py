"""Building a decoder folder into a shared library and greedy generation from it."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import tvm
from tvm import relax

from tuner.errors import TuneFarmError
from tuner.llm.config import DecoderConfig
from tuner.llm.model import export
from tuner.llm.weights import load_params

if TYPE_CHECKING:
    from tuner.model import Model

Cache = list[tvm.runtime.Tensor]  # each layer's K then V, [1, context, kv_heads, head_dim]


def decoder_module(folder: Path) -> tuple[DecoderConfig, tvm.IRModule, list[str]]:
    """The folder's config, its Relax module (``main``, see :mod:`tuner.llm.model`) and its
    parameter names."""
    cfg = DecoderConfig.from_folder(folder)
    mod, names = export(cfg)
    return cfg, mod, names


def build(folder: Path, out: Path, target: str = "llvm") -> Path:
    """Compile the folder's decoder (untuned) to ``out`` (a ``.so``)."""
    _, mod, _ = decoder_module(folder)
    relax.build(mod, target=tvm.target.Target(target)).export_library(str(out))
    return out


@dataclass(frozen=True)
class Generation:
    """Greedy output: the new tokens and timings (decode rate over the tokens after the first)."""

    tokens: list[int]
    prefill_ms: float
    decode_tokens_per_sec: float

    def as_json(self) -> dict:
        return {
            "tokens": self.tokens,
            "prefill_ms": round(self.prefill_ms, 3),
            "decode_tokens_per_sec": round(self.decode_tokens_per_sec, 2),
        }


class DecoderSession:
    """A built decoder with its weights on a device, ready to generate. ``threads``: the CPU
    kernels' thread count (default ``TVM_NUM_THREADS``, else every CPU: TVM's own default on
    x86 is half of them, one core of a 2-core machine); it takes effect if this process has
    not run a parallel kernel yet."""

    def __init__(
        self, folder: Path, lib: Path, device: str = "cpu", threads: int | None = None
    ) -> None:
        from tuner.bench.timing import bench_threads

        if threads is not None and threads < 1:
            raise TuneFarmError(f"threads must be at least 1, got {threads}")
        self.threads = threads or bench_threads()
        os.environ["TVM_NUM_THREADS"] = str(self.threads)
        if not Path(lib).is_file():
            raise TuneFarmError(f"library not found: {lib} (build it with tunefarm build)")
        self.cfg, _, names = decoder_module(folder)
        weights = load_params(folder, self.cfg, names)
        self.dev = tvm.device(device)
        try:
            self.vm = relax.VirtualMachine(tvm.runtime.load_module(str(lib)), self.dev)
        except (RuntimeError, OSError) as err:
            raise TuneFarmError(f"cannot load {lib}: {str(err).splitlines()[0]}") from None
        try:
            self.vm["main"]
        except AttributeError:
            raise TuneFarmError(
                f"{lib} is not a decoder library: build it with tunefarm build"
            ) from None
        self.params = [tvm.runtime.tensor(p, self.dev) for p in weights]

    def empty_cache(self) -> Cache:
        """The caches of no tokens (each layer's K and V)."""
        c = self.cfg
        empty = np.zeros((1, 0, c.num_kv_heads, c.head_dim), dtype=np.float32)
        return [tvm.runtime.tensor(empty, self.dev) for _ in range(2 * c.num_layers)]

    def step(self, ids: list[int], cache: Cache) -> tuple[np.ndarray, Cache]:
        """Run ``ids`` after the cached tokens: the last position's logits and the grown cache."""
        start = cache[0].shape[1]
        pos = np.arange(start, start + len(ids), dtype=np.int32)
        ids_in = tvm.runtime.tensor(np.array([ids], dtype=np.int32), self.dev)
        pos_in = tvm.runtime.tensor(pos, self.dev)
        logits, grown = self.vm["main"](ids_in, pos_in, *cache, *self.params)
        return logits.numpy()[0, -1], list(grown)

    def generate(
        self, prompt: list[int], max_new_tokens: int, eos: int | None = None
    ) -> Generation:
        """Greedy decoding: ``max_new_tokens`` tokens after ``prompt`` (stops early at ``eos``)."""
        if not prompt:
            raise TuneFarmError("the prompt is empty")
        if len(prompt) + max_new_tokens > self.cfg.max_positions:
            raise TuneFarmError(
                f"prompt ({len(prompt)}) + new tokens ({max_new_tokens}) exceed the model's "
                f"{self.cfg.max_positions} positions"
            )
        if max(prompt) >= self.cfg.vocab_size or min(prompt) < 0:
            raise TuneFarmError(f"prompt ids must be in [0, {self.cfg.vocab_size})")
        t0 = time.perf_counter()
        logits, cache = self.step(prompt, self.empty_cache())
        tokens = [int(np.argmax(logits))]
        prefill_ms = (time.perf_counter() - t0) * 1e3
        t1 = time.perf_counter()
        while len(tokens) < max_new_tokens and tokens[-1] != eos:
            logits, cache = self.step([tokens[-1]], cache)
            tokens.append(int(np.argmax(logits)))
        steps = len(tokens) - 1
        rate = steps / (time.perf_counter() - t1) if steps else 0.0
        return Generation(tokens, prefill_ms, rate)


# Default buckets: a decode step (prompt 1) and prompts 16..512; contexts 64..2048, clipped to
# the model's positions.
PROMPT_BUCKETS = (1, 16, 64, 256, 512)
CONTEXT_BUCKETS = (64, 256, 1024, 2048)


def default_buckets(cfg: DecoderConfig) -> dict[str, list[int]]:
    """Bucket values of ``prompt`` and ``context`` within the model's positions."""
    fit = [b for b in PROMPT_BUCKETS if b <= cfg.max_positions] or [cfg.max_positions]
    ctx = [b for b in CONTEXT_BUCKETS if b < cfg.max_positions] or [cfg.max_positions - 1]
    return {"prompt": fit, "context": ctx}


def decoder_model(folder: Path) -> Model:
    """The folder as a :class:`tuner.model.Model`: the step function ``main`` with the weights
    kept as trailing inputs (the library is weight-free; ``generate`` reads the safetensors)."""
    from tuner.model import Model

    cfg, mod, _ = decoder_module(folder)
    return Model(path=Path(folder), mod=mod, shape_vars=default_buckets(cfg))
