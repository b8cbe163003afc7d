"""Export a small PyTorch transformer encoder layer with a dynamic sequence length to .pt2.

``nn.TransformerEncoderLayer`` (d_model 64, 2 heads, feed-forward 128) on x[1, s, 64]; the
sequence length is ``torch.export.Dim("s")`` (1 to 512). ``tuner.frontends.torch.export``
records the Dim's name in the file, so TuneFarm calls the dim ``s``::

    python examples/export_transformer_encoder.py          # writes examples/transformer_encoder.pt2
    tunefarm tune examples/transformer_encoder.pt2 --shape s=16,64 --trials 32
    tunefarm bench examples/transformer_encoder.pt2 --shape s=1,7,16,40,64,100
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
from torch.export import Dim

from tuner.frontends.torch import export

D_MODEL, HEADS, FF = 64, 2, 128


class Encoder(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.TransformerEncoderLayer(
            D_MODEL, HEADS, dim_feedforward=FF, dropout=0.0, batch_first=True
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layer(x)


def main(path: Path) -> None:
    torch.manual_seed(0)
    model = Encoder().eval()
    x = torch.randn(1, 16, D_MODEL)
    export(model, (x,), path, dynamic_shapes={"x": {1: Dim("s", min=1, max=512)}})
    print(f"wrote {path} ({path.stat().st_size // 1024} KiB)")


if __name__ == "__main__":
    main(
        Path(sys.argv[1])
        if len(sys.argv) > 1
        else Path(__file__).parent / "transformer_encoder.pt2"
    )
