"""Golden data: exact expected values, written for other test suites (C/C++ too).

For each case: inputs, outputs, the sparse Jacobian and the input gradient for
the given upstream gradient (pooling), or value and derivative (losses). Every
float quantity carries, per element, its exact value, its correctly rounded value
in each requested dtype, and the rounding bound a correct implementation in that
dtype stays within (``max_abs_error``, and the same in ULPs, ``max_ulp``), so a
consumer compares ``|got - golden| <= max_abs_error`` with no threshold of its own.

Formats:

- ``json``: exact values as strings ("3/4", or decimal digits for a loss value
  that is no exact binary fraction) beside the rounded value per dtype;
- ``npz``: one array per quantity and dtype (``x.float32``, ``jac_rows``, ...) and
  its bound (``dx.float32.max_abs_error``); ``*.bfloat16`` arrays hold bfloat16 bit
  patterns as ``<u2`` (``"bits_of": "bfloat16"`` in ``index.json``);
- ``onnx``: ONNX backend tests (:mod:`symjac.io.golden._onnx`; with onnx alone, lp pooling too);
- ``bin``: raw little-endian arrays, one file each, with an ``index.json`` naming
  every file's dtype, shape and order, so a C test reads them without Python
  (``contrib/symjac_golden.h``).

Every file carries provenance (symjac version, spec hash, generator, seed) and no
timestamp: regenerating gives byte-identical files.
"""

from __future__ import annotations

import hashlib
import io
import json
import math
import zipfile
from collections.abc import Callable, Iterable
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np

from symjac._atomic import atomic_folder, atomic_open, interrupt_held, made_folder
from symjac._errors import SpecError
from symjac._exact import round_fraction
from symjac.io.golden._bounds import BOUND_NOTE, error_bounds, ulp_bound, ulp_list
from symjac.io.golden._held import file_stems, per_object, split
from symjac.io.golden._ties import NOTE as TIES_NOTE, tie_quantities
from symjac.io.golden._second import NOTE as SECOND_NOTE, second_quantities
from symjac.io.golden._unpool import unpool_input, unpool_operator, unpool_quantities
from symjac.io._operator import golden_operator
from symjac._exact import magnitude
from symjac.io._specfile import check_cases, exact_array, has_input, pool_input
from symjac.pool._geometry import resolved
from symjac.check._rounding import float_dtype

FORMATS = ("json", "npz", "bin", "onnx")
_FIXED_DATE = (1980, 1, 1, 0, 0, 0)
#: Significant digits of a loss value that is no exact binary fraction (evaluated at >= 60).
DECIMAL_DIGITS = 40
#: Largest denominator written as an exact fraction; beyond it a loss value is shown in decimal.
_DYADIC_DENOMINATOR = 2**64


def _fraction(v: Any) -> Fraction:
    if isinstance(v, Fraction):
        return Fraction(v)
    if hasattr(v, "_mpf_"):  # mpmath mpf: (sign, mantissa, exponent, bits), an exact binary fraction
        sign, man, exp, _ = v._mpf_
        return Fraction((-1) ** sign * int(man)) * Fraction(2) ** int(exp)
    return Fraction(int(v.p), int(v.q)) if hasattr(v, "q") else Fraction(v)


def _fractions(values: Any) -> np.ndarray:
    arr = np.asarray(values, dtype=object)
    out = np.empty(arr.size, dtype=object)
    for i, v in enumerate(arr.reshape(-1)):
        out[i] = _fraction(v)
    return out.reshape(arr.shape)


def _exact_text(v: Any) -> str:
    """A rational as ``p/q``; an mpmath value that is no short binary fraction as
    its leading decimal digits (it is transcendental, or rational but not dyadic)."""
    f = _fraction(v)
    if not hasattr(v, "_mpf_") or f.denominator <= _DYADIC_DENOMINATOR:
        return str(f)
    import mpmath

    return str(mpmath.nstr(v, DECIMAL_DIGITS, strip_zeros=False))


