"""``tunefarm generate``: greedy text generation from a decoder folder's built library."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from tuner.cli.common import console, user_errors
from tuner.errors import TuneFarmError


def parse_ids(text: str) -> list[int]:
    """``1,2,3`` as token ids (a clear error on anything else)."""
    try:
        ids = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise TuneFarmError(
            f"--prompt-ids must be comma-separated integers, got {text!r}"
        ) from None
    if not ids:
        raise TuneFarmError("--prompt-ids is empty")
    return ids


def _tokenizer(folder: Path):
    if not any((folder / name).is_file() for name in ("tokenizer.json", "tokenizer_config.json")):
        return None
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(folder))


@user_errors
def generate(
    model: Annotated[Path, typer.Argument(help="A Hugging Face decoder folder.")],
    lib: Annotated[Path, typer.Option("--lib", help="The library `tunefarm build` wrote.")],
    prompt: Annotated[str | None, typer.Option(help="Prompt text (needs the tokenizer).")] = None,
    prompt_ids: Annotated[
        str | None, typer.Option("--prompt-ids", help="Prompt token ids: 1,2,3.")
    ] = None,
    max_new_tokens: Annotated[int, typer.Option("--max-new-tokens", min=1)] = 32,
    threads: Annotated[
        int | None,
        typer.Option(min=1, help="CPU threads (default: TVM_NUM_THREADS, else every CPU)."),
    ] = None,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print tokens and timings as JSON.")
    ] = False,
) -> None:
    """Greedy generation from MODEL's built library (the tokenizer from the folder if any)."""
    from tuner.llm.config import is_decoder_folder
    from tuner.llm.runtime import DecoderSession

    if not is_decoder_folder(model):
        raise TuneFarmError(f"{model} is not a Hugging Face model folder (no config.json)")
    if (prompt is None) == (prompt_ids is None):
        raise TuneFarmError("give exactly one of --prompt and --prompt-ids")
    tok = _tokenizer(model)
    if prompt_ids is not None:
        ids = parse_ids(prompt_ids)
    elif tok is None:
        raise TuneFarmError(f"{model} has no tokenizer: use --prompt-ids")
    else:
        ids = list(tok(prompt)["input_ids"])
    session = DecoderSession(model, lib, threads=threads)
    out = session.generate(ids, max_new_tokens)
    data = {**out.as_json(), "threads": session.threads}
    if tok is not None:
        data["text"] = tok.decode(out.tokens)
    if as_json:
        print(json.dumps(data))
        return
    console.print(data.get("text", " ".join(map(str, out.tokens))), highlight=False)
    console.print(
        f"prefill {out.prefill_ms:.2f} ms, decode {out.decode_tokens_per_sec:.1f} tokens/s "
        f"({session.threads} threads)",
        style="dim",
    )


def register(app: typer.Typer) -> None:
    app.command("generate")(generate)
