"""Shape profiles: how often production traffic sees each value of a model's symbolic dims.

A profile is a histogram of observed values. One variable or several: several are *joint*
tuples (a request with ``b=2, s=17`` counts once, at ``(2, 17)``), since batch and sequence
length are rarely independent. Files (``--shape-profile FILE``):

- CSV, one variable (the long form)::

      var,value,count
      s,17,1200
      s,40,300

  ``var,value,count`` holds the histogram of *one* variable; rows naming several variables are
  refused (they would be marginals, not joint tuples: use the joint form).
- CSV, joint (the wide form): a header of the variable names then ``count``, one tuple a row::

      b,s,count
      1,17,1200
      4,40,300

- JSON, one variable: ``{"s": {"17": 1200, "40": 300}}``; joint:
  ``{"vars": ["b", "s"], "counts": [[1, 17, 1200], [4, 40, 300]]}``.

Blank lines and lines starting with ``#`` are skipped in CSV files; a tuple listed twice has
its counts added. Counts are integers >= 0 and at least one is positive; values are integers.
A variable may also be named ``INPUT.AXIS`` (``input_ids.1``), resolved against the model like
``--shape`` (:meth:`ShapeProfile.for_model`), which also checks every value against the
model's range: the lower bound (``tir_var_lower_bound``, else 1) and ``tir_var_upper_bound``.

``tunefarm profile record`` writes a profile from a list of input shapes or a log
(:func:`record_shapes`, :func:`record_log`). Every error is one line (:class:`TuneFarmError`).
"""

from __future__ import annotations

import csv
import io
import json
import math
import re
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tuner.errors import TuneFarmError

# More distinct tuples than this and bench samples representatives (see ``representatives``).
MAX_BENCH_VALUES = 12


def _int(text: Any, what: str, where: str) -> int:
    """``text`` as an int (``"17"``, ``17``, ``17.0`` from JSON), else a one-line error."""
    if isinstance(text, bool):
        raise TuneFarmError(f"{where}: {what} must be an integer (got {text!r})")
    if isinstance(text, int):
        return text
    if isinstance(text, float) and text.is_integer():
        return int(text)
    if isinstance(text, str) and re.fullmatch(r"\s*[+-]?\d+\s*", text):
        return int(text)
    raise TuneFarmError(f"{where}: {what} must be an integer (got {text!r})")


