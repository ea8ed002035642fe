"""ONNX Runtime adapter (forward only): a one-node ONNX model built with ``onnx.helper``, run by
``onnxruntime`` on CPU. ONNX Runtime has no autodiff, so every :class:`Impl` has ``backward=None``.

Mapping of the ONNX operator attributes (opset 22) to the symjac spec (layout N, C, D1, ..., Dn =
``channels_first``):

=================================  ======================================================
ONNX                               symjac
=================================  ======================================================
``kernel_shape=[k1, ..., kn]``     ``kernel=(k1, ..., kn)`` (rank n)
``strides`` (absent: 1 per axis)   ``stride``
``pads=[b1, ..., bn, e1, ..., en]``  ``padding=((b1, e1), ..., (bn, en))`` (all 0: ``"valid"``)
``auto_pad="VALID"``               ``"valid"``
``auto_pad="SAME_UPPER"``          ``"same"`` (extra cell at the end), pads sized from the
                                   dilated kernel: (out - 1)·s + (k - 1)·d + 1 - L
``auto_pad="SAME_LOWER"``          ``"same_lower"`` (extra cell at the beginning)
``ceil_mode=1``                    ``ceil_mode=True`` (a window starting in the end padding
                                   is ignored); with VALID the ONNX output formula is
                                   ambiguous (onnx/onnx#3314): :class:`Unsupported`
``count_include_pad=0`` (default)  ``divisor="exclude_pad"``; ``1`` → ``"include_pad"``
``dilations``                      ``dilation``
``GlobalMaxPool/GlobalAverage``    ``GlobalPool(mode, rank)``
``MaxUnpool(X, I, output_shape)``  ``MaxUnpool(kernel, stride, padding, output_size,
                                   flat="tensor")``: indices count the whole output
=================================  ======================================================

ONNX Runtime's CPU provider has float16 and float32 kernels for all four ops and float64 for
``MaxPool`` only (see :func:`limitation`).

Its losses ``NegativeLogLikelihoodLoss`` and ``SoftmaxCrossEntropyLoss`` (forward only, as
:class:`symjac.LossImpl` with ``derivative=None``; their mapping onto ``Loss("nll")`` and
``Loss("softmax_ce", labels="indices")``: :mod:`symjac.frameworks._ort_losses`) are re-exported
here with their ``loss_configurations(grid)`` and ``make_loss``, so ``symjac conform onnxruntime
--ops negative_log_likelihood_loss,softmax_cross_entropy_loss`` (or ``--ops losses``) checks them.
"""

from __future__ import annotations

import itertools
import sys
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np

from symjac.frameworks._adapter import Config, Impl, KnownDefect, Unsupported, combine, generate, grid_size, label
from symjac.frameworks._adapter import require
from symjac.frameworks._adapter import make as _make
from symjac.frameworks._onnx_version import IR_VERSION as IR_VERSION, OPSET as OPSET
from symjac.frameworks._ort_losses import loss_configurations as loss_configurations, make_loss as make_loss
from symjac.frameworks._ort_losses import negative_log_likelihood_loss as negative_log_likelihood_loss
from symjac.frameworks._ort_losses import softmax_cross_entropy_loss as softmax_cross_entropy_loss
from symjac.pool._ops.unpool import MaxUnpool
from symjac.pool._spec import GlobalPool, Pool, RoiAlign, RoiPool

FRAMEWORK = "onnxruntime"
_AUTO_PAD = {"NOTSET": None, "VALID": "valid", "SAME_UPPER": "same", "SAME_LOWER": "same_lower"}


