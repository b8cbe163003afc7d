"""Tiny random-init Hugging Face decoders saved with ``save_pretrained`` (no downloads)."""

from __future__ import annotations

from pathlib import Path

import pytest

ARCHS = ("llama", "qwen2", "mistral", "gpt2")


def save_tiny(arch: str, folder: Path, seed: int = 0):
    """A random-init decoder of ``arch`` (hidden 64, 2 layers, vocab 160) saved to ``folder``."""
    import torch
    import transformers as T

    torch.manual_seed(seed)
    common = dict(
        vocab_size=160,
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        intermediate_size=128,
        max_position_embeddings=256,
        initializer_range=0.2,
    )
    configs = {
        "llama": lambda: T.LlamaConfig(**common),
        "qwen2": lambda: T.Qwen2Config(**common),
        "mistral": lambda: T.MistralConfig(**common),
        "gpt2": lambda: T.GPT2Config(
            vocab_size=160, n_embd=64, n_layer=2, n_head=4, n_positions=256, initializer_range=0.2
        ),
    }
    model = T.AutoModelForCausalLM.from_config(configs[arch]()).eval()
    model.save_pretrained(folder)
    return model


@pytest.fixture(scope="module", params=ARCHS)
def tiny_decoder(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory):
    """(arch, folder, torch model) for each architecture."""
    folder = tmp_path_factory.mktemp(request.param) / "model"
    return request.param, folder, save_tiny(request.param, folder)
