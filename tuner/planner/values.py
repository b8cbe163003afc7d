"""Candidate bucket values: tileable roundings and powers of two over a range."""

from __future__ import annotations

from collections.abc import Iterable


def tileable(v: int, bound: int | None) -> int:
    """``v`` rounded up to a tileable bucket: a power of two up to 8, else a multiple of 8;
    within ``bound`` (the model's upper bound of the variable, if any)."""
    out = 1 << (v - 1).bit_length() if v <= 8 else -(-v // 8) * 8
    return min(out, bound) if bound else out


def powers_of_two(values: Iterable[int], bound: int | None) -> list[int]:
    """Powers of two over the range of ``values`` (the one above the largest included),
    within ``bound``: the planner's alternative to its own buckets."""
    values = list(values)
    top, low = tileable(max(values), bound), min(values) // 2
    out, p = [], 1
    while True:
        if (bound is None or p <= bound) and p >= low:
            out.append(p)
        if p >= top or (bound is not None and p >= bound):
            return out
        p *= 2
