"""TrajectoryBatch: the struct-of-arrays every producer fills and every reward / advantage kernel reads.

One validated, contiguous, fixed-dtype array per field, so the C++ core reads the buffers in place
(no copies, no per-trajectory Python objects) and every consumer can trust the ranges it sees:
validation happens once, here, with errors that name the field and the first bad index.

The array and scalar checks at the bottom are the same rule for every other argument that crosses into
the core (``parasim.scoring.advantages``, ``parasim.scoring.masks``): a value the target dtype cannot hold exactly is an
error naming the argument, the index, the value and the allowed range, never a silent cast (int64 ->
int32 wrap-around, uint64 -> int64 sign flip, float -> int truncation, bool -> number, NaN -> True).
"""
from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from parasim.protocol.schema import NUM_TOOLS, Tool
from parasim.scoring.trajectory_schema import (
    FIELD,
    FIELDS,
    MAX_REWARD_MAGNITUDE,
    PREFERENCE_TAIL,
    TRAJECTORY_FIELDS,
    new_rows,
)

__all__ = ["FIELDS", "BatchValidationError", "TrajectoryBatch", "bool_scalar", "check_no_overlap", "flag_array",
           "int_array", "int_scalar", "real_array", "real_scalar"]


class BatchValidationError(ValueError):
    """A field of a trajectory batch is malformed; the message names the field, index and allowed range."""


def _fail(name: str, index: Any, value: Any, why: str) -> BatchValidationError:
    where = ", ".join(str(int(i)) for i in np.atleast_1d(index))
    return BatchValidationError(f"TrajectoryBatch.{name}[{where}] = {value!r}: {why}")


def _check_num_tools(num_tools: Any) -> int:
    if isinstance(num_tools, (bool, np.bool_)) or not isinstance(num_tools, (int, np.integer)) or num_tools < 1:
        raise BatchValidationError(f"TrajectoryBatch: num_tools = {num_tools!r}: must be an integer >= 1 "
                                   "(the tool spec's tool count)")
    return int(num_tools)


def _coerce(name: str, raw: Any, n: int | None, num_tools: int) -> np.ndarray:
    """Convert one field to its dtype and shape (``parasim.scoring.trajectory_schema``), rejecting what a silent cast
    would corrupt."""
    spec = FIELD[name]
    arr = np.asarray(raw)
    if arr.dtype == object or arr.dtype.kind in "USVMm":
        raise BatchValidationError(f"TrajectoryBatch.{name}: dtype {arr.dtype} is not numeric")
    if arr.dtype.kind == "c":
        raise BatchValidationError(f"TrajectoryBatch.{name}: complex dtype {arr.dtype} is not allowed")
    if arr.dtype.kind == "b" and spec.kind != "flag":
        raise BatchValidationError(f"TrajectoryBatch.{name}: dtype bool is not a number (cast it explicitly)")
    if arr.dtype.kind == "f" and not np.can_cast(arr.dtype, np.float64, casting="safe"):
        raise BatchValidationError(
            f"TrajectoryBatch.{name}: dtype {arr.dtype} does not fit in float64 without rounding")
    if arr.ndim != spec.ndim:
        raise BatchValidationError(
            f"TrajectoryBatch.{name}: expected {spec.ndim}-d array, got shape {arr.shape}")
    if spec.per_tool and arr.shape[1] != spec.columns(num_tools):
        what = "one column per tool of the tool spec" + (
            f", then {', '.join(PREFERENCE_TAIL)}" if spec.extra_columns else "")
        raise BatchValidationError(
            f"TrajectoryBatch.{name}: expected shape (N, {spec.columns(num_tools)}) ({what}, "
            f"num_tools={num_tools}), got {arr.shape}")
    if n is not None and arr.shape[0] != n:
        raise BatchValidationError(
            f"TrajectoryBatch.{name}: length {arr.shape[0]} differs from outcome's length {n} (ragged fields)")
    lo, hi = spec.bounds(num_tools)
    if spec.kind == "vector":
        return _coerce_vector(name, arr)
    if spec.kind == "float":
        if arr.dtype.kind in "iu":  # float64 holds integers exactly only up to 2**53
            _check_range(f"TrajectoryBatch.{name}", arr, -_EXACT_INT, _EXACT_INT,
                         "(integers beyond 2**53 are not exact in float64)", BatchValidationError)
        out = arr.astype(np.float64)
        bad = ~np.isfinite(out)
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise _fail(name, i, float(out[i]), "must be finite")
    else:
        if arr.dtype.kind == "f":
            bad = ~np.isfinite(arr) | (arr != np.round(arr))
            if bad.any():
                i = np.unravel_index(int(np.flatnonzero(bad)[0]), arr.shape)
                raise _fail(name, i, arr[i].item(), "must be an integer")
        elif arr.dtype.kind not in "iub":
            raise BatchValidationError(f"TrajectoryBatch.{name}: dtype {arr.dtype} is not an integer type")
        out = arr
    _check_range(f"TrajectoryBatch.{name}", out, lo, hi, "", BatchValidationError, f"must be in [{lo}, {hi}]")
    return np.ascontiguousarray(out, dtype=spec.dtype)