def case_quantities(case: Any) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """Exact quantities and metadata of one case.

    Values are object arrays of Fractions, except a loss's ``value`` and
    ``derivative``: mpmath numbers (>= 60 digits), exact only where they are
    binary fractions.
    """
    if case.is_loss:
        from symjac.loss._evaluate import complete_inputs, derivative_of, value_of

        pred, label, upstream = complete_inputs(case.operator, case.inputs.get("pred"), case.inputs.get("label"),
                                                case.inputs.get("upstream"))
        qs: dict[str, np.ndarray] = {"pred": _fractions(pred)}
        if label is not None:
            qs["label"] = label = _fractions(label)
        if upstream is not None:
            qs["upstream"] = upstream = _fractions(upstream)
        pred = qs["pred"]
        qs["value"] = np.asarray(value_of(case.operator, pred, label), dtype=object)
        qs["derivative"] = np.asarray(derivative_of(case.operator, pred, label, upstream), dtype=object)
        loss_meta: dict[str, Any] = {
            "operator": repr(case.operator),
            "note": f"value and derivative are mpmath evaluations at >= 60 significant digits; 'exact' gives p/q "
                    f"where the result is a binary fraction, else its first {DECIMAL_DIGITS} significant digits",
            "bounds": "max_abs_error[dtype] bounds |implementation - golden[dtype]| for a correct implementation "
                      "computing in dtype: symjac.verify_loss's bound (rounding depth and conditioning of the "
                      "expression) plus half an ULP of golden[dtype], at inputs every dtype of the file holds exactly; "
                      "max_ulp is max_abs_error in ULPs of golden[dtype] (null where golden[dtype] is 0 and the bound is not)"}
        return qs, loss_meta
    if case.is_scatter:
        return unpool_quantities(case)
    from symjac._exact import ExactArray

    g, x, dy = pool_input(case)
    op = g.operator
    if not op.rational:
        raise SpecError(f"{case.source}: golden data and [expect] values are rational; lp pooling's are "
                        "algebraic (use symjac.forward/jacobian/vjp)")
    tie = case.tie or "first"
    rule = op.tie_rule(case.tie)
    ex, edy = ExactArray.from_any(x), ExactArray.from_any(dy)
    jac = op.jacobian(g, ex, tie)
    qs = {
        "x": x,
        "dy": dy,
        "y": op.exact_forward(g, ex).to_fractions(),
        "dx": op.exact_vjp(g, ex, edy, tie).to_fractions(),
        "jac_rows": jac.rows.astype(np.int64),
        "jac_cols": jac.cols.astype(np.int64),
        "jac_values": _fractions(jac.table)[jac.value_ids] if jac.table else np.empty(0, dtype=object),
        **op.golden_arrays(case.operator),  # what else a test in C needs (RoI: the boxes, exactly)
    }
    meta: dict[str, Any] = {"operator": repr(case.operator), "input_shape": list(g.input_shape),
                            "output_shape": list(g.output_shape),
                            "jacobian": "COO over flattened (C-order) output rows and input columns in the spec's "
                                        "layout" + ("" if rule is None else
                                                    "; where a window's maximum is attained more than once, the entry "
                                                    + ("goes to the first maximal cell (in the window's order)"
                                                       if rule == "first" else f"follows tie policy {rule}")),
                            "bounds": BOUND_NOTE}
    return qs, meta


def provenance(case: Any, qs: dict[str, np.ndarray]) -> dict[str, Any]:
    from symjac._version import __version__

    h = hashlib.sha256()
    h.update(repr(case.operator).encode())
    for key in sorted(k for k in ("x", "indices", "dy", "pred", "label", "upstream") if k in qs):
        h.update(key.encode() + json.dumps([str(v) for v in np.asarray(qs[key]).reshape(-1)]).encode())
        h.update(str(np.asarray(qs[key]).shape).encode())
    explicit = "x" in case.inputs or "pred" in case.inputs
    return {"symjac_version": __version__, "spec_hash": h.hexdigest(), "case": case.name,
            "generator": case.inputs.get("generator", "explicit" if explicit else "default"),
            "seed": int(case.inputs.get("seed", 0))}


def _is_int_array(a: np.ndarray) -> bool:
    return np.asarray(a).dtype.kind in "iu"


def _rounded(a: np.ndarray, dtype: str) -> np.ndarray:
    dt = float_dtype(dtype)
    return per_object(a, lambda v: round_fraction(_fraction(v), dt), dt)


def _stored(rounded: np.ndarray) -> np.ndarray:
    """Little-endian, as files hold it. bfloat16 has no NumPy type code a reader knows:
    its bit patterns go as ``<u2`` (the top half of the float32 with the same value)."""
    if rounded.dtype.name == "bfloat16":
        return rounded.view("<u2")
    return rounded.astype(rounded.dtype.newbyteorder("<"))


def _shaped(values: list[Any], shape: tuple[int, ...]) -> Any:
    """A flat list as JSON: a scalar for shape (), else the flat list (C order)."""
    return values[0] if shape == () else values


