"""Golden data as ONNX backend tests: ``symjac golden --format onnx``.

Each pooling case that ONNX can express becomes one directory per dtype in the layout of
ONNX's own backend tests (``onnx/backend/test/data/node/test_*``), which every ONNX-based
runtime already runs with its backend-test runner::

    OUT/onnx/test_symjac_<case>_<dtype>/
        model.onnx                  one node, Y = Op(X, attributes), opset OPSET
        data.json                   {"atol": the largest rounding bound of Y in the dtype, "rtol": 0}
        test_data_set_0/
            input_0.pb              X: the case's input as the dtype holds it (symjac.io.golden._held)
            output_0.pb             Y: symjac's exact forward, correctly rounded to the dtype

``onnx.backend.test.loader.load_model_tests(data_dir=OUT, kind="onnx")`` lists them, and a
runner that honours ``data.json`` (ONNX's own does) compares within symjac's bound instead of
its default rtol 1e-3: a correct implementation computing in the dtype stays within it (the
largest ``max_abs_error`` of ``y`` that the other golden formats give per element).

The mapping from a spec to an ONNX node (attributes as in the ONNX operator docs, opset 22):

=============================  ==============================================================
symjac                          ONNX
=============================  ==============================================================
``Pool("avg" | "max")``         ``AveragePool`` / ``MaxPool``, ``kernel_shape``, ``strides``,
                                ``dilations``, ``pads`` = the resolved ``[b1..bn, e1..en]``
                                (``auto_pad`` NOTSET: the pads symjac's geometry computed for
                                ``"same"``/``"same_lower"`` too), ``ceil_mode``
``divisor="exclude_pad"``       ``count_include_pad=0``; ``"include_pad"`` → ``1``
``Pool("lp", p=...)``           ``LpPool``, the same window attributes and ``p``
``GlobalPool("avg" | "max")``   ``GlobalAveragePool`` / ``GlobalMaxPool``
=============================  ==============================================================

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
pooling in a run with json/npz/bin or with odd p on a negative input, fractional max pooling, RoI pooling and
RoI Align and max unpooling (not written yet), losses, and bfloat16 (no ONNX Runtime
CPU pooling kernel reads it). The stored outputs are exact values rounded once.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any

import numpy as np

from symjac._atomic import made_folder, write_bytes

OPSET = 22
IR_VERSION = 10  # what onnxruntime >= 1.20 reads
DTYPES = ("float16", "float32", "float64")
_DIVISORS = {"exclude_pad": 0, "include_pad": 1}


class NoOnnxForm(Exception):
    """The case has no ONNX node with the same semantics; the message says why."""


def _average(spec: Any) -> dict[str, Any]:
    if spec.divisor not in _DIVISORS:
        raise NoOnnxForm(f"divisor={spec.divisor!r}: ONNX AveragePool divides by the valid or the padded count")
    return {"count_include_pad": _DIVISORS[spec.divisor]}


def _max(spec: Any) -> dict[str, Any]:
    if spec.pad_value is not None:
        raise NoOnnxForm("pad_value=0: ONNX MaxPool pads with -inf (padding takes no part in the max)")
    return {}


def _lp(spec: Any) -> dict[str, Any]:
    return {"p": int(spec.p)}


#: The export's rule table (as a JAX transform keeps one per primitive): per pooling mode, the
#: ONNX operator and the attributes only it takes; a mode without a rule has no ONNX form here.
_WINDOWED = {"avg": ("AveragePool", _average), "max": ("MaxPool", _max), "lp": ("LpPool", _lp)}
_GLOBAL = {"avg": "GlobalAveragePool", "max": "GlobalMaxPool"}


def onnx_node(spec: Any, geometry: Any) -> tuple[str, dict[str, Any]]:
    """The ONNX operator and attributes computing ``spec`` on ``geometry``'s input.

    Raises:
      NoOnnxForm: the spec has no ONNX equivalent (see the module docs).
    """
    from symjac.pool._spec import AdaptivePool, GlobalPool, Pool

    if getattr(spec, "layout", "channels_first") != "channels_first":
        raise NoOnnxForm(f"layout {spec.layout!r}: ONNX pools read N, C, D1..Dn (channels_first)")
    if isinstance(spec, GlobalPool):
        if spec.mode not in _GLOBAL:
            raise NoOnnxForm(f"global {spec.mode!r} pooling has no rule in this export")
        return _GLOBAL[spec.mode], {}
    if isinstance(spec, AdaptivePool):
        raise NoOnnxForm("AdaptivePool has no ONNX operator (ONNX has no adaptive pooling)")
    if not isinstance(spec, Pool):
        raise NoOnnxForm(f"{type(spec).__name__}: this export writes ONNX pooling nodes only (AveragePool, MaxPool, "
                         "LpPool and their global forms); RoiAlign, MaxRoiPool and MaxUnpool backend tests are not written")
    if spec.mode not in _WINDOWED:
        raise NoOnnxForm(f"mode {spec.mode!r} has no rule in this export")
    op, own = _WINDOWED[spec.mode]
    pads = geometry.pads
    attributes: dict[str, Any] = {
        "kernel_shape": list(spec.kernel),
        "strides": list(spec.stride if spec.stride is not None else spec.kernel),
        "pads": [int(lo) for lo, _ in pads] + [int(hi) for _, hi in pads],
        "dilations": list(spec.dilation),
        "ceil_mode": int(spec.ceil_mode),
        **own(spec),
    }
    return op, attributes


def write_onnx(case: Any, geometry: Any, qs: dict[str, np.ndarray], bounds: dict[str, dict[str, np.ndarray]],
               dtypes: list[str], out: Path, stem: str, rounded: Any) -> list[Path]:
    """Write the backend-test directories of one case; return the files written (none, with a
    warning, when ONNX cannot express it). ``rounded(array, dtype)`` rounds exact values once;
    ``bounds[dtype]["y"]`` is the per-element rounding bound of the output."""
    onnx, helper, numpy_helper = _onnx()
    if case.is_loss:
        warnings.warn(f"{case.name}: losses have no ONNX backend-test export (pooling only)", stacklevel=2)
        return []
    try:
        op, attributes = onnx_node(case.operator, geometry)
    except NoOnnxForm as exc:
        warnings.warn(f"{case.name}: no ONNX form: {exc}", stacklevel=2)
        return []
    written: list[Path] = []
    for dt in _onnx_dtypes(case, dtypes):
        x = np.asarray(rounded(qs["x"], dt))
        y = np.asarray(rounded(qs["y"], dt))
        atol = float(np.max(bounds[dt]["y"], initial=0.0))
        written += _write_test(onnx, helper, numpy_helper, case, geometry, op, attributes, dt, x, y, atol, out, stem)
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
        op, attributes = onnx_node(case.operator, geometry)
    except NoOnnxForm as exc:
        warnings.warn(f"{case.name}: no ONNX form: {exc}", stacklevel=2)
        return []
    p = int(attributes.get("p", 2))
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
        written += _write_test(onnx, helper, numpy_helper, case, geometry, op, attributes, dt, x, y, atol, out, stem)
    return written


def _write_test(onnx: Any, helper: Any, numpy_helper: Any, case: Any, geometry: Any, op: str,
                attributes: dict[str, Any], dt: str, x_spec: np.ndarray, y_spec: np.ndarray, atol: float,
                out: Path, stem: str) -> list[Path]:
    """One backend-test directory: the node, X and Y in ``dt`` (the spec's layout, reshaped to
    ONNX's), and data.json with ``atol``."""
    # ONNX pools read (N, C, D1..Dn): fold the spec's leading dims into that (each (N, C)
    # slice is pooled alone, so the reshape changes no value)
    written = []
    lead = tuple(geometry.lead)
    nc = (int(np.prod(lead[:-1], dtype=np.int64)) if len(lead) > 1 else 1, lead[-1] if lead else 1)
    x = np.asarray(x_spec).reshape(nc + tuple(geometry.in_spatial))
    y = np.asarray(y_spec).reshape(nc + tuple(geometry.out_spatial))
    elem = helper.np_dtype_to_tensor_dtype(x.dtype)
    node = helper.make_node(op, ["X"], ["Y"], **attributes)
    graph = helper.make_graph([node], f"symjac_{stem}",
                              [helper.make_tensor_value_info("X", elem, list(x.shape))],
                              [helper.make_tensor_value_info("Y", elem, list(y.shape))])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)],
                              producer_name="symjac", doc_string=f"symjac golden case {case.name!r}: {case.operator!r} on input shape "
                                         f"{tuple(geometry.input_shape)} (here {x.shape})")
    model.ir_version = IR_VERSION
    onnx.checker.check_model(model, full_check=True)  # shapes inferred by ONNX agree with symjac's
    folder = out / "onnx" / f"test_symjac_{stem}_{dt}"
    data = folder / "test_data_set_0"
    files = [(folder / "model.onnx", model.SerializeToString()),
             (data / "input_0.pb", numpy_helper.from_array(x, "X").SerializeToString()),
             (data / "output_0.pb", numpy_helper.from_array(y, "Y").SerializeToString()),
             (folder / "data.json", (json.dumps({"atol": atol, "rtol": 0})
                                     + "\n").encode())]
    with made_folder(data):  # a failed write leaves no empty test folder
        for path, payload in files:
            write_bytes(path, payload)
            written.append(path)
    return written