def _coerce_vector(name: str, arr: np.ndarray) -> np.ndarray:
    """A "vector" field (``preference``): each row all finite, or all NaN (none: ``_preference_pair`` makes it a row
    of zeros with ``has_preference`` 0)."""
    if arr.dtype.kind in "iu":
        _check_range(f"TrajectoryBatch.{name}", arr, -_EXACT_INT, _EXACT_INT,
                     "(integers beyond 2**53 are not exact in float64)", BatchValidationError)
    out = np.ascontiguousarray(arr, dtype=np.float64)
    nan = np.isnan(out)
    partial = nan.any(axis=1) & ~nan.all(axis=1)  # some NaN in a row that also holds numbers
    bad = np.isinf(out) | (partial[:, None] & nan)
    if bad.any():
        i = np.unravel_index(int(np.flatnonzero(bad)[0]), out.shape)
        raise _fail(name, i, float(out[i]), "a row must be all finite numbers, or all NaN (none: the reward "
                    "config's preference vector applies)")
    if out.shape[1]:  # the row's |weights| sum bounds its toolorchestra reward: scaled, so the sum cannot overflow
        scale = np.nansum(np.abs(np.ldexp(out, -1000)), axis=1)
        over = np.flatnonzero(scale > np.ldexp(MAX_REWARD_MAGNITUDE, -1000))
        if over.size:
            i = int(over[0])
            raise _fail(name, i, out[i].tolist(), f"the sum of its absolute weights must be <= 2**1000 "
                        f"(~{MAX_REWARD_MAGNITUDE:.3g}), the largest reward magnitude scored (it bounds the reward)")
    return out


def _preference_pair(values: dict[str, np.ndarray], given: Iterable[str]) -> None:
    """Make ``preference`` / ``has_preference`` of ``values`` agree, in place, after either was set (``given``): a
    ``preference`` row given as NaN is none (``has_preference`` 0, derived where the flag was not given), a flagged
    row must hold a vector, and a row that is none holds zeros."""
    given = set(given)
    if not given & {"preference", "has_preference"}:
        return
    pref = values["preference"]
    nan_rows = np.isnan(pref).all(axis=1) if pref.shape[1] else np.zeros(len(pref), bool)
    if "has_preference" in given and "preference" in given:
        bad = (values["has_preference"] != 0) & nan_rows
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise BatchValidationError(f"TrajectoryBatch.has_preference[{i}] = 1: preference[{i}] is NaN (none); "
                                       "give the row's vector or has_preference 0")
    elif "preference" in given:
        values["has_preference"] = np.ascontiguousarray(~nan_rows, dtype=np.uint8)
    none = values["has_preference"] == 0
    if none.any() and (nan_rows.any() or pref[none].any()):
        pref = pref.copy()
        pref[none] = 0.0
        values["preference"] = pref


