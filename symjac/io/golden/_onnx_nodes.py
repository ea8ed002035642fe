"""The ONNX node of each operator ``symjac golden --format onnx`` exports: one rule per operator,
in a table keyed by the operator object (as a JAX transform keeps one rule per primitive).

A rule reads the spec (and its geometry, or for max unpooling the case's indices) and gives an
:class:`OnnxNode`: the operator, its attributes and opset, the shapes X and Y have in ONNX's layout,
and the node's other inputs (RoI boxes, batch indices, unpooling indices, ``output_shape``) in each
dtype. A spec with no ONNX node of the same semantics raises :class:`NoOnnxForm` naming the setting
and what would be valid; a setting the node could hold in one dtype and not another (a box
coordinate float16 does not hold) raises it from :meth:`OnnxNode.inputs` for that dtype alone.

=============================  ==============================================================
symjac                          ONNX
=============================  ==============================================================
``Pool("avg" | "max" | "lp")``  ``AveragePool`` / ``MaxPool`` / ``LpPool`` (opset 22), ``kernel_shape``,
                                ``strides``, ``dilations``, ``pads`` = the resolved ``[b1..bn, e1..en]``,
                                ``ceil_mode``; avg: ``count_include_pad``; lp: ``p``
``GlobalPool("avg" | "max")``   ``GlobalAveragePool`` / ``GlobalMaxPool``
``RoiAlign``                    ``RoiAlign`` (opset 16): ``output_height``/``output_width``,
                                ``sampling_ratio`` (<= 0: 0, adaptive), ``spatial_scale``,
                                ``mode`` = ``reduction``, ``coordinate_transformation_mode``
                                ``half_pixel`` (``aligned=True``) or ``output_half_pixel``
                                (``aligned=False``: no shift, a box at least 1 x 1, as
                                ``onnx.reference`` and ONNX Runtime compute it); inputs X,
                                ``rois`` (K, 4) in X's dtype, ``batch_indices`` (K,) int64
``RoiPool``                     ``MaxRoiPool`` (opset 16, i.e. MaxRoiPool-1): ``pooled_shape``,
                                ``spatial_scale``; inputs X, ``rois`` (K, 5) (batch index first)
``MaxUnpool``                   ``MaxUnpool`` (opset 22): ``kernel_shape``, ``strides``, ``pads``;
                                inputs X, ``I`` (int64, counting the whole output tensor, as
                                ONNX ``MaxPool``'s ``Indices``: a ``flat="plane"`` spec's
                                indices offset by their plane's start, the same scatter) and,
                                with ``output_size`` (only the default size: ONNX Runtime and
                                ONNX's reference read a larger one differently),
                                ``output_shape`` (N, C, *output_size); ``write="last"`` (both
                                keep the last write; ``"first"`` only without repeated indices)
=============================  ==============================================================
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from fractions import Fraction
from typing import Any

import numpy as np

from symjac._errors import SpecError
from symjac.pool._ops.align_max import ROI_ALIGN_MAX
from symjac.pool._ops.avg import AVG
from symjac.pool._ops.lp import LP
from symjac.pool._ops.max import MAX
from symjac.pool._ops.roi_align import ROI_ALIGN
from symjac.pool._ops.roi_pool import ROI_POOL
from symjac.pool._ops.unpool import MaxUnpool

OPSET = 22
#: ONNX Runtime implements RoiAlign up to opset 16 and MaxRoiPool at 1 (an opset-22 model finds no kernel).
ROI_OPSET = 16
_DIVISORS = {"exclude_pad": 0, "include_pad": 1}
Inputs = Callable[[np.dtype[Any]], tuple[tuple[str, np.ndarray], ...]]


class NoOnnxForm(SpecError):
    """The case (or a setting of it, in one dtype) has no ONNX node with the same semantics; the
    message names the setting, why, and what would be valid."""


def _no_inputs(dtype: np.dtype[Any]) -> tuple[tuple[str, np.ndarray], ...]:
    return ()


@dataclasses.dataclass(frozen=True)
class OnnxNode:
    """One ONNX node computing a case's forward.

    Attributes:
      op: the ONNX operator; attributes: its attributes; opset: the default domain's opset.
      x_shape, y_shape: X and Y in ONNX's layout (the spec's arrays reshaped, no value changed).
      inputs: ``inputs(dtype)``, the node's inputs after X, as (name, array) in order (float arrays
        in ``dtype``); :class:`NoOnnxForm` where ``dtype`` cannot hold them exactly.
    """

    op: str
    attributes: dict[str, Any]
    opset: int
    x_shape: tuple[int, ...]
    y_shape: tuple[int, ...]
    inputs: Inputs = _no_inputs


# -- window pooling --------------------------------------------------------------------------------
def _average(spec: Any) -> dict[str, Any]:
    if spec.divisor not in _DIVISORS:
        raise NoOnnxForm(f"divisor={spec.divisor!r}: ONNX AveragePool divides by the valid or the padded count; "
                         "give divisor='exclude_pad' or 'include_pad'")
    return {"count_include_pad": _DIVISORS[spec.divisor]}


def _max(spec: Any) -> dict[str, Any]:
    if spec.pad_value is not None:
        raise NoOnnxForm("pad_value=0: ONNX MaxPool pads with -inf (padding takes no part in the max); "
                         "leave pad_value unset")
    return {}


def _lp(spec: Any) -> dict[str, Any]:
    return {"p": int(spec.p)}


def _window(op: str, global_op: str | None, own: Callable[[Any], dict[str, Any]]) -> Callable[..., OnnxNode]:
    """The rule of a window pooling operator: ``op`` on a :class:`symjac.Pool`, ``global_op`` on a
    :class:`symjac.GlobalPool`."""

    def rule(spec: Any, geometry: Any, qs: dict[str, np.ndarray]) -> OnnxNode:
        from symjac.pool._spec import AdaptivePool, GlobalPool

        if getattr(spec, "layout", "channels_first") != "channels_first":
            raise NoOnnxForm(f"layout {spec.layout!r}: ONNX pools read N, C, D1..Dn (channels_first); "
                             "give layout='channels_first'")
        # ONNX pools read (N, C, D1..Dn): fold the spec's leading dims into that (each (N, C)
        # slice is pooled alone, so the reshape changes no value)
        lead = tuple(geometry.lead)
        nc = (int(np.prod(lead[:-1], dtype=np.int64)) if len(lead) > 1 else 1, lead[-1] if lead else 1)
        shapes = (nc + tuple(geometry.in_spatial), nc + tuple(geometry.out_spatial))
        if isinstance(spec, GlobalPool):
            if global_op is None:
                raise NoOnnxForm(f"global {spec.mode!r} pooling: ONNX has GlobalAveragePool and GlobalMaxPool only")
            return OnnxNode(global_op, {}, OPSET, *shapes)
        if isinstance(spec, AdaptivePool):
            raise NoOnnxForm("AdaptivePool has no ONNX operator (ONNX has no adaptive pooling); give a Pool "
                             "with the kernel and stride it stands for, where there is one")
        pads = geometry.pads
        attributes: dict[str, Any] = {
            "kernel_shape": list(spec.kernel),
            "strides": list(spec.stride if spec.stride is not None else spec.kernel),
            "pads": [int(lo) for lo, _ in pads] + [int(hi) for _, hi in pads],
            "dilations": list(spec.dilation),
            "ceil_mode": int(spec.ceil_mode),
            **own(spec),
        }
        return OnnxNode(op, attributes, OPSET, *shapes)

    return rule


# -- RoI pooling and RoI Align ----------------------------------------------------------------------
def _float32_scale(spec: Any, op: str) -> float:
    """``spatial_scale`` as ONNX's attribute holds it (a 32-bit float), where that is exact."""
    scale = Fraction(spec.spatial_scale)
    if Fraction(float(np.float32(float(scale)))) != scale:
        raise NoOnnxForm(f"spatial_scale={scale}: ONNX {op}'s spatial_scale attribute is a 32-bit float, which "
                         f"does not hold {scale} (a runtime would scale the boxes by another number); give a "
                         "scale float32 holds exactly (a dyadic rational such as 1/2 or 1/16)")
    return float(scale)