@dataclass(frozen=True)
class ShapeProfile:
    """Counts of joint values of ``variables``; validated at construction (one-line errors).

    ``counts`` is a tuple of ``(values, count)`` pairs, ``values`` a tuple with one entry per
    variable; it is kept sorted, duplicates merged, zero counts dropped."""

    variables: tuple[str, ...]
    counts: tuple[tuple[tuple[int, ...], int], ...]
    source: str = "profile"

    def __post_init__(self) -> None:
        where = self.source
        names = tuple(self.variables)
        if not names:
            raise TuneFarmError(f"{where}: the profile names no variable")
        for name in names:
            if not isinstance(name, str) or not (
                name.isidentifier() or re.fullmatch(r"[^.=,\s]+\.\d+", name)
            ):
                raise TuneFarmError(f"{where}: {name!r} is not a variable name (VAR or INPUT.AXIS)")
        if len(set(names)) != len(names):
            raise TuneFarmError(f"{where}: a variable is named twice ({', '.join(names)})")
        merged: Counter[tuple[int, ...]] = Counter()
        for values, count in self.counts:
            values = tuple(values)
            if len(values) != len(names):
                raise TuneFarmError(
                    f"{where}: the tuple {values} has {len(values)} values for "
                    f"{len(names)} variable(s) ({', '.join(names)})"
                )
            label = ",".join(f"{n}={v}" for n, v in zip(names, values, strict=True))
            vals = tuple(_int(v, "a value", f"{where}: {label}") for v in values)
            for name, v in zip(names, vals, strict=True):
                if v < 1:
                    raise TuneFarmError(f"{where}: {name}={v}: values must be 1 or more")
            n = _int(count, "a count", f"{where}: {label}")
            if n < 0:
                raise TuneFarmError(f"{where}: {label}: negative count {n}")
            merged[vals] += n
        items = tuple(sorted((v, c) for v, c in merged.items() if c > 0))
        if not items:
            raise TuneFarmError(f"{where}: the profile is empty (no positive count)")
        object.__setattr__(self, "variables", names)
        object.__setattr__(self, "counts", items)

    # ------------------------------------------------------------------ views
    @property
    def total(self) -> int:
        return sum(c for _, c in self.counts)

    def shapes(self) -> list[tuple[dict[str, int], float]]:
        """Every distinct tuple as ``({var: value}, traffic share)``."""
        total = self.total
        return [(dict(zip(self.variables, v, strict=True)), c / total) for v, c in self.counts]

    def marginal(self, var: str) -> dict[int, int]:
        """Counts of ``var``'s values alone (summed over the other variables)."""
        i = self.variables.index(var)
        out: Counter[int] = Counter()
        for values, count in self.counts:
            out[values[i]] += count
        return dict(sorted(out.items()))

    def marginals(self) -> dict[str, dict[int, int]]:
        """:meth:`marginal` of every variable, by name: the traffic a build weighs."""
        return {var: self.marginal(var) for var in self.variables}

    def quantile(self, var: str, q: float) -> int:
        """The least value of ``var`` with at least ``q`` of the traffic at or below it."""
        marg, total, acc = self.marginal(var), self.total, 0
        for value, count in marg.items():
            acc += count
            if acc >= q * total - 1e-9:
                return value
        return max(marg)

    def representatives(
        self, max_values: int = MAX_BENCH_VALUES
    ) -> list[tuple[dict[str, int], float]]:
        """Shapes to bench and their traffic weights: every distinct tuple when there are at
        most ``max_values``; else the tuples are ordered by size (the product of their
        values, a proxy for work), cut into strata of equal traffic at the quantiles
        ``i / (max_values - 1)`` plus 0.99 (so the tail has a stratum of its own), and each
        stratum is represented by its traffic median with the stratum's whole weight."""
        shapes = self.shapes()
        if len(shapes) <= max_values:
            return shapes
        shapes.sort(key=lambda s: (math.prod(s[0].values()), tuple(s[0].values())))
        k = max(2, max_values - 1)
        cuts = sorted({*(i / k for i in range(1, k)), 0.99, 1.0})
        out: list[tuple[dict[str, int], float]] = []
        acc = 0.0
        stratum: list[tuple[dict[str, int], float]] = []
        for shape in shapes:
            stratum.append(shape)
            acc += shape[1]
            while cuts and acc >= cuts[0] - 1e-12:
                cuts.pop(0)
                if stratum:
                    out.append(_median(stratum))
                    stratum = []
        if stratum:
            out.append(_median(stratum))
        return out

    def describe(self) -> str:
        """``s: 3 values 17..400, 1500 calls`` (one clause per variable)."""
        parts = []
        for var in self.variables:
            marg = self.marginal(var)
            parts.append(f"{var}: {len(marg)} values {min(marg)}..{max(marg)}")
        return f"{'; '.join(parts)}; {self.total} observations"

    # ------------------------------------------------------------------ the model
    def for_model(self, mod: Any, entry: str = "main") -> ShapeProfile:
        """This profile checked against ``mod``'s symbolic variables: ``INPUT.AXIS`` names
        resolved to the variable, unknown variables and values outside the model's range
        refused (one line). Variables of the model the profile does not name are allowed
        here; :meth:`require` refuses them where a value is needed."""
        from tuner.symbolic.buckets import (
            describe_vars,
            lower_bounds,
            resolve_shape_keys,
            symbolic_vars,
            upper_bounds,
        )

        model_vars = symbolic_vars(mod, entry)
        if not model_vars:
            raise TuneFarmError(f"{self.source}: the model has no symbolic dim to profile")
        names = []
        for name in self.variables:
            try:
                resolved = next(iter(resolve_shape_keys(mod, {name: [1]})))
            except TuneFarmError as err:
                raise TuneFarmError(f"{self.source}: {err}".replace("--shape ", "")) from None
            if resolved not in model_vars:
                raise TuneFarmError(
                    f"{self.source}: unknown variable {name}; the model has {describe_vars(mod)}"
                )
            names.append(resolved)
        if len(set(names)) != len(names):
            raise TuneFarmError(f"{self.source}: two columns name the same variable ({names})")
        lows, highs = lower_bounds(mod, entry), upper_bounds(mod, entry)
        for i, name in enumerate(names):
            values = [v[i] for v, _ in self.counts]
            low, high = lows.get(name, 1), highs.get(name)
            if min(values) < low:
                raise TuneFarmError(
                    f"{self.source}: {name}={min(values)} is below the model's lower bound {low}"
                )
            if high is not None and max(values) > high:
                raise TuneFarmError(
                    f"{self.source}: {name}={max(values)} exceeds the model's "
                    f"tir_var_upper_bound {high}"
                )
        return ShapeProfile(tuple(names), self.counts, self.source)

    def require(self, names: Iterable[str]) -> None:
        """Every variable of ``names`` has values here, else a one-line error."""
        missing = [n for n in names if n not in self.variables]
        if missing:
            raise TuneFarmError(
                f"{self.source}: no values for {', '.join(missing)} (the profile has "
                f"{', '.join(self.variables)}); a joint profile names every variable of the model"
            )

    # ------------------------------------------------------------------ files
    def to_csv(self) -> str:
        buf = io.StringIO()
        w = csv.writer(buf, lineterminator="\n")
        if len(self.variables) == 1:
            w.writerow(["var", "value", "count"])
            w.writerows([self.variables[0], v[0], c] for v, c in self.counts)
        else:
            w.writerow([*self.variables, "count"])
            w.writerows([*v, c] for v, c in self.counts)
        return buf.getvalue()

    def to_json(self) -> str:
        if len(self.variables) == 1:
            data: dict[str, Any] = {self.variables[0]: {str(v[0]): c for v, c in self.counts}}
        else:
            data = {"vars": list(self.variables), "counts": [[*v, c] for v, c in self.counts]}
        return json.dumps(data, indent=1)

    def write(self, path: Path) -> None:
        path.write_text(self.to_json() if path.suffix.lower() == ".json" else self.to_csv())


