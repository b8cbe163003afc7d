"""The decoder as a ``tvm.relax.frontend.nn`` module: one ``main`` that runs ``prompt`` new
tokens after ``context`` cached ones (prefill: ``context = 0``; decode: ``prompt = 1``), the KV
cache as explicit tensors, one K and one V ``[1, length, kv_heads, head_dim]`` per layer, passed
in and returned grown (a stacked ``[layers, ...]`` cache would be split and re-stacked, two more
copies of it every step).

Parameter names equal the Hugging Face state-dict names, so :mod:`tuner.llm.weights` maps a
``model.safetensors`` one to one. Linear weights are kept ``[in, out]`` (Hugging Face's
``nn.Linear`` stores ``[out, in]``: transposed once on load; GPT-2's ``Conv1D`` is ``[in, out]``
already): the library's weights are inputs, so a weight in the other layout would be
transposed by a kernel at every call, the whole 2 GB of a 0.5B model per decoded token.
"""

from __future__ import annotations

import math

import numpy as np
import tvm
from tvm import relax
from tvm.relax.frontend import nn
from tvm.relax.frontend.nn import op

from tuner.llm.config import DecoderConfig

PROMPT = "prompt"
CONTEXT = "context"


def rope_tables(cfg: DecoderConfig) -> tuple[np.ndarray, np.ndarray]:
    """cos and sin ``[max_positions, head_dim]`` as Hugging Face's default rotary embedding."""
    d = cfg.head_dim
    inv = 1.0 / (cfg.rope_theta ** (np.arange(0, d, 2, dtype=np.int64).astype(np.float32) / d))
    freqs = np.outer(np.arange(cfg.max_positions, dtype=np.float32), inv.astype(np.float32))
    emb = np.concatenate([freqs, freqs], axis=-1).astype(np.float32)
    return np.cos(emb), np.sin(emb)


class _Linear(nn.Module):
    """``x @ weight (+ bias)`` with ``weight`` ``[in, out]``, the layout the matrix products
    read without a transpose."""

    def __init__(self, in_features: int, out_features: int, bias: bool) -> None:
        self.weight = nn.Parameter((in_features, out_features))
        self.bias = nn.Parameter((out_features,)) if bias else None

    def forward(self, x: nn.Tensor) -> nn.Tensor:
        y = op.matmul(x, self.weight)
        return y if self.bias is None else op.add(y, self.bias)


class _Attention(nn.Module):
    def __init__(self, cfg: DecoderConfig) -> None:
        self.cfg = cfg
        h, kv, d, bias = cfg.num_heads, cfg.num_kv_heads, cfg.head_dim, cfg.attention_bias
        if cfg.family == "gpt2":
            self.c_attn = _Linear(cfg.hidden_size, 3 * h * d, bias=True)
            self.c_proj = _Linear(h * d, cfg.hidden_size, bias=True)
        else:
            self.q_proj = _Linear(cfg.hidden_size, h * d, bias=bias)
            self.k_proj = _Linear(cfg.hidden_size, kv * d, bias=bias)
            self.v_proj = _Linear(cfg.hidden_size, kv * d, bias=bias)
            o_bias = bias and cfg.model_type != "qwen2"
            self.o_proj = _Linear(h * d, cfg.hidden_size, bias=o_bias)

    def forward(
        self,
        x: nn.Tensor,
        rope: tuple[nn.Tensor, nn.Tensor] | None,
        past: tuple[nn.Tensor, nn.Tensor],
        positions: nn.Tensor,
    ) -> tuple[nn.Tensor, nn.Tensor, nn.Tensor]:
        cfg = self.cfg
        b, n, _ = x.shape
        h, kv, d = cfg.num_heads, cfg.num_kv_heads, cfg.head_dim
        if cfg.family == "gpt2":
            q, k, v = op.split(op.reshape(self.c_attn(x), (b, n, 3 * h, d)), 3, axis=2)
        else:
            q = op.reshape(self.q_proj(x), (b, n, h, d))
            k = op.reshape(self.k_proj(x), (b, n, kv, d))
            v = op.reshape(self.v_proj(x), (b, n, kv, d))
        if rope is not None:
            q, k = _rotate(q, *rope), _rotate(k, *rope)
        k = op.concat([past[0], k], dim=1)
        v = op.concat([past[1], v], dim=1)
        out = _attention(q, k, v, positions, scale=1.0 / math.sqrt(d))
        out = op.reshape(out, (b, n, h * d))
        proj = self.c_proj if cfg.family == "gpt2" else self.o_proj
        return proj(out), k, v