def _rois(spec: Any, op: str, dtype: np.dtype[Any]) -> np.ndarray:
    """The boxes as the (K, 5) array ONNX's ``rois`` reads in X's dtype, where it holds them exactly."""
    rois = np.array([[float(v) for v in box] for box in spec.boxes], dtype=dtype)
    for k, box in enumerate(spec.boxes):
        for i, v in enumerate(box):
            if Fraction(float(rois[k, i])) != Fraction(v):
                what = "batch index" if i == 0 else "coordinate"
                raise NoOnnxForm(f"boxes[{k}][{i}] = {v} (a {what}): ONNX {op} reads rois in X's dtype, and "
                                 f"{np.dtype(dtype).name} does not hold {v} (a runtime would read "
                                 f"{float(rois[k, i])!r}); give boxes {np.dtype(dtype).name} holds exactly, or "
                                 "another --dtype")
    return rois


def _roi_align(spec: Any, geometry: Any, qs: dict[str, np.ndarray]) -> OnnxNode:
    out_h, out_w = spec.output_size
    attributes = {"output_height": int(out_h), "output_width": int(out_w),
                  "sampling_ratio": max(int(spec.sampling_ratio), 0),  # ONNX's 0 is symjac's <= 0: adaptive
                  "spatial_scale": _float32_scale(spec, "RoiAlign"), "mode": spec.reduction,
                  "coordinate_transformation_mode": "half_pixel" if spec.aligned else "output_half_pixel"}

    def inputs(dtype: np.dtype[Any]) -> tuple[tuple[str, np.ndarray], ...]:
        rois = _rois(spec, "RoiAlign", dtype)
        return ("rois", np.ascontiguousarray(rois[:, 1:])), ("batch_indices", np.array([b[0] for b in spec.boxes],
                                                                                        dtype=np.int64))

    return OnnxNode("RoiAlign", attributes, ROI_OPSET, tuple(geometry.input_shape), tuple(geometry.output_shape),
                    inputs)


