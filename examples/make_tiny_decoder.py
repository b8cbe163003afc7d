"""Write a small random-init decoder as a Hugging Face folder (what ``save_pretrained`` writes).

    python examples/make_tiny_decoder.py out/tiny-llama --arch llama

Architectures: llama, qwen2, mistral, gpt2. Seeded, so the folder is the same every run.
``--preset qwen2-0.5b`` writes a random-init decoder of Qwen2-0.5B's shape (494M parameters,
hidden 896, 24 layers, 14 heads sharing 2 key heads, vocab 151936; 2 GB of float32) with its
positions cut to 2048, the size the decoder benchmark's targets are set on.
"""

from __future__ import annotations

import argparse

import torch
import transformers


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder")
    parser.add_argument("--arch", choices=("llama", "qwen2", "mistral", "gpt2"), default="llama")
    parser.add_argument("--hidden", type=int, default=128)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--vocab", type=int, default=256)
    parser.add_argument("--preset", choices=("qwen2-0.5b",), help="a published model's shape")
    args = parser.parse_args()
    torch.manual_seed(0)
    if args.preset == "qwen2-0.5b":
        cfg = transformers.Qwen2Config(
            vocab_size=151936, hidden_size=896, intermediate_size=4864, num_hidden_layers=24,
            num_attention_heads=14, num_key_value_heads=2, max_position_embeddings=2048,
            rope_theta=1000000.0, rms_norm_eps=1e-6, tie_word_embeddings=True,
        )  # fmt: skip
        args.arch, args.hidden, args.layers = "qwen2", 896, 24
    elif args.arch == "gpt2":
        cfg = transformers.GPT2Config(
            vocab_size=args.vocab, n_embd=args.hidden, n_layer=args.layers, n_head=4,
            n_positions=1024, initializer_range=0.2,
        )  # fmt: skip
    else:
        kind = {"llama": "LlamaConfig", "qwen2": "Qwen2Config", "mistral": "MistralConfig"}
        cfg = getattr(transformers, kind[args.arch])(
            vocab_size=args.vocab, hidden_size=args.hidden, num_hidden_layers=args.layers,
            num_attention_heads=4, num_key_value_heads=2, intermediate_size=2 * args.hidden,
            max_position_embeddings=1024, initializer_range=0.2,
        )  # fmt: skip
    transformers.AutoModelForCausalLM.from_config(cfg).eval().save_pretrained(args.folder)
    print(f"wrote {args.folder} ({args.arch}, hidden {args.hidden}, {args.layers} layers)")


if __name__ == "__main__":
    main()
