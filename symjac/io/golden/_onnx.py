"""Golden data as ONNX backend tests: ``symjac golden --format onnx``.

Each pooling case that ONNX can express becomes one directory per dtype in the layout of
ONNX's own backend tests (``onnx/backend/test/data/node/test_*``), which every ONNX-based
runtime already runs with its backend-test runner::

    OUT/onnx/test_symjac_<case>_<dtype>/
        model.onnx                  one node, Y = Op(X, ..., attributes)
        data.json                   {"atol": the largest rounding bound of Y in the dtype, "rtol": 0}
        test_data_set_0/
            input_0.pb              X: the case's input as the dtype holds it (symjac.io.golden._held)
            input_1.pb, ...         the node's other inputs: RoiAlign's rois and batch_indices,
                                    MaxRoiPool's rois, MaxUnpool's I (and output_shape)
            output_0.pb             Y: symjac's exact forward, correctly rounded to the dtype

``onnx.backend.test.loader.load_model_tests(data_dir=OUT, kind="onnx")`` lists them, and a
runner that honours ``data.json`` (ONNX's own does) compares within symjac's bound instead of
its default rtol 1e-3: a correct implementation computing in the dtype stays within it (the
largest ``max_abs_error`` of ``y`` that the other golden formats give per element; for RoI
Align that is its own rounding model, whose sample coordinates round in the dtype:
:mod:`symjac.io.golden._verified`).

The mapping from a spec to an ONNX node is :mod:`symjac.io.golden._onnx_nodes`' rule table,
one rule per operator object; a setting with no ONNX equivalent is a
:class:`~symjac.io.golden._onnx_nodes.NoOnnxForm` naming it and what would be valid, and the
case (or the one dtype that cannot hold its boxes) is skipped with that message as a warning.

lp pooling's values are algebraic (``(Σ x^p)^(1/p)``), not rational, so the other golden
formats refuse it (their files hold exact fractions). ``--format onnx`` alone exports it: X is
the case's input as the dtype holds it (generated in it, or rounded to it), Y the exact lp
forward *of that X* rounded correctly to the dtype (:func:`symjac.pool._lp.round_array`), and ``atol`` the operator's ``forward_bound``
in the dtype plus half an ULP of Y (Y's own rounding). A run that also asks for json, npz or bin
refuses the case as before (no format is silently left out of a run that asked for it). ONNX's
LpPool computes ``(Σ |x|^p)^(1/p)``: for odd p with a negative input in the case that is another
function, so the case is skipped with a warning.

Not expressible, so skipped with a warning naming the reason: ``channels_last`` (ONNX pools
are N, C, D1..Dn), an integer divisor, max pooling with ``pad_value=0``, adaptive pooling, lp
pooling in a run with json/npz/bin or with odd p on a negative input, fractional max pooling,
a RoI ``spatial_scale`` float32 does not hold (ONNX's attribute is a 32-bit float), box
coordinates the dtype does not hold (that dtype only: ONNX reads rois in X's dtype), max
unpooling with an ``output_size`` other than the default (ONNX Runtime and ONNX's reference
read it differently) or with ``write="first"`` at a repeated index (both keep the last write),
losses, and bfloat16 (no ONNX Runtime CPU pooling kernel reads it). The stored outputs are
exact values rounded once.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any

import numpy as np

from symjac._atomic import made_folder, write_bytes
from symjac.io.golden._onnx_nodes import NoOnnxForm, OnnxNode, onnx_node

__all__ = ["NoOnnxForm", "OnnxNode", "onnx_node", "write_onnx", "write_onnx_algebraic"]

IR_VERSION = 10  # what onnxruntime >= 1.20 reads
DTYPES = ("float16", "float32", "float64")


def write_onnx(case: Any, geometry: Any, qs: dict[str, np.ndarray], bounds: dict[str, dict[str, np.ndarray]],
               dtypes: list[str], out: Path, stem: str, rounded: Any) -> list[Path]:
    """Write the backend-test directories of one case; return the files written (none, with a
    warning naming the setting, when ONNX cannot express it; a dtype ONNX cannot hold the case's
    boxes in is left out with a warning of its own). ``rounded(array, dtype)`` rounds exact values
    once; ``bounds[dtype]["y"]`` is the per-element rounding bound of the output."""
    onnx, helper, numpy_helper = _onnx()
    if case.is_loss:
        warnings.warn(f"{case.name}: losses have no ONNX backend-test export (pooling only)", stacklevel=2)
        return []
    try:
        node = onnx_node(case.operator, geometry, qs)
    except NoOnnxForm as exc:
        warnings.warn(f"{case.name}: no ONNX form: {exc}", stacklevel=2)
        return []
    written: list[Path] = []
    for dt in _onnx_dtypes(case, dtypes):
        x = np.asarray(rounded(qs["x"], dt))
        y = np.asarray(rounded(qs["y"], dt))
        try:
            inputs = node.inputs(x.dtype)
            atol = float(np.max(bounds[dt]["y"], initial=0.0))
        except NoOnnxForm as exc:
            warnings.warn(f"{case.name}: no ONNX backend test in {dt}: {exc}", stacklevel=2)
            continue
        written += _write_test(onnx, helper, numpy_helper, case, geometry, node, dt, x, y, inputs, atol, out, stem)
    return written


def _onnx() -> tuple[Any, Any, Any]:
    try:
        import onnx
        from onnx import helper, numpy_helper
    except ImportError as exc:
        from symjac._errors import InputError

        raise InputError("golden --format onnx needs the onnx package: pip install 'symjac[onnx]'") from exc
    return onnx, helper, numpy_helper


def _onnx_dtypes(case: Any, dtypes: list[str]) -> list[str]:
    """The requested dtypes ONNX Runtime pools in; a warning names each other one."""
    kept = []
    for dt in dtypes:
        if dt not in DTYPES:
            warnings.warn(f"{case.name}: no ONNX backend test in {dt} (ONNX Runtime has no {dt} pooling kernel)",
                          stacklevel=3)
            continue
        kept.append(dt)
    return kept


def write_onnx_algebraic(case: Any, dtypes: list[str], out: Path, stem: str) -> list[Path] | None:
    """The backend-test directories of a pooling case whose values are algebraic (lp), or None
    for a rational operator (:func:`write_onnx` takes it): per dtype, X = the input rounded to
    it, Y = the exact forward of X rounded correctly to it, and atol = the operator's
    ``forward_bound`` in the dtype plus half an ULP of Y."""
    from symjac.io._specfile import pool_input

    geometry, x_exact, _ = pool_input(case)
    if geometry.operator.rational:
        return None
    from symjac._exact import ExactArray
    from symjac.check._rounding import float_dtype, unit_roundoff
    from symjac.pool._lp import round_array

    onnx, helper, numpy_helper = _onnx()
    try:
        node = onnx_node(case.operator, geometry)
    except NoOnnxForm as exc:
        warnings.warn(f"{case.name}: no ONNX form: {exc}", stacklevel=2)
        return []
    p = int(node.attributes.get("p", 2))
    if p % 2 == 1 and any(v < 0 for v in np.asarray(x_exact).reshape(-1)):
        warnings.warn(f"{case.name}: no ONNX form: p={p} with a negative input: ONNX LpPool computes "
                      f"(Σ |x|^{p})^(1/{p}), symjac (and PyTorch) (Σ x^{p})^(1/{p}); give p even or x >= 0",
                      stacklevel=2)
        return []
    rules = geometry.operator
    written: list[Path] = []
    for dt in _onnx_dtypes(case, dtypes):
        dtype = float_dtype(dt)
        # the input as the dtype holds it (generated in it, or rounded to it), exactly
        x = round_array(np.asarray(pool_input(case, dtype=dt)[1], dtype=object), dtype)
        exact = ExactArray.from_any(x)
        y = round_array(rules.forward(geometry, exact), dtype)
        _, tol, _ = rules.forward_bound(geometry, x, lambda e=exact: e, dtype, unit_roundoff(dt))
        tol = np.asarray(tol, dtype=np.float64).reshape(-1)
        half_ulp = np.spacing(np.abs(y)).astype(np.float64).reshape(-1) / 2
        if not (np.all(np.isfinite(x)) and np.all(np.isfinite(y)) and np.all(np.isfinite(tol))):
            warnings.warn(f"{case.name}: no ONNX backend test in {dt}: a value or its bound is not finite there",
                          stacklevel=2)
            continue
        atol = float(np.max(tol + half_ulp, initial=0.0) * (1 + 2.0**-30))
        written += _write_test(onnx, helper, numpy_helper, case, geometry, node, dt, x, y, (), atol, out, stem)
    return written


def _write_test(onnx: Any, helper: Any, numpy_helper: Any, case: Any, geometry: Any, node: OnnxNode, dt: str,
                x_spec: np.ndarray, y_spec: np.ndarray, inputs: tuple[tuple[str, np.ndarray], ...], atol: float,
                out: Path, stem: str) -> list[Path]:
    """One backend-test directory: the node, X (``input_0.pb``) and its other ``inputs``
    (``input_1.pb``, ...) and Y (``output_0.pb``) in ``dt`` (the spec's arrays reshaped to ONNX's
    layout, :class:`OnnxNode`), and data.json with ``atol``."""
    written = []
    x = np.asarray(x_spec).reshape(node.x_shape)
    y = np.asarray(y_spec).reshape(node.y_shape)
    feeds = (("X", x), *inputs)
    elem = helper.np_dtype_to_tensor_dtype(x.dtype)
    graph = helper.make_graph([helper.make_node(node.op, [name for name, _ in feeds], ["Y"], **node.attributes)],
                              f"symjac_{stem}",
                              [helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(a.dtype), list(a.shape))
                               for name, a in feeds],
                              [helper.make_tensor_value_info("Y", elem, list(y.shape))])
    shape = tuple(geometry.input_shape) if geometry is not None else x.shape
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", node.opset)],
                              producer_name="symjac", doc_string=f"symjac golden case {case.name!r}: {case.operator!r} on input shape "
                                         f"{shape} (here {x.shape})")
    model.ir_version = IR_VERSION
    onnx.checker.check_model(model, full_check=True)  # shapes inferred by ONNX agree with symjac's
    folder = out / "onnx" / f"test_symjac_{stem}_{dt}"
    data = folder / "test_data_set_0"
    files = [(folder / "model.onnx", model.SerializeToString())]
    files += [(data / f"input_{i}.pb", numpy_helper.from_array(np.ascontiguousarray(a), name).SerializeToString())
              for i, (name, a) in enumerate(feeds)]
    files += [(data / "output_0.pb", numpy_helper.from_array(y, "Y").SerializeToString()),
              (folder / "data.json", (json.dumps({"atol": atol, "rtol": 0}) + "\n").encode())]
    with made_folder(data):  # a failed write leaves no empty test folder
        for path, payload in files:
            write_bytes(path, payload)
            written.append(path)
    return written