class TrajectoryBatch:
    """N trajectories as parallel arrays, one attribute per field of ``parasim.scoring.trajectory_schema`` (``outcome``,
    ``tool_counts``, ...; dtypes and shapes fixed by that schema). Immutable: the attributes cannot be rebound.

    Build with :meth:`from_arrays` or :meth:`from_records`; the constructor itself trusts its input (the arrays
    of every schema field, already in their contract dtypes, e.g. from the simulator's gather).
    """

    __slots__ = FIELDS

    def __init__(self, **arrays: np.ndarray) -> None:
        if arrays.keys() != FIELD.keys():
            missing, unknown = sorted(FIELD.keys() - arrays.keys()), sorted(arrays.keys() - FIELD.keys())
            raise TypeError(f"TrajectoryBatch: needs exactly the schema's fields {list(FIELDS)}; "
                            f"missing {missing}, unknown {unknown}")
        for name, value in arrays.items():
            object.__setattr__(self, name, value)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"TrajectoryBatch is immutable: cannot set {name!r} (build a new batch)")

    def __repr__(self) -> str:
        return f"TrajectoryBatch(n={len(self)}, num_tools={self.num_tools})"

    def __reduce__(self) -> tuple[Any, tuple[dict[str, np.ndarray]]]:
        """Pickle by the arrays (the default slot restore would go through the refusing ``__setattr__``)."""
        return _rebuild, (self.as_dict(),)

    @classmethod
    def from_arrays(cls, *, num_tools: int = NUM_TOOLS, **arrays: Any) -> TrajectoryBatch:
        """Validate and convert arrays; ``outcome`` is required, the rest default as :func:`new_rows` fills them
        (``group_id`` = ``arange(N)``: each trajectory its own group; everything else 0). A ``preference`` row of NaN
        is none (``has_preference`` is derived from the rows unless given).

        ``num_tools``: the tool spec's tool count, the width ``tool_counts`` must have (7 for the default spec).
        """
        num_tools = _check_num_tools(num_tools)
        unknown = sorted(set(arrays) - set(FIELDS))
        if unknown:
            raise BatchValidationError(f"TrajectoryBatch: unknown field(s) {unknown}; allowed: {list(FIELDS)}")
        if "outcome" not in arrays:
            raise BatchValidationError("TrajectoryBatch.outcome is required")
        outcome = _coerce("outcome", arrays["outcome"], None, num_tools)
        n = outcome.shape[0]
        values = new_rows(n, num_tools) if len(arrays) < len(FIELDS) else {}
        values["outcome"] = outcome
        for name in FIELDS[1:]:
            if name in arrays:
                values[name] = _coerce(name, arrays[name], n, num_tools)
        _preference_pair(values, arrays)
        return cls(**values)

    @classmethod
    def from_records(cls, records: Sequence[Mapping[str, Any]] | Iterable[Mapping[str, Any]], *,
                     num_tools: int = NUM_TOOLS) -> TrajectoryBatch:
        """Build from one dict per trajectory (e.g. a terminal step's ``info["trajectory"]``).

        ``tool_counts`` may be a length-``num_tools`` sequence or a mapping keyed by tool index, or (default
        tool spec) by :class:`Tool` or its wire name. Errors name the record index.
        """
        num_tools = _check_num_tools(num_tools)
        records = list(records)
        columns: dict[str, list[Any]] = {}
        for i, rec in enumerate(records):
            unknown = sorted(set(rec) - set(FIELDS))
            if unknown:
                raise BatchValidationError(f"TrajectoryBatch record[{i}]: unknown field(s) {unknown}")
            if "outcome" not in rec:
                raise BatchValidationError(f"TrajectoryBatch.outcome[{i}]: missing (required)")
        for spec in TRAJECTORY_FIELDS:
            name = spec.name
            present = [name in rec for rec in records]
            if not any(present):
                continue
            if not all(present):
                i = present.index(False)
                raise BatchValidationError(f"TrajectoryBatch.{name}[{i}]: missing while other records set it")
            if spec.optional_rows:
                columns[name] = [_vector_row(rec[name], i, name, spec.columns(num_tools))
                                 for i, rec in enumerate(records)]
            elif spec.per_tool:
                columns[name] = [_tool_row(rec[name], i, num_tools) for i, rec in enumerate(records)]
            else:
                columns[name] = [rec[name] for rec in records]
            if spec.kind != "flag":  # np.asarray would turn a bool among numbers into 0 / 1 unseen
                for i, value in enumerate(columns[name]):
                    if any(isinstance(v, (bool, np.bool_)) for v in (value if spec.per_tool else (value,))):
                        raise BatchValidationError(f"TrajectoryBatch.{name}[{i}] = {value!r}: a bool is not a number")
        if not records:
            return cls.from_arrays(outcome=np.zeros(0), num_tools=num_tools)
        return cls.from_arrays(num_tools=num_tools, **{k: np.asarray(v) for k, v in columns.items()})

    def __len__(self) -> int:
        return int(self.outcome.shape[0])

    @property
    def num_tools(self) -> int:
        """The tool spec's tool count: the columns of ``tool_counts``."""
        return int(self.tool_counts.shape[1])

    def as_dict(self) -> dict[str, np.ndarray]:
        """The arrays by field name, in schema order (views, not copies)."""
        return {name: getattr(self, name) for name in FIELDS}

    def replace(self, **arrays: Any) -> TrajectoryBatch:
        """A new batch with the given fields replaced (validated as :meth:`from_arrays` validates them) and the
        others shared with this one: the immutable batch's counterpart of ``dataclasses.replace``."""
        unknown = sorted(set(arrays) - set(FIELDS))
        if unknown:
            raise BatchValidationError(f"TrajectoryBatch.replace: unknown field(s) {unknown}; allowed: {list(FIELDS)}")
        values = self.as_dict()
        for name, value in arrays.items():
            values[name] = _coerce(name, value, len(self), self.num_tools)
        _preference_pair(values, arrays)
        return TrajectoryBatch(**values)

    def subset(self, index: np.ndarray | slice) -> TrajectoryBatch:
        """Rows selected by a slice, integer index or boolean mask (already valid, so no re-validation)."""
        return TrajectoryBatch(**{k: np.ascontiguousarray(v[index]) for k, v in self.as_dict().items()})

    @classmethod
    def concat(cls, batches: Sequence[TrajectoryBatch]) -> TrajectoryBatch:
        """Stack batches row-wise (group ids are kept as given: make them unique across batches yourself)."""
        if not batches:
            return cls.from_arrays(outcome=np.zeros(0))
        widths = sorted({b.num_tools for b in batches})
        if len(widths) > 1:
            raise BatchValidationError(f"TrajectoryBatch.concat: batches have different tool counts {widths}")
        return cls(**{name: np.concatenate([getattr(b, name) for b in batches]) for name in FIELDS})


