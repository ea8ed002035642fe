"""Golden data: exact expected values, written for other test suites (C/C++ too).

For each case of a spec file: inputs, outputs, the sparse Jacobian and the input
gradient for the given upstream gradient (pooling), or value and derivative
(losses). Formats:

- ``json``: exact rationals as strings ("3/4") beside float64 values;
- ``npz``: one array per quantity and dtype (``x.float32``, ``jac_rows``, ...);
- ``bin``: raw little-endian arrays, one file each, with a JSON sidecar naming
  every file's dtype, shape and order, so a C test reads them without Python.

Every file carries provenance (symjac version, spec hash, generator, seed) and no
timestamp: regenerating gives byte-identical files.
"""

from __future__ import annotations

import hashlib
import io
import json
import re
import zipfile
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np

from symjac._exact import round_fractions

FORMATS = ("json", "npz", "bin")
_FIXED_DATE = (1980, 1, 1, 0, 0, 0)


def _slug(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", name).strip("_") or "case"


def _fractions(values: Any) -> np.ndarray:
    arr = np.asarray(values, dtype=object)
    out = np.empty(arr.size, dtype=object)
    for i, v in enumerate(arr.reshape(-1)):
        if isinstance(v, Fraction):
            out[i] = v
        elif hasattr(v, "_mpf_"):  # mpmath mpf: (sign, mantissa, exponent, bits), an exact binary fraction
            sign, man, exp, _ = v._mpf_
            out[i] = (-1) ** sign * Fraction(int(man)) * Fraction(2) ** int(exp)
        else:
            out[i] = Fraction(int(v.p), int(v.q)) if hasattr(v, "q") else Fraction(v)
    return out.reshape(arr.shape)


def case_quantities(case: Any) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """Exact quantities (object arrays of Fractions) and metadata of one case."""
    if case.is_loss:
        from symjac.loss._evaluate import complete_inputs, loss_derivative, loss_value

        pred, label, upstream = complete_inputs(case.operator, case.inputs.get("pred"), case.inputs.get("label"),
                                                case.inputs.get("upstream"))
        qs: dict[str, np.ndarray] = {"pred": _fractions(pred)}
        if label is not None:
            qs["label"] = label = _fractions(label)
        if upstream is not None:
            qs["upstream"] = upstream = _fractions(upstream)
        pred = qs["pred"]
        qs["value"] = _fractions(loss_value(case.operator, pred, label))
        qs["derivative"] = _fractions(loss_derivative(case.operator, pred, label, upstream))
        loss_meta: dict[str, Any] = {"operator": repr(case.operator), "note": "value and derivative are rounded from "
                                     ">= 50-digit mpmath evaluations to their exact binary fractions"}
        return qs, loss_meta
    from symjac._exact import ExactArray
    from symjac.pool._jacobian import _sparse, exact_forward, exact_vjp, routes
    from symjac.io._specfile import pool_input

    g, x, dy = pool_input(case)
    ex, edy = ExactArray.from_any(x), ExactArray.from_any(dy)
    jac = _sparse(routes(g, ex, "first"))
    qs = {
        "x": x,
        "dy": dy,
        "y": exact_forward(g, ex).to_fractions(),
        "dx": exact_vjp(g, ex, edy, "first").to_fractions(),
        "jac_rows": jac.rows.astype(np.int64),
        "jac_cols": jac.cols.astype(np.int64),
        "jac_values": _fractions(jac.values),
    }
    meta: dict[str, Any] = {"operator": repr(case.operator), "input_shape": list(g.input_shape), "output_shape": list(g.output_shape),
            "jacobian": "COO over flattened (C-order) output rows and input columns in the spec's layout; "
                        "max pooling at ties routes to the first maximum"}
    return qs, meta


def provenance(case: Any, qs: dict[str, np.ndarray]) -> dict[str, Any]:
    from symjac import __version__

    h = hashlib.sha256()
    h.update(repr(case.operator).encode())
    for key in sorted(k for k in ("x", "dy", "pred", "label", "upstream") if k in qs):
        h.update(key.encode() + json.dumps([str(v) for v in np.asarray(qs[key]).reshape(-1)]).encode())
        h.update(str(np.asarray(qs[key]).shape).encode())
    explicit = "x" in case.inputs or "pred" in case.inputs
    return {"symjac_version": __version__, "spec_hash": h.hexdigest(), "case": case.name,
            "generator": case.inputs.get("generator", "explicit" if explicit else "default"),
            "seed": int(case.inputs.get("seed", 0))}


def _is_int_array(a: np.ndarray) -> bool:
    return np.asarray(a).dtype.kind in "iu"


def _json(qs: dict[str, np.ndarray], meta: dict[str, Any], prov: dict[str, Any]) -> bytes:
    arrays = {}
    for name, a in qs.items():
        arr = np.asarray(a)
        if _is_int_array(arr):
            arrays[name] = {"shape": list(arr.shape), "values": arr.reshape(-1).tolist()}
        else:
            flat = arr.reshape(-1)
            arrays[name] = {"shape": list(arr.shape), "exact": [str(v) for v in flat],
                            "float64": [float(v) for v in round_fractions(flat, np.float64)]}
    doc = {"provenance": prov, **meta, "arrays": arrays}
    return (json.dumps(doc, indent=1, sort_keys=True) + "\n").encode()


def _npy(arr: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.lib.format.write_array(buf, np.require(arr, requirements="C"), allow_pickle=False)  # keeps 0-d shapes
    return buf.getvalue()


def _typed(qs: dict[str, np.ndarray], dtypes: list[str]) -> dict[str, np.ndarray]:
    out = {}
    for name, a in qs.items():
        arr = np.asarray(a)
        if _is_int_array(arr):
            out[name] = arr.astype("<i8")
            continue
        for dt in dtypes:
            out[f"{name}.{dt}"] = round_fractions(arr.reshape(-1), dt).reshape(arr.shape).astype(np.dtype(dt).newbyteorder("<"))
    return out


def write_golden(spec_path: str | Path, out: Path, formats: list[str], dtypes: list[str]) -> list[Path]:
    """Write golden files for every case of a spec file; return the paths written."""
    from symjac.io._specfile import load

    out.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    for case in load(spec_path).cases:
        qs, meta = case_quantities(case)
        prov = provenance(case, qs)
        stem = _slug(case.name)
        if "json" in formats:
            p = out / f"{stem}.json"
            p.write_bytes(_json(qs, meta, prov))
            written.append(p)
        typed = _typed(qs, dtypes) if ("npz" in formats or "bin" in formats) else {}
        if "npz" in formats:
            p = out / f"{stem}.npz"
            with zipfile.ZipFile(p, "w", compression=zipfile.ZIP_STORED) as z:
                for name in sorted(typed):
                    z.writestr(zipfile.ZipInfo(f"{name}.npy", date_time=_FIXED_DATE), _npy(typed[name]))
                z.writestr(zipfile.ZipInfo("provenance.json.npy", date_time=_FIXED_DATE),
                           _npy(np.array(json.dumps(prov, sort_keys=True))))
            written.append(p)
        if "bin" in formats:
            folder = out / stem
            folder.mkdir(exist_ok=True)
            sidecar: dict[str, Any] = {"provenance": prov, **meta, "byte_order": "little", "order": "C", "arrays": {}}
            for name in sorted(typed):
                arr = typed[name]
                fname = f"{name}.bin"
                (folder / fname).write_bytes(arr.tobytes(order="C"))
                sidecar["arrays"][name] = {"file": fname, "dtype": arr.dtype.str, "shape": list(arr.shape),
                                           "count": int(arr.size)}
                written.append(folder / fname)
            p = folder / "index.json"
            p.write_text(json.dumps(sidecar, indent=1, sort_keys=True) + "\n")
            written.append(p)
    return written


def check_expect(case: Any) -> list[str]:
    """Compare a case's ``[expect]`` values with the exact ones; return mismatches.

    Pooling: ``forward``, ``gradient``, ``output_shape``, ``pads``, ``nnz`` exactly.
    Losses: ``value``, ``derivative`` (S·dL/dpred) and ``base_derivative`` (dL/dpred)
    to within 1e-40 relative (the mpmath values carry >= 50 digits).
    """
    from symjac.io._specfile import exact_array

    qs, meta = case_quantities(case)
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
        from symjac.io._specfile import pool_input

        pads = [list(p) for p in pool_input(case)[0].pads]
        if [list(p) for p in exp["pads"]] != pads:
            problems.append(f"pads: expected {exp['pads']}, computed {pads}")
    return problems