def _attention(
    q: nn.Tensor, k: nn.Tensor, v: nn.Tensor, positions: nn.Tensor, scale: float
) -> nn.Tensor:
    """Causal softmax attention: ``q`` is ``[1, len, heads, head_dim]``, ``k`` and ``v``
    ``[1, keys, kv_heads, head_dim]`` (cache first, then the new tokens); the query at
    ``positions[i]`` sees the keys at ``0..positions[i]``.

    Grouped-query attention without copying the keys: the ``heads // kv_heads`` query heads
    that share a key head are rows of one matrix product (row ``i * group + j`` is query ``i``
    of the group's head ``j``), so each key and value is read once per group, not repeated
    per head (at batch 1 a decode step is memory-bound: the cache is what it reads)."""
    b, n, h, d = q.shape
    kv, length = k.shape[2], k.shape[1]
    group = h // kv
    rows = n * group
    qg = op.reshape(op.permute_dims(op.reshape(q, (b, n, kv, group, d)), [0, 2, 1, 3, 4]),
                    (b, kv, rows, d))  # fmt: skip
    scores = _einsum("bhrd,bjhd->bhrj", qg, k, "scores")  # [1, kv, rows, keys]
    # -1e30 where a key lies after the query; relax ops only, so binding lengths keeps FuseTIR whole
    keys = op.reshape(op.arange(0, length, dtype="int32"), [1, length])
    where = positions if group == 1 else op.repeat(positions, group, axis=0)
    after = op.greater(keys, op.reshape(where, [rows, 1]))
    scores = op.add(scores, op.multiply(op.astype(after, "float32"), _const(-1e30)))
    scores = op.multiply(scores, _const(scale))
    probs = op.softmax(scores, axis=-1)
    out = _einsum("bhrj,bjhd->bhrd", probs, v, "attend")  # [1, kv, rows, head_dim]
    out = op.permute_dims(op.reshape(out, (b, kv, n, group, d)), [0, 2, 1, 3, 4])
    return op.reshape(out, (b, n, h, d))


def _einsum(subscripts: str, a: nn.Tensor, b: nn.Tensor, name: str) -> nn.Tensor:
    """A product over the cache in its own layout ``[1, keys, kv_heads, head_dim]``: a
    ``matmul`` would need it transposed first, a copy of the whole cache per step."""
    return op.wrap_nested(relax.op.einsum([a._expr, b._expr], subscripts), name=name)


def _const(value: float) -> nn.Tensor:
    return nn.Tensor.from_const(np.float32(value))


def _rotate(x: nn.Tensor, cos: nn.Tensor, sin: nn.Tensor) -> nn.Tensor:
    """Rotary embedding, Hugging Face's ``rotate_half`` convention; cos/sin ``[1, n, 1, d]``."""
    x1, x2 = op.split(x, 2, axis=3)
    rotated = op.concat([op.negative(x2), x1], dim=3)
    return op.add(op.multiply(x, cos), op.multiply(rotated, sin))


class _MLP(nn.Module):
    def __init__(self, cfg: DecoderConfig) -> None:
        self.family = cfg.family
        if cfg.family == "gpt2":
            self.c_fc = _Linear(cfg.hidden_size, cfg.intermediate_size, bias=True)
            self.c_proj = _Linear(cfg.intermediate_size, cfg.hidden_size, bias=True)
        else:
            self.gate_proj = _Linear(cfg.hidden_size, cfg.intermediate_size, bias=False)
            self.up_proj = _Linear(cfg.hidden_size, cfg.intermediate_size, bias=False)
            self.down_proj = _Linear(cfg.intermediate_size, cfg.hidden_size, bias=False)

    def forward(self, x: nn.Tensor) -> nn.Tensor:
        if self.family == "gpt2":
            return self.c_proj(op.gelu(self.c_fc(x), approximate="tanh"))
        return self.down_proj(op.multiply(op.silu(self.gate_proj(x)), self.up_proj(x)))


class _Norm(nn.Module):
    def __init__(self, cfg: DecoderConfig) -> None:
        self.cfg = cfg
        self.weight = nn.Parameter((cfg.hidden_size,))
        if cfg.family == "gpt2":
            self.bias = nn.Parameter((cfg.hidden_size,))

    def forward(self, x: nn.Tensor) -> nn.Tensor:
        if self.cfg.family == "gpt2":
            return op.layer_norm(x, self.cfg.hidden_size, self.weight, self.bias, self.cfg.norm_eps)
        return op.rms_norm(x, self.weight, axes=-1, epsilon=self.cfg.norm_eps)


class _Block(nn.Module):
    def __init__(self, cfg: DecoderConfig) -> None:
        if cfg.family == "gpt2":
            self.ln_1, self.attn, self.ln_2 = _Norm(cfg), _Attention(cfg), _Norm(cfg)
        else:
            self.input_layernorm = _Norm(cfg)
            self.self_attn = _Attention(cfg)
            self.post_attention_layernorm = _Norm(cfg)
        self.mlp = _MLP(cfg)
        self.gpt2 = cfg.family == "gpt2"

    def forward(self, x, rope, past, positions):
        norm1, attn, norm2 = (
            (self.ln_1, self.attn, self.ln_2)
            if self.gpt2
            else (self.input_layernorm, self.self_attn, self.post_attention_layernorm)
        )
        a, k, v = attn(norm1(x), rope, past, positions)
        x = op.add(x, a)
        return op.add(x, self.mlp(norm2(x))), k, v