def _rebuild(arrays: dict[str, np.ndarray]) -> TrajectoryBatch:
    return TrajectoryBatch(**arrays)


def _vector_row(value: Any, i: int, name: str, width: int) -> list[float]:
    """One record's row of a "vector" field: ``width`` numbers, or None for the row's "none" (NaN)."""
    if value is None:
        return [math.nan] * width
    row = list(np.asarray(value, dtype=object).reshape(-1)) if np.ndim(value) else [value]
    if len(row) != width:
        raise BatchValidationError(f"TrajectoryBatch.{name}[{i}]: expected {width} values (the tools in spec order, "
                                   f"then {', '.join(PREFERENCE_TAIL)}) or None, got {len(row)}")
    return row


def _tool_row(value: Any, i: int, num_tools: int) -> list[int]:
    if isinstance(value, Mapping):
        row = [0] * num_tools
        for key, count in value.items():
            try:
                tool = Tool[key.upper()] if isinstance(key, str) else int(key)
            except (KeyError, ValueError, TypeError):
                raise BatchValidationError(f"TrajectoryBatch.tool_counts[{i}]: unknown tool {key!r}") from None
            if not 0 <= tool < num_tools:
                name = Tool(tool).name if isinstance(tool, Tool) else str(tool)
                raise BatchValidationError(f"TrajectoryBatch.tool_counts[{i}]: {name} is not a counted tool "
                                           f"(tool indices 0..{num_tools - 1})")
            row[int(tool)] = count
        return row
    row = list(value)
    if len(row) != num_tools:
        raise BatchValidationError(
            f"TrajectoryBatch.tool_counts[{i}]: expected {num_tools} counts (tool spec order), got {len(row)}")
    return row