def _median(stratum: list[tuple[dict[str, int], float]]) -> tuple[dict[str, int], float]:
    """The stratum's traffic median, weighted with the stratum's whole share."""
    total = sum(w for _, w in stratum)
    acc = 0.0
    for shape, w in stratum:
        acc += w
        if acc >= total / 2 - 1e-12:
            return shape, total
    return stratum[-1][0], total


def load_profile(path: str | Path) -> ShapeProfile:
    """Read a profile file (CSV or JSON, by content: JSON starts with ``{``)."""
    path = Path(path)
    where = f"--shape-profile {path}"
    if path.is_dir():
        raise TuneFarmError(f"{where} is a directory: give a CSV or JSON file")
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise TuneFarmError(f"{where}: no such file") from None
    except UnicodeDecodeError:
        raise TuneFarmError(f"{where}: not a text file (CSV or JSON expected)") from None
    except OSError as err:
        raise TuneFarmError(f"{where}: cannot read it ({err.strerror or err})") from None
    if not text.strip():
        raise TuneFarmError(f"{where}: the file is empty")
    if text.lstrip().startswith(("{", "[")):
        return _from_json(text, where)
    return _from_csv(text, where)


def _from_json(text: str, where: str) -> ShapeProfile:
    try:
        data = json.loads(text)
    except json.JSONDecodeError as err:
        raise TuneFarmError(f"{where}: not valid JSON ({err.msg} at line {err.lineno})") from None
    if not isinstance(data, dict) or not data:
        raise TuneFarmError(
            f'{where}: expected {{"VAR": {{"VALUE": COUNT, ...}}}} or '
            f'{{"vars": [...], "counts": [[V1, ..., COUNT], ...]}}'
        )
    if "vars" in data or "counts" in data:
        names, rows = data.get("vars"), data.get("counts")
        if not isinstance(names, list) or not isinstance(rows, list):
            raise TuneFarmError(f'{where}: the joint form needs "vars" (a list) and "counts"')
        pairs = []
        for row in rows:
            if not isinstance(row, list) or len(row) != len(names) + 1:
                raise TuneFarmError(
                    f"{where}: each entry of counts is [{', '.join(map(str, names))}, count] "
                    f"(got {row!r})"
                )
            pairs.append((tuple(row[:-1]), row[-1]))
        return ShapeProfile(tuple(names), tuple(pairs), where)
    if len(data) > 1:
        raise TuneFarmError(
            f"{where}: {', '.join(data)} as separate histograms are marginals, not joint "
            f'tuples; write {{"vars": [...], "counts": [[...], ...]}}'
        )
    ((name, hist),) = data.items()
    if not isinstance(hist, dict):
        raise TuneFarmError(f'{where}: {name} must map values to counts ({{"17": 1200}})')
    return ShapeProfile((name,), tuple(((v,), c) for v, c in hist.items()), where)


def _from_csv(text: str, where: str) -> ShapeProfile:
    lines = [
        (i, line)
        for i, line in enumerate(text.splitlines(), 1)
        if line.strip() and not line.lstrip().startswith("#")
    ]
    if not lines:
        raise TuneFarmError(f"{where}: the file is empty")
    rows = list(csv.reader(line for _, line in lines))
    header = [h.strip() for h in rows[0]]
    if not header or header[-1].lower() != "count" or len(header) < 2:
        raise TuneFarmError(
            f"{where}: the header must be var,value,count or VAR1[,VAR2...],count "
            f"(got {','.join(header)!r})"
        )
    body = [(n, [c.strip() for c in r]) for (n, _), r in zip(lines[1:], rows[1:], strict=True)]
    for n, row in body:
        if len(row) != len(header):
            raise TuneFarmError(
                f"{where}: line {n} has {len(row)} fields, the header {len(header)}"
            )
    if [h.lower() for h in header] == ["var", "value", "count"]:
        names = list(dict.fromkeys(row[0] for _, row in body))
        if len(names) > 1:
            raise TuneFarmError(
                f"{where}: var,value,count rows name {', '.join(names)}: several variables "
                f"must be joint tuples, header {','.join(names)},count"
            )
        if not names:
            raise TuneFarmError(f"{where}: the file has a header but no rows")
        return ShapeProfile((names[0],), tuple(((row[1],), row[2]) for _, row in body), f"{where}")
    pairs = tuple((tuple(row[:-1]), row[-1]) for _, row in body)
    return ShapeProfile(tuple(header[:-1]), pairs, where)


