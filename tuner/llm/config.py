"""The architecture of a Hugging Face decoder folder, read from its ``config.json``."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from tuner.errors import TuneFarmError

LLAMA_LIKE = ("llama", "qwen2", "mistral")
ARCHITECTURES = (*LLAMA_LIKE, "gpt2")


def _check_architecture(kind: str) -> None:
    if kind not in ARCHITECTURES:
        raise TuneFarmError(
            f"unsupported decoder model_type {kind!r}: expected one of {', '.join(ARCHITECTURES)}"
        )


@dataclass(frozen=True)
class DecoderConfig:
    """The shapes and options of a decoder; ``family`` is ``llama`` (Llama, Qwen2, Mistral) or
    ``gpt2``. Validated at construction."""

    model_type: str
    vocab_size: int
    hidden_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    max_positions: int
    norm_eps: float
    rope_theta: float = 10000.0
    attention_bias: bool = False
    tie_word_embeddings: bool = False

    def __post_init__(self) -> None:
        _check_architecture(self.model_type)
        if self.num_heads % self.num_kv_heads:
            raise TuneFarmError(
                f"num_attention_heads {self.num_heads} is not a multiple of "
                f"num_key_value_heads {self.num_kv_heads}"
            )
        for name in ("vocab_size", "hidden_size", "num_layers", "num_heads", "head_dim"):
            if getattr(self, name) <= 0:
                raise TuneFarmError(f"{name} must be positive, got {getattr(self, name)}")

    @property
    def family(self) -> str:
        """``gpt2`` or ``llama`` (the rotary, RMSNorm, gated-MLP family)."""
        return "gpt2" if self.model_type == "gpt2" else "llama"

    @classmethod
    def from_folder(cls, folder: Path) -> DecoderConfig:
        """Read ``folder/config.json`` (what ``save_pretrained`` writes)."""
        path = Path(folder) / "config.json"
        if not path.is_file():
            raise TuneFarmError(f"{folder} has no config.json: not a Hugging Face model folder")
        try:
            raw = json.loads(path.read_text())
        except json.JSONDecodeError as err:
            raise TuneFarmError(f"{path} is not valid JSON: {err}") from None
        return cls.from_dict(raw)

    @classmethod
    def from_dict(cls, raw: dict) -> DecoderConfig:
        """The config from a ``config.json`` dictionary."""
        kind = str(raw.get("model_type", ""))
        _check_architecture(kind)
        try:
            if kind == "gpt2":
                hidden = int(raw["n_embd"])
                heads = int(raw["n_head"])
                return cls(
                    model_type=kind,
                    vocab_size=int(raw["vocab_size"]),
                    hidden_size=hidden,
                    num_layers=int(raw["n_layer"]),
                    num_heads=heads,
                    num_kv_heads=heads,
                    head_dim=hidden // heads,
                    intermediate_size=int(raw.get("n_inner") or 4 * hidden),
                    max_positions=int(raw["n_positions"]),
                    norm_eps=float(raw.get("layer_norm_epsilon", 1e-5)),
                    attention_bias=True,
                    tie_word_embeddings=bool(raw.get("tie_word_embeddings", True)),
                )
            hidden = int(raw["hidden_size"])
            heads = int(raw["num_attention_heads"])
            rope = raw.get("rope_parameters") or {}
            theta = rope.get("rope_theta", raw.get("rope_theta", 10000.0))
            if rope.get("rope_type", "default") != "default" or raw.get("rope_scaling"):
                raise TuneFarmError(f"rope scaling {rope or raw.get('rope_scaling')} unsupported")
            return cls(
                model_type=kind,
                vocab_size=int(raw["vocab_size"]),
                hidden_size=hidden,
                num_layers=int(raw["num_hidden_layers"]),
                num_heads=heads,
                num_kv_heads=int(raw.get("num_key_value_heads") or heads),
                head_dim=int(raw.get("head_dim") or hidden // heads),
                intermediate_size=int(raw["intermediate_size"]),
                max_positions=int(raw.get("max_position_embeddings", 2048)),
                norm_eps=float(raw.get("rms_norm_eps", 1e-6)),
                rope_theta=float(theta),
                attention_bias=bool(raw.get("attention_bias", kind == "qwen2")),
                tie_word_embeddings=bool(raw.get("tie_word_embeddings", False)),
            )
        except KeyError as err:
            raise TuneFarmError(f"config.json of a {kind or 'decoder'} lacks {err}") from None


def is_decoder_folder(path: Path) -> bool:
    """A Hugging Face model folder: a directory with a ``config.json`` (no TVM import: the CLI
    asks before its heavy imports)."""
    return Path(path).is_dir() and (Path(path) / "config.json").is_file()