# ------------------------------------------------------------------ checks at the Python -> C++ boundary
_EXACT_INT = 2**53  # the largest magnitude below which float64 holds every integer


def _check_range(name: str, a: np.ndarray, lo: float, hi: float, note: str = "",
                 error: type[Exception] = ValueError, why: str | None = None) -> None:
    """Raise ``error`` naming the first element of ``a`` outside [lo, hi]. The bounds are compared as Python
    numbers, exactly: NumPy would round int64 bounds to float64 for a float array (2**63 would pass)."""
    if a.size == 0 or (lo <= a.min().item() and a.max().item() <= hi):
        return
    i = next(k for k, v in enumerate(a.flat) if not lo <= v.item() <= hi)
    where = ", ".join(str(int(j)) for j in np.unravel_index(i, a.shape))
    why = why or f"must be >= {lo} and <= {hi}"
    raise error(f"{name}[{where}] = {a.flat[i].item()!r}: {why}{' ' + note if note else ''}")


def int_array(values: Any, name: str, dtype: type, *, ndim: int = 1, lo: int | None = None,
              hi: int | None = None, keep: tuple[type, ...] = ()) -> np.ndarray:
    """``values`` as a C-contiguous integer array: of its own dtype if that is one of ``keep``, else of
    ``dtype``; every value in [lo, hi] (default: the dtype's range). Floats and bools are refused
    (TypeError), except an empty array of any numeric dtype (``np.asarray([])`` is float64)."""
    a = np.asarray(values)
    if a.ndim != ndim:
        raise ValueError(f"{name}: expected a {ndim}-d array, got shape {a.shape}")
    if lo is None and hi is None and (a.dtype == dtype or a.dtype in keep):  # the usual call: nothing to convert
        return np.ascontiguousarray(a)
    if a.dtype.kind not in "iu" and not (a.size == 0 and a.dtype.kind in "fiub"):
        raise TypeError(f"{name}: dtype {a.dtype} is not an integer type")
    target = a.dtype if a.dtype in keep else np.dtype(dtype)
    info = np.iinfo(target)
    lo = info.min if lo is None else max(lo, info.min)
    hi = info.max if hi is None else min(hi, info.max)
    full = (lo, hi) == (info.min, info.max)
    if a.dtype.kind in "iu" and not (full and np.can_cast(a.dtype, target, casting="safe")):  # else nothing to check
        _check_range(name, a, lo, hi, f"({target})" if full else "")
    return np.ascontiguousarray(a, dtype=target)