class _Body(nn.Module):
    """``model`` (Llama family) or ``transformer`` (GPT-2): embeddings, blocks, final norm."""

    def __init__(self, cfg: DecoderConfig) -> None:
        self.cfg = cfg
        if cfg.family == "gpt2":
            self.wte = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
            self.wpe = nn.Embedding(cfg.max_positions, cfg.hidden_size)
            self.h = nn.ModuleList([_Block(cfg) for _ in range(cfg.num_layers)])
            self.ln_f = _Norm(cfg)
        else:
            self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
            self.layers = nn.ModuleList([_Block(cfg) for _ in range(cfg.num_layers)])
            self.norm = _Norm(cfg)
            self.rope_cos = nn.Parameter((cfg.max_positions, cfg.head_dim))
            self.rope_sin = nn.Parameter((cfg.max_positions, cfg.head_dim))

    def forward(self, ids, positions, caches):
        cfg = self.cfg
        n = ids.shape[1]
        if cfg.family == "gpt2":
            x = op.add(self.wte(ids), op.reshape(self.wpe(positions), (1, n, cfg.hidden_size)))
            blocks, final, rope = self.h, self.ln_f, None
        else:
            x = self.embed_tokens(ids)
            shape = (1, n, 1, cfg.head_dim)
            rope = (
                op.reshape(op.take(self.rope_cos, positions, axis=0), shape),
                op.reshape(op.take(self.rope_sin, positions, axis=0), shape),
            )
            blocks, final = self.layers, self.norm
        grown: list[nn.Tensor] = []
        for i, block in enumerate(blocks):
            x, k, v = block(x, rope, (caches[2 * i], caches[2 * i + 1]), positions)
            grown += [k, v]
        return final(x), tuple(grown)


def _last_token(x: nn.Tensor) -> nn.Tensor:
    """``x[:, -1:, :]`` for a symbolic length (a gather: a slice's shape would carry a
    conditional for negative bounds that shape rewriting cannot type)."""
    n = x.shape[1]
    return op.take(x, op.arange(n - 1, n, dtype="int32"), axis=1)


class Decoder(nn.Module):
    """The whole decoder, one step of ``prompt`` tokens after ``context`` cached ones."""

    def __init__(self, cfg: DecoderConfig) -> None:
        self.cfg = cfg
        if cfg.family == "gpt2":
            self.transformer = _Body(cfg)
        else:
            self.model = _Body(cfg)
        self.lm_head = _Linear(cfg.hidden_size, cfg.vocab_size, bias=False)

    def _body(self) -> _Body:
        return self.transformer if self.cfg.family == "gpt2" else self.model

    def forward(self, input_ids, positions, caches):
        """``prompt`` new tokens after ``context`` cached ones: the last token's logits
        ``[1, 1, vocab]`` and the caches grown to ``context + prompt``. Prefill is ``context =
        0``, a decode step ``prompt = 1``; ``positions`` are ``context .. context + prompt - 1``;
        ``caches`` are each layer's K then V, ``[1, context, kv_heads, head_dim]``. Only the
        last token's logits: generation reads no other (``generate`` in transformers asks for
        the same, ``logits_to_keep=1``), and the head over every prompt token would be a
        quarter of a 0.5B Qwen2's prefill (its 136M-parameter head)."""
        hidden, grown = self._body()(input_ids, positions, caches)
        return self.lm_head(_last_token(hidden)), grown

    def spec(self) -> dict:
        """The export spec: ``prompt`` and ``context`` are the symbolic lengths."""
        cfg = self.cfg
        cache = nn.spec.Tensor([1, CONTEXT, cfg.num_kv_heads, cfg.head_dim], "float32")
        return {
            "forward": {
                "input_ids": nn.spec.Tensor([1, PROMPT], "int32"),
                "positions": nn.spec.Tensor([PROMPT], "int32"),
                "caches": [cache] * (2 * cfg.num_layers),
                "$": {"param_mode": "plain", "effect_mode": "none"},
            }
        }


def export(cfg: DecoderConfig) -> tuple[tvm.IRModule, list[str]]:
    """The Relax module (``main``: the step) and its parameter names, in argument order.

    ``main``'s inputs are ``input_ids``, ``positions``, then each layer's cache as a tensor of
    its own (``k_cache_0``, ``v_cache_0``, ``k_cache_1``, ...: every tool that reads inputs'
    shapes sees them), then the weights; it returns the logits and the tuple of grown caches."""
    model = Decoder(cfg)
    mod, named = model.export_tvm(spec=model.spec())
    func = mod[mod.get_global_var("forward")]
    ids, positions, caches, *weights = func.params
    flat = [relax.Var(f"{'kv'[i % 2]}_cache_{i // 2}", ty) for i, ty in enumerate(caches.ty.fields)]
    body = func.bind_params({caches: relax.Tuple(flat)}).body
    main = relax.Function([ids, positions, *flat, *weights], body, func.ret_ty, attrs=func.attrs)
    main = main.with_attrs({"global_symbol": "main", "num_input": 2 + len(flat)})
    return relax.transform.Normalize()(tvm.IRModule({"main": main})), [n for n, _ in named]