def _json(case: Any, qs: dict[str, np.ndarray], meta: dict[str, Any], prov: dict[str, Any], dtypes: list[str],
          path: Path) -> None:
    arrays: dict[str, Any] = {}
    bounds = error_bounds(case, qs, dtypes)
    for name, a in qs.items():
        arr = np.asarray(a)
        if _is_int_array(arr):
            arrays[name] = {"shape": list(arr.shape), "values": arr.reshape(-1).tolist()}
            continue
        entry: dict[str, Any] = {"shape": list(arr.shape),
                                 "exact": _shaped(per_object(arr, _exact_text).reshape(-1).tolist(), arr.shape)}
        for dt in dtypes:
            rounded = _rounded(arr, dt)
            entry[dt] = _shaped([float(v) for v in rounded.reshape(-1)], arr.shape)
            if name in bounds[dt]:
                b = bounds[dt][name]
                entry.setdefault("max_abs_error", {})[dt] = _shaped(b.reshape(-1).tolist(), arr.shape)
                entry.setdefault("max_ulp", {})[dt] = _shaped(ulp_list(b, rounded), arr.shape)
        arrays[name] = entry
    doc = {"provenance": prov, **meta, "dtypes": dtypes, "arrays": arrays}
    # json.dumps(doc, indent=1, sort_keys=True), written as it is encoded: the same bytes
    # without the whole text (and its millions of pieces) in memory at once
    with atomic_open(path, "w", encoding="ascii", newline="\n") as f:
        for chunk in json.JSONEncoder(indent=1, sort_keys=True).iterencode(doc):
            f.write(chunk)
        f.write("\n")


