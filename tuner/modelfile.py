"""A model file checked before any heavy import: it exists, its suffix is one TuneFarm reads,
and its container is what the suffix says (a ``.pt2`` a zip archive, an ``.onnx`` a protobuf
message), without importing TVM, torch or ONNX. :func:`tuner.model.load_model` reads it."""

from __future__ import annotations

import zipfile
from pathlib import Path

from tuner.errors import TuneFarmError

MODEL_SUFFIXES = (".py", ".json", ".onnx", ".pt2")


def check_model_path(path: Path) -> None:
    """A model path that :func:`load_model` can read: an existing file of a known type."""
    kinds = "a .py (TVMScript), .json (IRModule), .onnx or .pt2 (torch.export) file"
    kinds += " or a Hugging Face decoder folder (config.json + model.safetensors)"
    if path.is_dir() and (path / "config.json").is_file():
        return
    if path.is_dir():
        raise TuneFarmError(f"{path} is a directory: MODEL must be {kinds}")
    if not path.exists():
        raise TuneFarmError(f"model file not found: {path}")
    if path.suffix not in MODEL_SUFFIXES:
        raise TuneFarmError(f"unsupported model file {path}: expected {kinds}")


def check_model_file(path: Path) -> None:
    """The model path is one ``load_model`` can read: an existing file of a known type whose
    container is what its suffix says (a ``.pt2`` a zip archive, an ``.onnx`` a protobuf
    message), checked without importing torch or ONNX."""
    check_model_path(path)
    if path.suffix == ".pt2" and not zipfile.is_zipfile(path):
        raise TuneFarmError(
            f"cannot read {path} as a torch.export program: not a zip archive "
            "(write it with torch.export.save)"
        )
    if path.suffix == ".onnx":
        why = protobuf_defect(path)
        if why is not None:
            raise TuneFarmError(f"cannot read {path} as ONNX: {why}")


def protobuf_defect(path: Path) -> str | None:
    """Why ``path`` is not a serialized protobuf message, or None: its top-level fields are
    walked (tags, varints, lengths) without decoding them."""
    data = path.read_bytes()
    if not data:
        return "the file is empty: it holds no ONNX graph"
    pos = 0

    def varint() -> int:
        nonlocal pos
        value = shift = 0
        while True:
            if pos >= len(data) or shift > 63:
                raise ValueError
            byte = data[pos]
            pos += 1
            value |= (byte & 0x7F) << shift
            shift += 7
            if byte < 0x80:
                return value

    try:
        while pos < len(data):
            tag = varint()
            field, wire = tag >> 3, tag & 7
            if field == 0 or wire not in (0, 1, 2, 5):
                raise ValueError
            if wire == 0:
                varint()
            else:
                size = {1: 8, 5: 4}.get(wire) or varint()  # before pos moves on
                pos += size
            if pos > len(data):
                raise ValueError
    except ValueError:
        return f"not a protobuf message (corrupt at byte {pos}; export it with torch.onnx.export)"
    return None
