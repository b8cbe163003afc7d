"""``python -m benchmarks gemm``: prefill jobs with and without the known matrix-product
tilings, paired (the protocol is :mod:`benchmarks.matvec`'s)."""

from __future__ import annotations

from benchmarks.matvec import main as _main


def main(argv: list[str] | None = None) -> int:
    return _main(argv, "gemm")


if __name__ == "__main__":
    raise SystemExit(main())