def build_model(op: str, attributes: dict[str, Any], dtype: Any, ndim: int) -> bytes:
    """The serialized one-node ONNX model ``Y = op(X, **attributes)`` for ``ndim``-D input of ``dtype``."""
    onnx = require("onnx")
    helper = onnx.helper
    elem = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    node = helper.make_node(op, ["X"], ["Y"], **attributes)
    graph = helper.make_graph([node], f"symjac_{op}", [helper.make_tensor_value_info("X", elem, [None] * ndim)],
                              [helper.make_tensor_value_info("Y", elem, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    model.ir_version = IR_VERSION
    return bytes(model.SerializeToString())


def run_node(op: str, attributes: dict[str, Any]) -> Callable[[np.ndarray], np.ndarray]:
    """``forward(x)``: one ONNX Runtime session per input dtype and rank (cached), CPU provider."""
    ort = require("onnxruntime")
    sessions: dict[tuple[str, int], Any] = {}

    def forward(x: np.ndarray) -> np.ndarray:
        key = (np.dtype(x.dtype).str, x.ndim)
        if key not in sessions:
            options = ort.SessionOptions()
            options.intra_op_num_threads = 1  # tiny inputs: threads only add overhead
            sessions[key] = ort.InferenceSession(build_model(op, attributes, x.dtype, x.ndim), options,
                                                 providers=["CPUExecutionProvider"])
        return np.asarray(sessions[key].run(None, {"X": np.ascontiguousarray(x)})[0])

    return forward


def _reproducer(op: str, attributes: dict[str, Any]) -> str:
    attrs = ", ".join(f"{k}={v!r}" for k, v in attributes.items())
    return ("import numpy as np\nimport onnxruntime as ort\nfrom onnx import helper\n"
            f"node = helper.make_node({op!r}, ['X'], ['Y']{', ' if attrs else ''}{attrs})\n"
            "elem = helper.np_dtype_to_tensor_dtype(x.dtype)\n"
            "graph = helper.make_graph([node], 'g', [helper.make_tensor_value_info('X', elem, list(x.shape))],\n"
            "                          [helper.make_tensor_value_info('Y', elem, None)])\n"
            f"model = helper.make_model(graph, opset_imports=[helper.make_opsetid('', {OPSET})])\n"
            f"model.ir_version = {IR_VERSION}\n"
            "sess = ort.InferenceSession(model.SerializeToString(), providers=['CPUExecutionProvider'])\n"
            "y = sess.run(None, {'X': x})[0]\nprint('y =', y.shape, y)\n")


def wrap_node(op: str, **attributes: Any) -> Impl:
    """Any single-input ONNX operator as a forward-only :class:`Impl` (``backward=None``)."""
    return Impl(run_node(op, attributes), None, FRAMEWORK, op, dict(attributes), _reproducer(op, attributes))


def wrap(model: Any, *, name: str | None = None, input_name: str | None = None) -> Impl:
    """A whole ONNX model (path, bytes or ``onnx.ModelProto``) with one input and one output, forward only."""
    ort = require("onnxruntime")
    data = model.SerializeToString() if hasattr(model, "SerializeToString") else model
    session = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    feed = input_name or session.get_inputs()[0].name

    def forward(x: np.ndarray) -> np.ndarray:
        return np.asarray(session.run(None, {feed: np.ascontiguousarray(x)})[0])

    what = name or (model if isinstance(model, str) else "model")
    reproducer = (f"import onnxruntime as ort\nsess = ort.InferenceSession({what!r})  # your model\n"
                  f"y = sess.run(None, {{{feed!r}: x}})[0]\nprint('y =', y)\n")
    return Impl(forward, None, FRAMEWORK, str(what), {}, reproducer)


# ------------------------------------------------------------------ mapping


def _spec(mode: str, kernel_shape: Sequence[int], strides: Sequence[int] | None, pads: Sequence[int] | None,
          auto_pad: str, ceil_mode: int, dilations: Sequence[int] | None, divisor: str = "exclude_pad") -> Pool:
    kernel = tuple(int(k) for k in kernel_shape)
    rank = len(kernel)
    if auto_pad not in _AUTO_PAD:
        raise Unsupported(f"auto_pad={auto_pad!r}: give one of {', '.join(map(repr, _AUTO_PAD))}")
    padding: Any = _AUTO_PAD[auto_pad]
    if padding is None:
        p = [0] * (2 * rank) if pads is None else [int(v) for v in pads]
        if len(p) != 2 * rank:
            raise Unsupported(f"pads={pads!r}: give {2 * rank} ints [x1_begin, ..., x{rank}_begin, x1_end, ...]")
        padding = tuple((p[i], p[i + rank]) for i in range(rank)) if any(p) else "valid"
    elif ceil_mode and padding == "valid":
        raise Unsupported("ceil_mode=1 with auto_pad='VALID': the ONNX output-shape formula for this case is "
                          "ambiguous (onnx/onnx#3314); use auto_pad='NOTSET' with pads")
    # With SAME_* the output size is ceil(L / stride) whatever ceil_mode says (the ONNX formula).
    ceil = bool(ceil_mode) and padding not in ("same", "same_lower")
    return Pool(mode, kernel, stride=(1,) * rank if strides is None else tuple(int(s) for s in strides),
                padding=padding, dilation=(1,) * rank if dilations is None else tuple(int(d) for d in dilations),
                ceil_mode=ceil, divisor=divisor)


def _attributes(**attributes: Any) -> dict[str, Any]:
    """ONNX attributes as given, dropping the ones left at ``None`` (absent from the node)."""
    return {k: (list(v) if isinstance(v, tuple) else v) for k, v in attributes.items() if v is not None}


def max_pool(kernel_shape: Sequence[int], strides: Sequence[int] | None = None, pads: Sequence[int] | None = None,
             auto_pad: str = "NOTSET", ceil_mode: int = 0, dilations: Sequence[int] | None = None,
             storage_order: int = 0) -> tuple[Pool, Impl]:
    """ONNX ``MaxPool`` run by ONNX Runtime, and its spec."""
    spec = _spec("max", kernel_shape, strides, pads, auto_pad, ceil_mode, dilations)
    return spec, wrap_node("MaxPool", **_attributes(kernel_shape=kernel_shape, strides=strides, pads=pads,
                                                    auto_pad=auto_pad, ceil_mode=ceil_mode, dilations=dilations,
                                                    storage_order=storage_order))


def average_pool(kernel_shape: Sequence[int], strides: Sequence[int] | None = None, pads: Sequence[int] | None = None,
                 auto_pad: str = "NOTSET", ceil_mode: int = 0, count_include_pad: int = 0,
                 dilations: Sequence[int] | None = None) -> tuple[Pool, Impl]:
    """ONNX ``AveragePool`` run by ONNX Runtime, and its spec (``count_include_pad=0`` → ``exclude_pad``)."""
    divisor = "include_pad" if count_include_pad else "exclude_pad"
    spec = _spec("avg", kernel_shape, strides, pads, auto_pad, ceil_mode, dilations, divisor)
    return spec, wrap_node("AveragePool", **_attributes(kernel_shape=kernel_shape, strides=strides, pads=pads,
                                                        auto_pad=auto_pad, ceil_mode=ceil_mode,
                                                        count_include_pad=count_include_pad, dilations=dilations))


def global_max_pool(rank: int = 2) -> tuple[GlobalPool, Impl]:
    """ONNX ``GlobalMaxPool`` (``rank`` spatial dims, symjac's: ONNX takes it from the input)."""
    return GlobalPool("max", rank=rank), wrap_node("GlobalMaxPool")


def global_average_pool(rank: int = 2) -> tuple[GlobalPool, Impl]:
    """ONNX ``GlobalAveragePool`` and its spec."""
    return GlobalPool("avg", rank=rank), wrap_node("GlobalAveragePool")


def max_unpool(kernel_shape: Sequence[int], strides: Sequence[int] | None = None, pads: Sequence[int] | None = None,
               output_shape: Sequence[int] | None = None) -> tuple[MaxUnpool, Impl]:
    """ONNX ``MaxUnpool`` (opset 22) and its spec: ``forward(x, indices)``, indices counting the whole output
    tensor (``flat="tensor"``, as ONNX ``MaxPool``'s ``Indices``); ``output_shape`` (N, C and the spatial
    sizes, at least the default) is the node's third input. Forward only."""
    ort = require("onnxruntime")
    onnx = require("onnx")
    kernel = tuple(int(k) for k in kernel_shape)
    rank = len(kernel)
    p = [0] * (2 * rank) if pads is None else [int(v) for v in pads]
    if len(p) != 2 * rank:
        raise Unsupported(f"pads={pads!r}: give {2 * rank} ints [x1_begin, ..., x{rank}_begin, x1_end, ...]")
    spec = MaxUnpool(kernel, stride=(1,) * rank if strides is None else tuple(int(v) for v in strides),
                     padding=tuple((p[i], p[i + rank]) for i in range(rank)),
                     output_size=None if output_shape is None else tuple(int(v) for v in output_shape[2:]),
                     flat="tensor")
    attributes = {"kernel_shape": list(kernel), "strides": list(spec.stride or kernel), "pads": p}
    names = ["X", "I"] + ([] if output_shape is None else ["S"])
    sessions: dict[str, Any] = {}

    def forward(x: np.ndarray, indices: np.ndarray) -> np.ndarray:
        key = np.dtype(x.dtype).str
        if key not in sessions:
            h = onnx.helper
            elem = h.np_dtype_to_tensor_dtype(np.dtype(x.dtype))
            types = [elem, onnx.TensorProto.INT64, onnx.TensorProto.INT64]
            graph = h.make_graph([h.make_node("MaxUnpool", names, ["Y"], **attributes)], "symjac_MaxUnpool",
                                 [h.make_tensor_value_info(n, t, None) for n, t in zip(names, types)],
                                 [h.make_tensor_value_info("Y", elem, None)])
            model = h.make_model(graph, opset_imports=[h.make_opsetid("", OPSET)])
            model.ir_version = IR_VERSION
            sessions[key] = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
        feeds = {"X": np.ascontiguousarray(x), "I": np.ascontiguousarray(indices, dtype=np.int64)}
        if output_shape is not None:
            feeds["S"] = np.array(output_shape, dtype=np.int64)
        return np.asarray(sessions[key].run(None, feeds)[0])

    kwargs = {"kernel_shape": list(kernel), "strides": strides, "pads": pads, "output_shape": output_shape}
    reproducer = (f"# ONNX MaxUnpool{attributes!r}, inputs X = x, I = indices"
                  + ("" if output_shape is None else f", output_shape = {list(output_shape)!r}") + "\n")
    run: Any = forward  # forward(x, indices): Impl's callables take the indices after x for a MaxUnpool
    return spec, Impl(run, None, FRAMEWORK, "max_unpool", kwargs, reproducer)


# ------------------------------------------------------------------ RoI ops: the boxes are a second input

#: The opset of the RoI nodes: ONNX Runtime implements RoiAlign up to 16 (not 22) and MaxRoiPool at 1.
ROI_OPSET = 16


def _roi_forward(op: str, attributes: dict[str, Any], rois: np.ndarray, with_indices: bool) -> Callable[..., Any]:
    """``forward(x)`` of a RoI node fed the boxes (in x's dtype) and, for RoiAlign, the batch indices."""
    ort, onnx = require("onnxruntime"), require("onnx")
    helper = onnx.helper
    sessions: dict[str, Any] = {}

    def forward(x: np.ndarray) -> np.ndarray:
        key = np.dtype(x.dtype).str
        if key not in sessions:
            elem = helper.np_dtype_to_tensor_dtype(np.dtype(x.dtype))
            names = ["X", "rois"] + (["batch_indices"] if with_indices else [])
            inputs = [helper.make_tensor_value_info("X", elem, [None] * 4), helper.make_tensor_value_info("rois", elem, None)]
            if with_indices:
                inputs.append(helper.make_tensor_value_info("batch_indices", onnx.TensorProto.INT64, None))
            graph = helper.make_graph([helper.make_node(op, names, ["Y"], **attributes)], f"symjac_{op}", inputs,
                                      [helper.make_tensor_value_info("Y", elem, None)])
            model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", ROI_OPSET)])
            model.ir_version = IR_VERSION
            sessions[key] = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
        boxes = rois.astype(x.dtype)
        feed = {"X": np.ascontiguousarray(x), "rois": np.ascontiguousarray(boxes[:, 1:] if with_indices else boxes)}
        if with_indices:
            feed["batch_indices"] = rois[:, 0].astype(np.int64)
        return np.asarray(sessions[key].run(None, feed)[0])

    return forward


def roi_align(output_height: int, output_width: int, rois: Sequence[Sequence[Any]] | None = None,
              sampling_ratio: int = 0, spatial_scale: Any = 1, coordinate_transformation_mode: str = "half_pixel",
              mode: str = "avg") -> tuple[RoiAlign, Impl]:
    """ONNX ``RoiAlign`` (opset 16) and its spec: ``rois`` rows (batch_index, x1, y1, x2, y2) (None: symjac's
    default boxes), ``half_pixel`` is ``aligned=True``, ``output_half_pixel`` ``aligned=False``; ``mode="max"``
    is ``reduction="max"`` (ONNX Runtime's max of the bilinear-weighted corners,
    :mod:`symjac.pool._ops.align_max`)."""
    if mode not in ("avg", "max"):
        raise Unsupported(f"RoiAlign mode={mode!r}: give 'avg' or 'max'")
    if coordinate_transformation_mode not in ("half_pixel", "output_half_pixel"):
        raise Unsupported(f"coordinate_transformation_mode={coordinate_transformation_mode!r}: give 'half_pixel' or "
                          "'output_half_pixel'")
    boxes: Any = rois  # read and checked by the spec (exact rationals)
    spec = RoiAlign((output_height, output_width), boxes=boxes, spatial_scale=spatial_scale,
                    sampling_ratio=sampling_ratio, aligned=coordinate_transformation_mode == "half_pixel",
                    reduction=mode)
    attributes = {"output_height": output_height, "output_width": output_width, "sampling_ratio": max(sampling_ratio, 0),
                  "spatial_scale": float(spec.spatial_scale), "mode": mode,
                  "coordinate_transformation_mode": coordinate_transformation_mode}
    rois_array = spec.rois()
    reproducer = (f"# ONNX RoiAlign(opset {ROI_OPSET}) with {attributes!r}\n# rois (batch, x1, y1, x2, y2):\n"
                  f"rois = {rois_array.tolist()!r}\n")
    return spec, Impl(_roi_forward("RoiAlign", attributes, rois_array, True), None, FRAMEWORK, "RoiAlign",
                      {**attributes, "rois": rois_array.tolist()}, reproducer)


def max_roi_pool(pooled_shape: Sequence[int], rois: Sequence[Sequence[Any]] | None = None,
                 spatial_scale: Any = 1) -> tuple[RoiPool, Impl]:
    """ONNX ``MaxRoiPool`` and its spec: ``rois`` rows (batch_index, x1, y1, x2, y2) (None: symjac's defaults)."""
    boxes: Any = rois  # read and checked by the spec (exact rationals)
    size: Any = tuple(pooled_shape)
    spec = RoiPool(size, boxes=boxes, spatial_scale=spatial_scale)
    attributes = {"pooled_shape": list(spec.output_size), "spatial_scale": float(spec.spatial_scale)}
    rois_array = spec.rois()
    reproducer = f"# ONNX MaxRoiPool with {attributes!r}\n# rois:\nrois = {rois_array.tolist()!r}\n"
    return spec, Impl(_roi_forward("MaxRoiPool", attributes, rois_array, False), None, FRAMEWORK, "MaxRoiPool",
                      {**attributes, "rois": rois_array.tolist()}, reproducer)


def make(config: Config) -> tuple[Any, Impl]:
    """``(spec, impl)`` of one configuration."""
    return _make(sys.modules[__name__], config)


def limitation(config: Config, dtype: Any) -> str | None:
    """Why ONNX Runtime cannot run ``config`` in ``dtype`` (a kernel or case it rejects), or None."""
    if np.dtype(dtype).name == "bfloat16":  # its MaxPool(22) etc. raise NOT_IMPLEMENTED for bfloat16
        return "ONNX Runtime's CPU provider has no bfloat16 kernel for MaxPool, AveragePool, GlobalMaxPool, " \
               "GlobalAveragePool, MaxUnpool"
    if np.dtype(dtype) == np.float64 and config.op == "max_unpool":
        return "ONNX Runtime's CPU provider has no float64 kernel for MaxUnpool (NOT_IMPLEMENTED, 1.32)"
    if config.op in ("roi_align", "max_roi_pool"):
        if np.dtype(dtype) == np.float64 and config.op == "max_roi_pool":
            return "ONNX Runtime's CPU provider has no float64 kernel for MaxRoiPool"
        return None
    if np.dtype(dtype) == np.float64 and config.op != "max_pool":
        return "ONNX Runtime's CPU provider has no float64 kernel for AveragePool, GlobalMaxPool, GlobalAveragePool"
    kw = config.kwargs
    if str(kw.get("auto_pad", "")).startswith("SAME"):
        spatial = config.input_shape[2:]
        for n, k, s, d in zip(spatial, kw["kernel_shape"], kw.get("strides") or [1] * len(spatial),
                              kw.get("dilations") or [1] * len(spatial)):
            if (-(-n // s) - 1) * s + (k - 1) * d + 1 - n < 0:
                return ("the ONNX SAME formula gives a negative total pad here (stride > dilated kernel); ONNX "
                        "Runtime raises 'padding values must be non-negative' (symjac, like TensorFlow, clamps "
                        "it to 0)")
    return None


def known_defect(config: Config) -> KnownDefect | None:
    """A known ONNX Runtime defect ``config`` runs into (symjac reports it in both its forms: a wrong output
    shape, ``bad_output``, or, where the two paddings give the same shape, wrong values,
    ``forward_values``), or None."""
    kw = config.kwargs
    found = []
    if config.op == "max_unpool":  # last write wins (measured, 1.32): no known defect of its forward
        return None
    dilated = [k > 1 and d > 1 for k, d in zip(kw.get("kernel_shape") or [], kw.get("dilations") or [])]
    if str(kw.get("auto_pad", "NOTSET")).startswith("SAME") and any(dilated):  # a kernel of 1 dilates to 1
        found.append(KnownDefect(
            "ONNX Runtime sizes SAME_UPPER/SAME_LOWER padding from the undilated kernel when dilations > 1 (the ONNX "
            "spec and ORT's own shape inference use the dilated one): a wrong output shape, or wrong values where "
            "both paddings give the same shape (AveragePool k=2, s=3, d=2, SAME_LOWER on L=3)",
            ("bad_output", "forward_values")))
    if config.op in ("max_pool", "global_max_pool"):
        found.append(KnownDefect(
            "ONNX Runtime's MaxPool ignores NaN and gives -max for a window of -inf only (with its Indices output "
            "asked for, it propagates a NaN from a window's first cell only): no NaN policy (symjac's nonfinite "
            "family; tests/test_nonfinite_frameworks.py)", ("forward_values",), ("nonfinite",)))
    if config.op == "roi_align" and kw.get("mode") == "max":
        found.append(KnownDefect(
            "ONNX Runtime's RoiAlign mode='max' keeps a NaN only from the first corner of a bin's first sample point "
            "(its std::max chain: a NaN at corner (0, 0) of a one-point bin gives NaN, at corner (1, 1) the largest "
            "other candidate): no NaN policy (measured, 1.32; symjac's nonfinite family; tests/test_roi_families.py)",
            ("forward_values",), ("nonfinite",)))
    if config.op == "max_roi_pool":
        found.append(KnownDefect(
            "ONNX Runtime's MaxRoiPool keeps a NaN only until the bin's next cell replaces it ([5, nan, 1] -> 1, "
            "[1, 5, nan] -> NaN: no NaN policy) and gives -FLT_MAX for a bin of -inf only (measured, 1.32; symjac's "
            "nonfinite family; tests/test_roi_families.py)", ("forward_values",), ("nonfinite",)))
    return combine(found)


# ------------------------------------------------------------------ configurations

_SIDES = {1: (3, 10), 2: (3, 7), 3: (2, 5)}


def _pool_family(op: str, rank: int, same_dilated: bool = False) -> Callable[[np.random.Generator], Config | None]:
    def draw(rng: np.random.Generator) -> Config | None:
        lo, hi = _SIDES[rank]
        shape = (1, int(rng.integers(1, 3)), *(int(v) for v in rng.integers(lo, hi + 1, rank)))
        k = [int(v) for v in rng.integers(1, 4, rank)]
        kwargs: dict[str, Any] = {"kernel_shape": k}
        if rng.random() < 0.7:
            kwargs["strides"] = [int(v) for v in rng.integers(1, 4, rank)]
        d = [int(v) for v in rng.integers(1, 3, rank)] if rng.random() < 0.4 else None
        r = rng.random()
        auto_pad = "NOTSET" if r < 0.55 else "VALID" if r < 0.7 else "SAME_UPPER" if r < 0.85 else "SAME_LOWER"
        if same_dilated:
            auto_pad, d = ("SAME_UPPER" if r < 0.5 else "SAME_LOWER"), [int(v) for v in rng.integers(2, 4, rank)]
        elif auto_pad.startswith("SAME"):
            d = None  # SAME with dilations > 1 is a known ORT defect: see known_defect
        if auto_pad == "NOTSET":
            # ONNX Runtime: each pad smaller than the kernel.
            kwargs["pads"] = [int(rng.integers(0, k[i % rank])) for i in range(2 * rank)]
            kwargs["ceil_mode"] = int(rng.random() < 0.4)
        else:
            kwargs["auto_pad"] = auto_pad
        if d is not None:
            kwargs["dilations"] = d
        if op == "average_pool":
            kwargs["count_include_pad"] = int(rng.random() < 0.5)
        parts = {"k": tuple(k), "s": tuple(kwargs.get("strides", ())) or None, "d": tuple(d) if d else None,
                 "pads": tuple(kwargs["pads"]) if "pads" in kwargs else None,
                 "auto": auto_pad if auto_pad != "NOTSET" else None, "ceil": bool(kwargs.get("ceil_mode")),
                 "include_pad": bool(kwargs.get("count_include_pad"))}
        return Config(op, kwargs, shape, label("MaxPool" if op == "max_pool" else "AveragePool", **parts))

    return draw


def _global_family(op: str, rank: int) -> Callable[[np.random.Generator], Config | None]:
    def draw(rng: np.random.Generator) -> Config | None:
        lo, hi = _SIDES[rank]
        shape = (int(rng.integers(1, 3)), int(rng.integers(1, 3)), *(int(v) for v in rng.integers(lo, hi + 1, rank)))
        name = "GlobalMaxPool" if op == "global_max_pool" else "GlobalAveragePool"
        return Config(op, {"rank": rank}, shape, label(name, rank=rank))

    return draw


def _roi_family(op: str) -> Callable[[np.random.Generator], Config | None]:
    """RoiAlign (both coordinate modes, fixed and adaptive grids, a scale of 1 or 1/2) and MaxRoiPool at
    symjac's default boxes (outside, on the edges, degenerate, several per item) on the 6 x 7 map."""
    turn = itertools.count()

    def draw(rng: np.random.Generator) -> Config | None:
        out = [int(v) for v in rng.integers(1, 4, 2)]
        scale = 1 if rng.random() < 0.6 else 0.5
        channels = int(rng.integers(1, 3))
        if op == "max_roi_pool":
            return Config(op, {"pooled_shape": out, "spatial_scale": scale}, (2, channels, 6, 7),
                          label("MaxRoiPool", out=tuple(out), scale=scale))
        ctm = "half_pixel" if rng.random() < 0.5 else "output_half_pixel"
        ratio = int(rng.integers(0, 3))
        # the modes in turn, not from rng: the other ops' configurations stay those drawn before max mode
        mode = ("max", "avg")[next(turn) % 2]
        kwargs = {"output_height": out[0], "output_width": out[1], "sampling_ratio": ratio, "spatial_scale": scale,
                  "coordinate_transformation_mode": ctm, "mode": mode}
        return Config(op, kwargs, (2, channels, 6, 7), label("RoiAlign", out=tuple(out), ratio=ratio, scale=scale,
                                                               ctm=ctm, mode=mode))

    return draw


def configurations(grid: str = "small", *, include_known_defects: bool = False) -> Iterator[Config]:
    """ONNX MaxPool/AveragePool over 1/2/3-D (explicit asymmetric pads, VALID, SAME_UPPER/LOWER, ceil_mode,
    count_include_pad, dilations) and the global pools, twice the common grid size with MaxPool half of it (the only op with
    a float64 kernel). ``include_known_defects`` adds SAME with dilations > 1 (see :func:`known_defect`)."""
    families = [_pool_family("max_pool", r) for r in (1, 2, 3)] * 3
    families += [_pool_family("average_pool", r) for r in (1, 2, 3)]
    families += [_global_family(op, r) for op in ("global_max_pool", "global_average_pool") for r in (1, 2, 3)]
    families += [_roi_family("roi_align"), _roi_family("max_roi_pool")]
    if include_known_defects:
        families += [_pool_family(op, r, same_dilated=True) for op in ("max_pool", "average_pool") for r in (1, 2)]
    yield from generate(grid, families, make, scale=2)
    yield from _unpool_configurations(grid)


def _unpool_configurations(grid: str) -> Iterator[Config]:
    """ONNX MaxUnpool over 1/2/3-D: kernel 2 or 3, strides 1 to 3, asymmetric pads, output_shape given or not."""
    rng = np.random.default_rng(12)
    for i in range(max(grid_size(grid) // 6, 1)):
        rank = 1 + i % 3
        k = [int(v) for v in rng.integers(2, 4, rank)]
        s = [int(v) for v in rng.integers(1, 4, rank)]
        pads = [int(rng.integers(0, k[j % rank] // 2 + 1)) for j in range(2 * rank)]
        shape = (1, int(rng.integers(1, 3))) + tuple(int(v) for v in rng.integers(2, 4, rank))
        default = [(n - 1) * st + kk - pads[j] - pads[j + rank] for j, (n, st, kk) in enumerate(zip(shape[2:], s, k))]
        out = list(shape[:2]) + [d + int(rng.integers(0, 2)) for d in default] if rng.random() < 0.4 else None
        kwargs = {"kernel_shape": k, "strides": s, "pads": pads, "output_shape": out}
        yield Config("max_unpool", kwargs, shape, label("MaxUnpool", k=tuple(k), s=tuple(s), pads=tuple(pads),
                                                        out=None if out is None else tuple(out[2:])))