def _roi_pool(spec: Any, geometry: Any, qs: dict[str, np.ndarray]) -> OnnxNode:
    attributes = {"pooled_shape": [int(v) for v in spec.output_size],
                  "spatial_scale": _float32_scale(spec, "MaxRoiPool")}

    def inputs(dtype: np.dtype[Any]) -> tuple[tuple[str, np.ndarray], ...]:
        return (("rois", _rois(spec, "MaxRoiPool", dtype)),)

    return OnnxNode("MaxRoiPool", attributes, ROI_OPSET, tuple(geometry.input_shape), tuple(geometry.output_shape),
                    inputs)


# -- max unpooling -----------------------------------------------------------------------------------
def _max_unpool(spec: MaxUnpool, geometry: Any, qs: dict[str, np.ndarray]) -> OnnxNode:
    indices = np.asarray(qs["indices"], dtype=np.int64)
    x_shape, y_shape = tuple(indices.shape), tuple(np.asarray(qs["y"]).shape)
    default = spec.default_size(x_shape[2:])
    if tuple(y_shape[2:]) != tuple(default):
        raise NoOnnxForm(f"output_size={tuple(y_shape[2:])!r}, not the default {default!r} ((L - 1)·stride + kernel "
                         "- pads): ONNX MaxUnpool's output_shape input is read two ways (onnx.reference and ONNX's own "
                         "backend test test_maxunpool_export_with_output_shape index the default-size output and pad "
                         "it at the end; ONNX Runtime 1.32 indexes the output_shape tensor and refuses one below the "
                         "default), so no backend test states it; give output_size equal to the default, or none")
    plane = int(np.prod(y_shape[2:], dtype=np.int64))
    if spec.flat == "plane":  # the same cell of the same output, counted over the whole tensor
        planes = np.arange(x_shape[0] * x_shape[1], dtype=np.int64).reshape(x_shape[:2] + (1,) * (len(x_shape) - 2))
        indices = indices + planes * plane
    flat = indices.reshape(-1)
    if spec.write == "first" and np.unique(flat).size < flat.size:
        raise NoOnnxForm("write='first' with a repeated index: ONNX MaxUnpool (ONNX Runtime and onnx.reference) "
                         "keeps the last write to an output cell; give write='last', or indices without repeats")
    attributes = {"kernel_shape": list(spec.kernel), "strides": list(spec.stride or spec.kernel),
                  "pads": [int(lo) for lo, _ in spec.padding] + [int(hi) for _, hi in spec.padding]}
    extra: tuple[tuple[str, np.ndarray], ...] = (("I", indices),)
    if spec.output_size is not None:
        extra += (("output_shape", np.array(y_shape, dtype=np.int64)),)

    def inputs(dtype: np.dtype[Any]) -> tuple[tuple[str, np.ndarray], ...]:
        return extra

    return OnnxNode("MaxUnpool", attributes, OPSET, x_shape, y_shape, inputs)


#: The export's rule table, keyed by operator object (max unpooling, a scatter with no pooling
#: operator, by its spec class): an operator without a rule has no ONNX form here.
RULES: dict[Any, Callable[..., OnnxNode]] = {
    AVG: _window("AveragePool", "GlobalAveragePool", _average),
    MAX: _window("MaxPool", "GlobalMaxPool", _max),
    LP: _window("LpPool", None, _lp),
    ROI_ALIGN: _roi_align,
    ROI_ALIGN_MAX: _roi_align,
    ROI_POOL: _roi_pool,
    MaxUnpool: _max_unpool,
}


def onnx_node(spec: Any, geometry: Any, qs: dict[str, np.ndarray] | None = None) -> OnnxNode:
    """The ONNX node computing ``spec`` on ``geometry``'s input (max unpooling: at ``qs["indices"]``,
    its output ``qs["y"]``).

    Raises:
      NoOnnxForm: the spec has no ONNX equivalent; the message names the setting and what would be valid.
    """
    if type(spec) in RULES:
        key: Any = type(spec)
    else:
        from symjac.pool._ops import operator_of

        key = operator_of(spec)
    if key not in RULES:
        raise NoOnnxForm(f"{type(spec).__name__} ({key!r}) has no ONNX operator with its semantics; ONNX backend "
                         "tests are written for AveragePool, MaxPool, LpPool, their global forms, RoiAlign, "
                         "MaxRoiPool and MaxUnpool")
    return RULES[key](spec, geometry, qs or {})