def real_array(values: Any, name: str) -> np.ndarray:
    """``values`` as a C-contiguous float32 / float64 array: those two kept as they are, other floats
    widened to float64, integers converted only where float64 holds them exactly (|x| <= 2**53).
    Bools, complex and non-numeric dtypes are refused (TypeError)."""
    a = np.asarray(values)
    if a.dtype.kind == "b":
        raise TypeError(f"{name}: dtype bool is not real-valued (cast it explicitly)")
    if a.dtype.kind not in "fiu":
        raise TypeError(f"{name}: dtype {a.dtype} is not real-valued")
    if a.dtype in (np.float32, np.float64):
        return np.ascontiguousarray(a)
    if a.dtype.kind == "f" and not np.can_cast(a.dtype, np.float64, casting="safe"):
        raise TypeError(f"{name}: dtype {a.dtype} does not fit in float64 without rounding")
    if a.dtype.kind in "iu":
        _check_range(name, a, -_EXACT_INT, _EXACT_INT, "(integers beyond 2**53 are not exact in float64)")
    return np.ascontiguousarray(a, dtype=np.float64)


def flag_array(values: Any, name: str) -> np.ndarray:
    """``values`` as a C-contiguous uint8 array of 0 / 1: bools, or numbers that are exactly 0 or 1
    (NaN, 2 or 0.5 are errors, not True)."""
    a = np.asarray(values)
    if a.dtype == np.bool_:
        return np.ascontiguousarray(a).view(np.uint8)
    if a.dtype.kind not in "iuf":
        raise TypeError(f"{name}: dtype {a.dtype} is not bool or numeric")
    bad = (a != 0) & (a != 1)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        where = ", ".join(str(int(j)) for j in np.unravel_index(i, a.shape))
        raise ValueError(f"{name}[{where}] = {a.flat[i].item()!r}: must be 0 or 1 (or bool)")
    return np.ascontiguousarray(a, dtype=np.uint8)


def int_scalar(name: str, value: Any, lo: int, hi: int = int(np.iinfo(np.int64).max)) -> int:
    """An integer argument in [lo, hi]: a Python or NumPy integer, not a bool and not a float."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name} = {value!r}: must be an integer, not {type(value).__name__}")
    if not lo <= int(value) <= hi:
        raise ValueError(f"{name} = {value!r}: must be an integer >= {lo} and <= {hi}")
    return int(value)


def real_scalar(name: str, value: Any, lo: float, *, lo_open: bool = False) -> float:
    """A finite real argument > lo (``lo_open``) or >= lo: a Python or NumPy number, not a bool or a string."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise TypeError(f"{name} = {value!r}: must be a real number, not {type(value).__name__}")
    try:
        v = float(value)
    except OverflowError:  # an int past the float64 maximum
        v = math.inf
    if not math.isfinite(v) or (v <= lo if lo_open else v < lo):
        raise ValueError(f"{name} = {value!r}: must be finite and {'>' if lo_open else '>='} {lo}")
    return v


def check_no_overlap(outputs: Mapping[str, np.ndarray], inputs: Mapping[str, np.ndarray | None]) -> None:
    """Refuse output buffers that share memory with an input or with each other.

    The core's kernels take their arrays as ``__restrict`` pointers and read inputs while they write outputs, so an
    ``out=`` that aliases an input (``out=(rewards, keep)``, a view of a batch column) gives wrong numbers without
    any error. Every array reaching the core is C-contiguous, where ``np.may_share_memory`` (a bounds check) is exact.
    """
    items = list(outputs.items())
    for i, (name, buf) in enumerate(items):
        clashes = [(other, arr) for other, arr in (*items[i + 1:], *inputs.items()) if arr is not None]
        for other, arr in clashes:
            if np.may_share_memory(buf, arr):
                raise ValueError(f"{name}: shares memory with {other}; the core reads its inputs while writing its "
                                 "outputs, so an output must be a separate buffer (pass a new array or out=None)")


def bool_scalar(name: str, value: Any) -> bool:
    """A flag argument: True / False (or a NumPy bool); 1, 0.0 or NaN are not flags."""
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name} = {value!r}: must be a bool, not {type(value).__name__}")
    return bool(value)
