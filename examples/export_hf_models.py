"""Export small Hugging Face models the way users do: plain ``torch.export.export`` +
``torch.export.save`` (no TuneFarm wrapper, so the files keep no Dim names), random weights
from a config (no hub download).

- ``bert.pt2``: ``BertModel`` in BERT-tiny's shape (2 layers, hidden 128, 2 heads,
  feed-forward 512), ``input_ids[1, s]`` with s dynamic (2..128); address s as ``input_ids.1``.
- ``gpt2.pt2``: ``GPT2Model`` of the same size without a KV cache (causal mask),
  ``input_ids[1, s]``, s dynamic (2..128).
- ``vit.pt2``: ``ViTModel`` (2 layers, hidden 128, 2 heads, 64x64 images in 8x8 patches,
  65 tokens), ``pixel_values[b, 3, 64, 64]`` with the batch b dynamic (1..32); address it as
  ``pixel_values.0``.

Needs the ``hf`` extra (``pip install 'tunefarm[hf]'``; ``make install`` installs it)::

    python examples/export_hf_models.py /tmp/hf          # writes /tmp/hf/{bert,gpt2,vit}.pt2
    tunefarm tune /tmp/hf/bert.pt2 --shape input_ids.1=16,64 --trials 512
    tunefarm bench /tmp/hf/bert.pt2 --shape input_ids.1=16,40,64,100

``python -m benchmarks models --hf`` exports them this way and benches them against PyTorch
eager, ``torch.compile`` and ONNX Runtime.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

MAX_LEN = 128
MAX_BATCH = 32
HIDDEN, LAYERS, HEADS, FF = 128, 2, 2, 512
VOCAB = 1000


def _tokens() -> tuple[tuple, dict]:
    """``input_ids[1, 16]`` and its dynamic length (2..MAX_LEN)."""
    import torch

    ids = torch.randint(0, VOCAB, (1, 16))
    return (ids,), {"input_ids": {1: torch.export.Dim("seq", min=2, max=MAX_LEN)}}


def bert() -> tuple[Any, tuple, dict]:
    import transformers as tr

    cfg = tr.BertConfig(
        hidden_size=HIDDEN,
        num_hidden_layers=LAYERS,
        num_attention_heads=HEADS,
        intermediate_size=FF,
        vocab_size=VOCAB,
        max_position_embeddings=MAX_LEN,
    )
    return (tr.BertModel(cfg).eval(), *_tokens())


def gpt2() -> tuple[Any, tuple, dict]:
    import transformers as tr

    cfg = tr.GPT2Config(
        n_embd=HIDDEN,
        n_layer=LAYERS,
        n_head=HEADS,
        n_inner=FF,
        vocab_size=VOCAB,
        n_positions=MAX_LEN,
        use_cache=False,
        bos_token_id=0,
        eos_token_id=0,
    )
    return (tr.GPT2Model(cfg).eval(), *_tokens())


def vit() -> tuple[Any, tuple, dict]:
    import torch
    import transformers as tr

    cfg = tr.ViTConfig(
        hidden_size=HIDDEN,
        num_hidden_layers=LAYERS,
        num_attention_heads=HEADS,
        intermediate_size=FF,
        image_size=64,
        patch_size=8,
    )
    x = torch.randn(2, 3, 64, 64)
    dims = {"pixel_values": {0: torch.export.Dim("batch", min=1, max=MAX_BATCH)}}
    return tr.ViTModel(cfg).eval(), (x,), dims


MODELS: dict[str, Callable[[], tuple[Any, tuple, dict]]] = {"bert": bert, "gpt2": gpt2, "vit": vit}


def export_all(out: Path, names: list[str] | None = None) -> dict[str, Path]:
    """Export each model (all by default) to ``out/<name>.pt2``; return the paths."""
    import torch

    out.mkdir(parents=True, exist_ok=True)
    paths: dict[str, Path] = {}
    for name in names or list(MODELS):
        torch.manual_seed(0)
        model, args, dims = MODELS[name]()
        ep = torch.export.export(model, args, dynamic_shapes=dims)
        paths[name] = out / f"{name}.pt2"
        torch.export.save(ep, str(paths[name]))
    return paths


if __name__ == "__main__":
    target = Path(sys.argv[1]) if len(sys.argv) > 1 else Path("hf-models")
    for path in export_all(target, sys.argv[2:] or None).values():
        print(f"wrote {path} ({path.stat().st_size // 1024} KiB)")