# ---------------------------------------------------------------------- recording
_DIMS = re.compile(r"^\s*(?:(?P<name>[^:=\s]+)\s*[:=]\s*)?\(?\[?(?P<dims>[\d\s,x*]+)\]?\)?\s*$")


def record_shapes(lines: Iterable[str], mod: Any, source: str = "shapes") -> ShapeProfile:
    """A profile from one model call a line: the shapes of the model's data inputs, in
    order, separated by ``;`` (``17x256`` or ``17,256`` or ``[17, 256]``, optionally named
    ``x:17x256``). Each symbolic dim of the signature takes its value from the matching
    axis; static dims must match and a variable seen twice must agree."""
    from tvm import relax, tirx

    from tuner.symbolic.buckets import data_inputs, symbolic_vars

    params = data_inputs(mod)
    names = symbolic_vars(mod)
    if not names:
        raise TuneFarmError(f"{source}: the model has no symbolic dim to profile")
    counts: Counter[tuple[int, ...]] = Counter()
    for n, line in enumerate(lines, 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        parts = [p for p in line.split(";") if p.strip()]
        if len(parts) != len(params):
            raise TuneFarmError(
                f"{source}: line {n} has {len(parts)} shape(s), the model {len(params)} "
                f"input(s) ({', '.join(p.name for p in params)})"
            )
        values: dict[str, int] = {}
        for part, param in zip(parts, params, strict=True):
            m = _DIMS.match(part)
            if m is None:
                raise TuneFarmError(f"{source}: line {n}: {part.strip()!r} is not a shape")
            if m["name"] and m["name"] != param.name:
                raise TuneFarmError(
                    f"{source}: line {n}: {m['name']} where the model's input is {param.name}"
                )
            dims = [int(d) for d in re.split(r"[\s,x*]+", m["dims"].strip()) if d]
            ty = param.ty
            sig = list(ty.shape.values) if isinstance(ty, relax.TensorType) and ty.shape else []
            if len(dims) != len(sig):
                raise TuneFarmError(
                    f"{source}: line {n}: {param.name} has {len(dims)} dims, the model {len(sig)}"
                )
            for axis, (dim, want) in enumerate(zip(dims, sig, strict=True)):
                if isinstance(want, tirx.IntImm):
                    if dim != int(want):
                        raise TuneFarmError(
                            f"{source}: line {n}: {param.name} axis {axis} is {dim}, the model "
                            f"fixes it at {int(want)}"
                        )
                elif isinstance(want, tirx.Var) and values.setdefault(want.name, dim) != dim:
                    raise TuneFarmError(
                        f"{source}: line {n}: {want.name} is {values[want.name]} and {dim}"
                    )
        missing = [v for v in names if v not in values]
        if missing:
            raise TuneFarmError(f"{source}: line {n} gives no value for {', '.join(missing)}")
        counts[tuple(values[v] for v in names)] += 1
    if not counts:
        raise TuneFarmError(f"{source}: no shapes (one model call a line)")
    return ShapeProfile(tuple(names), tuple(counts.items()), source).for_model(mod)


def record_log(lines: Iterable[str], variables: list[str], source: str = "log") -> ShapeProfile:
    """A profile from a log: each line holding ``VAR=VALUE`` (or ``VAR: VALUE``) for every one
    of ``variables`` counts once; lines without all of them are skipped (a log has other
    lines), as long as at least one line has them."""
    if not variables:
        raise TuneFarmError(f"{source}: name the variables to read (--var NAME, or a model)")
    patterns = {
        v: re.compile(rf"(?<![\w.]){re.escape(v)}\s*[=:]\s*(\d+)(?![\d.])") for v in variables
    }
    counts: Counter[tuple[int, ...]] = Counter()
    for line in lines:
        found = [p.search(line) for p in patterns.values()]
        if all(found):
            counts[tuple(int(m[1]) for m in found if m)] += 1
    if not counts:
        raise TuneFarmError(f"{source}: no line holds {' and '.join(f'{v}=N' for v in variables)}")
    return ShapeProfile(tuple(variables), tuple(counts.items()), source)


def profile_from_mapping(data: Mapping[str, Mapping[int, int]], source: str) -> ShapeProfile:
    """One variable's histogram, ``{"s": {17: 1200}}`` (a helper for tests and the API)."""
    ((name, hist),) = data.items()
    return ShapeProfile((name,), tuple(((v,), c) for v, c in hist.items()), source)
