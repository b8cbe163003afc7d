"""Weights of a Hugging Face decoder folder (``model.safetensors``, sharded or not) in the
argument order of :func:`tuner.llm.model.export`."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from tuner.errors import TuneFarmError
from tuner.llm.config import DecoderConfig
from tuner.llm.model import rope_tables

GPT2_CONV1D = ("attn.c_attn.weight", "attn.c_proj.weight", "mlp.c_fc.weight", "mlp.c_proj.weight")
LOOKUP_TABLES = ("embed_tokens.weight", "wte.weight", "wpe.weight")


def _in_out(name: str, value: np.ndarray, cfg: DecoderConfig) -> np.ndarray:
    """A weight in the model's layout: ``nn.Linear`` weights (``[out, in]``, the tied head
    included) transposed to ``[in, out]``; embeddings, GPT-2's ``Conv1D`` (``[in, out]``
    already) and vectors as stored."""
    if value.ndim != 2 or name.endswith(LOOKUP_TABLES):
        return value
    if cfg.family == "gpt2" and name.endswith(GPT2_CONV1D):
        return value
    return value.T


def _safetensors_files(folder: Path) -> list[Path]:
    index = folder / "model.safetensors.index.json"
    if index.is_file():
        shards = sorted(set(json.loads(index.read_text())["weight_map"].values()))
        return [folder / name for name in shards]
    single = folder / "model.safetensors"
    if not single.is_file():
        raise TuneFarmError(f"{folder} has no model.safetensors (save_pretrained writes one)")
    return [single]


def read_state_dict(folder: Path) -> dict[str, np.ndarray]:
    """Every tensor of the folder's safetensors files, as float32 numpy arrays."""
    from safetensors import safe_open

    out: dict[str, np.ndarray] = {}
    for path in _safetensors_files(Path(folder)):
        with safe_open(str(path), framework="pt") as f:
            for key in f.keys():  # noqa: SIM118 - safe_open is not a mapping
                out[key] = f.get_tensor(key).float().numpy()
    return out


def load_params(folder: Path, cfg: DecoderConfig, names: list[str]) -> list[np.ndarray]:
    """The arrays for parameters ``names``: Hugging Face names, linear weights ``[in, out]``,
    tied heads from the embedding, rotary tables computed."""
    state = read_state_dict(folder)
    cos, sin = rope_tables(cfg)
    embed = "transformer.wte.weight" if cfg.family == "gpt2" else "model.embed_tokens.weight"
    params = []
    for name in names:
        if name.endswith("rope_cos"):
            value = cos
        elif name.endswith("rope_sin"):
            value = sin
        else:
            tied = name == "lm_head.weight" and name not in state
            value = state.get(embed if tied else name)
            if value is None and cfg.family == "gpt2":
                value = state.get(name.removeprefix("transformer."))
            if value is not None:
                value = _in_out(name, value, cfg)
        if value is None:
            raise TuneFarmError(f"{folder}: weight {name} missing from model.safetensors")
        params.append(np.ascontiguousarray(value, dtype=np.float32))
    return params