def _npy(arr: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.lib.format.write_array(buf, np.require(arr, requirements="C"), allow_pickle=False)  # keeps 0-d shapes
    return buf.getvalue()


def _typed(case: Any, qs: dict[str, np.ndarray], dtypes: list[str]) -> dict[str, np.ndarray]:
    """Every array of the ``npz``/``bin`` formats, by name: ``NAME.DTYPE`` (little-endian),
    ``NAME.DTYPE.max_abs_error`` (float64) and ``NAME`` for integer arrays."""
    out = {}
    bounds = error_bounds(case, qs, dtypes)
    for name, a in qs.items():
        arr = np.asarray(a)
        if _is_int_array(arr):
            out[name] = arr.astype("<i8")
            continue
        for dt in dtypes:
            out[f"{name}.{dt}"] = _stored(_rounded(arr, dt))
            if name in bounds[dt]:
                out[f"{name}.{dt}.max_abs_error"] = bounds[dt][name].astype("<f8")
    return out


def write_golden(cases: Iterable[Any], out: Path, formats: list[str], dtypes: list[str],
                 divisors: bool = False, on_case: Callable[[str], Any] = str,
                 on_written: Callable[[Path], Any] = str) -> list[Path]:
    """Write golden files for ``cases`` (spec-file cases); return the paths written. ``divisors``: the
    ``operator`` object lists every output window's divisor; ``on_case(name)``: as each case starts;
    ``on_written(path)``: as each case's files are in place (an interrupted run knows which are).

    Each file's values are computed from the inputs as its dtypes hold them
    (:mod:`symjac.io.golden._held`): a case whose inputs the requested dtypes hold differently
    is written once per dtype, ``<case>__<dtype>``."""
    cases = check_cases(list(cases))  # each operator once: the stages below take them as valid
    _check_inputs(cases)  # before any file: a refusal writes nothing
    stems = file_stems(cases, dtypes)
    with made_folder(out):  # a run that fails before its first file leaves no empty folder
        return _write_cases(cases, stems, out, formats, dtypes, divisors, on_case, on_written)


def _write_cases(cases: list[Any], stems: list[str], out: Path, formats: list[str], dtypes: list[str],
                 divisors: bool, on_case: Callable[[str], Any], on_written: Callable[[Path], Any]) -> list[Path]:
    written: list[Path] = []
    for case, stem in zip(cases, stems):
        on_case(case.name)  # the command line's progress line
        if set(formats) == {"onnx"} and not case.is_loss and not case.is_scatter:  # lp pooling: onnx alone (symjac.io.golden._onnx)
            from symjac.io.golden._onnx import write_onnx_algebraic  # imports onnx: only for this format
            with interrupt_held():
                if (algebraic := write_onnx_algebraic(case, dtypes, out, stem)) is not None:
                    written += _told(algebraic, on_written)
            if algebraic is not None:
                continue
        for held_case, held_dtypes, suffix in split(case, dtypes):
            written += _write_case(held_case, case, out, stem, suffix, formats, held_dtypes, divisors, on_written)
    return written


def _check_inputs(cases: list[Any]) -> None:
    """A SpecError naming the first pooling case whose input is missing or does not fit its
    operator (:func:`symjac.io._specfile.pool_input`'s checks), before anything is written."""
    for case in cases:
        if case.is_loss:
            continue
        if case.is_scatter:
            unpool_input(case)  # its indices may stand for the shape
            continue
        if not has_input(case):
            raise SpecError(f"{case.source}: case {case.name!r} has no [input] shape or x, and golden data is "
                            "written at given inputs: add [input] shape = [...], or pass --cover to write the "
                            "coverage plan's shapes (every input family) for it")
        pool_input(case)


def _told(paths: list[Path], on_written: Callable[[Path], Any]) -> list[Path]:
    for path in paths:
        on_written(path)
    return paths


def _write_case(case: Any, given: Any, out: Path, stem: str, suffix: str, formats: list[str], dtypes: list[str],
                divisors: bool, on_written: Callable[[Path], Any]) -> list[Path]:
    """The files of one case at inputs its ``dtypes`` all hold (``given``: the case as read, for
    its provenance), named ``stem + suffix``; ONNX's directories, one per dtype already, ``stem``;
    ``on_written`` told of each as it is in place."""
    written: list[Path] = []
    qs, meta = case_quantities(case)
    geometry = None if case.is_loss or case.is_scatter else resolved(case.operator, tuple(meta["input_shape"]))
    operator = unpool_operator(case, meta) if case.is_scatter else golden_operator(case, geometry, divisors)
    meta = {**meta, "operator": operator, "operator_repr": meta["operator"]}
    ties = {} if case.is_scatter else tie_quantities(case, qs, case_quantities)
    second = second_quantities(case, qs)
    qs, meta = {**qs, **ties, **second}, {**meta, **({"ties": TIES_NOTE} if ties else {}), "second": SECOND_NOTE}
    _refuse_overflow(case, qs, dtypes)
    prov = provenance(given, qs)
    name = stem + suffix
    with interrupt_held():  # each file and the word that it is in place go together: a Ctrl-C lists it
        if "json" in formats:
            p = out / f"{name}.json"
            _json(case, qs, meta, prov, dtypes, p)
            written += _told([p], on_written)
        typed = _typed(case, qs, dtypes) if ("npz" in formats or "bin" in formats) else {}
        if "npz" in formats:
            p = out / f"{name}.npz"
            with atomic_open(p, "wb") as f, zipfile.ZipFile(f, "w", compression=zipfile.ZIP_STORED) as z:
                for key in sorted(typed):
                    z.writestr(zipfile.ZipInfo(f"{key}.npy", date_time=_FIXED_DATE), _npy(typed[key]))
                for key, value in (("operator", meta["operator"]), ("provenance", prov)):
                    z.writestr(zipfile.ZipInfo(f"{key}.json.npy", date_time=_FIXED_DATE),
                               _npy(np.array(json.dumps(value, sort_keys=True))))
            written += _told([p], on_written)
        if "bin" in formats:
            written += _told(_write_bin(out / name, typed, {**meta, "dtypes": dtypes}, prov), on_written)
        if "onnx" in formats:
            from symjac.io.golden._onnx import write_onnx  # imports onnx: only for this format

            written += _told(write_onnx(case, geometry, qs, error_bounds(case, qs, dtypes), dtypes, out, stem, _rounded),
                             on_written)
    return written


def _refuse_overflow(case: Any, qs: dict[str, np.ndarray], dtypes: list[str]) -> None:
    """A SpecError naming the case, the quantity and its value when a finite exact value
    rounds to infinity in a requested dtype: its golden value and bound would be
    infinite (and the rounding of an input raises OverflowError)."""
    for name, a in qs.items():
        arr = np.asarray(a)
        if _is_int_array(arr) or arr.size == 0:
            continue
        flat = arr.reshape(-1)
        _, first = np.unique(np.fromiter(map(id, flat), dtype=np.uint64, count=flat.size), return_index=True)
        largest = max((abs(_fraction(v)) for v in flat[first]), default=Fraction(0))
        for dt in dtypes:
            if math.isinf(float(round_fraction(largest, float_dtype(dt)))):
                raise SpecError(f"{case.source}: case {case.name!r}: {name} reaches {magnitude(largest)} in magnitude, past the largest finite "
                                f"{dt}; give --dtype without {dt}, or smaller values")


def _write_bin(folder: Path, typed: dict[str, np.ndarray], meta: dict[str, Any], prov: dict[str, Any]) -> list[Path]:
    """The case's folder of raw arrays and its index.json, replaced whole (:func:`atomic_folder`):
    an interrupted rewrite leaves the previous folder, never a mix of two runs' files."""
    with atomic_folder(folder) as tmp:
        names = _write_bin_files(tmp, typed, meta, prov)
    return [folder / name for name in names]


def _write_bin_files(folder: Path, typed: dict[str, np.ndarray], meta: dict[str, Any], prov: dict[str, Any]) -> list[str]:
    written = []
    sidecar: dict[str, Any] = {"provenance": prov, **meta, "byte_order": "little", "order": "C", "arrays": {}}
    for name in sorted(typed):
        arr = typed[name]
        fname = f"{name}.bin"
        (folder / fname).write_bytes(arr.tobytes(order="C"))  # inside the folder that replaces the old one whole
        entry: dict[str, Any] = {"file": fname, "dtype": arr.dtype.str, "shape": list(arr.shape), "count": int(arr.size)}
        if name.endswith(".bfloat16"):
            entry["bits_of"] = "bfloat16"
            arr = arr.view(float_dtype("bfloat16"))
        if f"{name}.max_abs_error" in typed:
            entry["max_abs_error_file"] = f"{name}.max_abs_error.bin"
            worst = ulp_bound(typed[f"{name}.max_abs_error"], arr)
            entry["max_ulp"] = float(worst[~np.isnan(worst)].max(initial=0.0))  # over golden values that are not 0
        sidecar["arrays"][name] = entry
        written.append(fname)
    (folder / "index.json").write_text(json.dumps(sidecar, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    written.append("index.json")
    return written


def check_expect(case: Any) -> list[str]:
    """Compare a case's ``[expect]`` values with the exact ones; return mismatches.

    Pooling: ``forward``, ``gradient``, ``output_shape``, ``pads``, ``nnz`` exactly.
    Losses: ``value``, ``derivative`` (S·dL/dpred) and ``base_derivative`` (dL/dpred)
    to within 1e-40 relative (the mpmath values carry >= 50 digits).
    """
    check_cases([case])  # once: case_quantities and pool_input take it as valid
    qs, meta = case_quantities(case)
    qs = {k: v if _is_int_array(v) else _fractions(v) for k, v in qs.items()}
    problems = []
    exp = case.expect

    def same(name: str, got: np.ndarray, want: Any) -> None:
        want_arr = exact_array(want, f"{case.source} [expect].{name}")
        if want_arr.shape != np.asarray(got).shape:
            problems.append(f"{name}: shape {want_arr.shape} expected, {np.asarray(got).shape} computed")
            return
        tol = Fraction(1, 10**40) if case.is_loss else Fraction(0)
        for w, g in zip(want_arr.reshape(-1), np.asarray(got).reshape(-1)):
            want_value = Fraction(w)
            if abs(want_value - Fraction(g)) > tol * max(Fraction(1), abs(want_value)):
                problems.append(f"{name}: expected {want_arr.tolist()}, computed {[str(v) for v in np.asarray(got).reshape(-1)]}")
                return

    if case.is_loss:
        for key, name in (("value", "value"), ("derivative", "derivative")):
            if key in exp:
                same(key, qs[name], exp[key])
        if "base_derivative" in exp:
            scale = Fraction(case.operator.scale)
            same("base_derivative", np.vectorize(lambda v: v / scale, otypes=[object])(qs["derivative"]), exp["base_derivative"])
        return problems
    if "forward" in exp:
        same("forward", qs["y"], exp["forward"])
    if "gradient" in exp:
        same("gradient", qs["dx"], exp["gradient"])
    if "output_shape" in exp and list(exp["output_shape"]) != meta["output_shape"]:
        problems.append(f"output_shape: expected {exp['output_shape']}, computed {meta['output_shape']}")
    if "nnz" in exp and int(exp["nnz"]) != qs["jac_rows"].size:
        problems.append(f"nnz: expected {exp['nnz']}, computed {qs['jac_rows'].size}")
    if "pads" in exp:
        pads = [list(p) for p in pool_input(case)[0].pads]
        if [list(p) for p in exp["pads"]] != pads:
            problems.append(f"pads: expected {exp['pads']}, computed {pads}")
    return problems
