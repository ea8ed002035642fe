"""``tf.image.crop_and_resize`` (bilinear) as RoI Align: one sample point per bin, boxes moved to its grid.

TensorFlow's kernel (``crop_and_resize_op.cc``) samples crop row i of box ``(y1, x1, y2, x2)``
(normalized) on an ``H x W`` image at::

    in_y = y1·(H - 1) + i·(y2 - y1)·(H - 1)/(crop_h - 1)     (crop_h > 1)
    in_y = (y1 + y2)·(H - 1)/2                               (crop_h = 1)

(x likewise), gives ``extrapolation_value`` where ``in_y`` or ``in_x`` leaves ``[0, H - 1]``, and else
``top + (bottom - top)·y_lerp`` with ``top = tl + (tr - tl)·x_lerp`` (``y_lerp = in_y - floor(in_y)``):
in exact arithmetic the bilinear sum ``(1 - ly)(1 - lx)·tl + (1 - ly)·lx·tr + ly·(1 - lx)·bl + ly·lx·br``.

RoI Align with ``sampling_ratio=1`` and ``aligned=True`` (:class:`symjac.RoiAlign`) samples bin i of a
box ``(Y1, Y2)`` at ``Y1 - 1/2 + (i + 1/2)·b``, ``b = (Y2 - Y1)/crop_h``, interpolating the same four
corners (a point on row ``H - 1`` reads that row with weight 1, as TensorFlow's ``top = bottom``).
With ``a = y1·(H - 1)`` and ``s = (y2 - y1)·(H - 1)/(crop_h - 1)`` (0 for crop_h = 1, and then
``a = (y1 + y2)·(H - 1)/2``), the box

    Y1 = a - s/2 + 1/2,   Y2 = Y1 + crop_h·s

has ``b = s`` and points ``a - s/2 + (i + 1/2)·s = a + i·s = in_y``: the same samples, exactly
(``aligned=True``, not ``False``: the unaligned mode widens a box below one cell, which would move a
point-sized crop). An inverted box (``y2 < y1``, TensorFlow flips the crop) has ``s < 0``: RoI Align's
points walk down as TensorFlow's. Normalized boxes in ``[0, 1]`` keep every point in ``[0, H - 1]``:
no extrapolation happens, so ``extrapolation_value`` never enters; boxes outside ``[0, 1]`` are not
mapped (:class:`Unsupported`). ``method="nearest"`` (``round(in_y)``) is no RoI Align: not mapped.

The derivative with respect to the image is TensorFlow's own (``tf.GradientTape``:
``CropAndResizeGradImage``); the boxes are constants (their gradient is out of scope). TensorFlow
2.21 computes in float32 whatever the image's dtype (its output is float32): a float64 image's crop
carries float32's rounding, beyond float64's bound, so conform leaves float64 out (``limitation``).
"""

from __future__ import annotations

import dataclasses
from fractions import Fraction
from typing import Any

import numpy as np

from symjac.frameworks._adapter import Impl, Unsupported
from symjac.frameworks.keras._tape import TAPE, import_tf, tape
from symjac.pool._spec import RoiAlign


def _axis(lo: Fraction, hi: Fraction, length: int, crop: int) -> tuple[Fraction, Fraction]:
    """(Y1, Y2) of RoI Align's box whose ``crop`` bin centres are TensorFlow's sample points."""
    if crop > 1:
        a, s = lo * (length - 1), (hi - lo) * (length - 1) / (crop - 1)
    else:
        a, s = (lo + hi) * (length - 1) / 2, Fraction(0)
    start = a - s / 2 + Fraction(1, 2)
    return start, start + crop * s


def roi_boxes(image_shape: tuple[int, ...], boxes: Any, box_indices: Any, crop_size: Any) -> tuple[tuple[Any, ...], ...]:
    """TensorFlow's normalized ``boxes`` (rows y1, x1, y2, x2) on an NHWC ``image_shape`` as RoI Align
    boxes (rows batch index, X1, Y1, X2, Y2), exact."""
    _, height, width, _ = image_shape
    out = []
    for k, (row, index) in enumerate(zip(boxes, box_indices)):
        try:
            y1, x1, y2, x2 = (Fraction(float(np.float32(v))) for v in row)  # TensorFlow's float32 boxes
        except (TypeError, ValueError, OverflowError):
            raise Unsupported(f"boxes[{k}]={row!r}: give 4 finite numbers (y1, x1, y2, x2), normalized") from None
        if not all(0 <= v <= 1 for v in (y1, x1, y2, x2)):
            raise Unsupported(f"boxes[{k}]={row!r}: a coordinate outside [0, 1] samples outside the image, where "
                              "TensorFlow extrapolates (extrapolation_value) and RoI Align interpolates or reads 0; "
                              "give normalized boxes in [0, 1]")
        (top, bottom), (left, right) = _axis(y1, y2, height, crop_size[0]), _axis(x1, x2, width, crop_size[1])
        out.append((int(index), left, top, right, bottom))
    return tuple(out)


def crop_and_resize(image_shape: Any, boxes: Any, box_indices: Any, crop_size: Any, method: str = "bilinear",
                    extrapolation_value: float = 0.0) -> tuple[RoiAlign, Impl]:
    """``tf.image.crop_and_resize`` on an NHWC image of ``image_shape`` and its spec, a
    :class:`symjac.RoiAlign` (``sampling_ratio=1``, ``aligned=True``) over the NCHW view of the image:
    the Impl takes and returns channels-first arrays (it transposes around TensorFlow's NHWC)."""
    tf = import_tf()
    if method != "bilinear":
        raise Unsupported(f"method={method!r}: only 'bilinear' maps onto RoI Align ('nearest' rounds the sample "
                          "point to a cell)")
    shape = tuple(int(v) for v in image_shape)
    if len(shape) != 4:
        raise Unsupported(f"image_shape={image_shape!r}: tf.image.crop_and_resize takes (N, H, W, C)")
    size = tuple(int(v) for v in crop_size)
    if len(size) != 2 or min(size) < 1:
        raise Unsupported(f"crop_size={crop_size!r}: give (crop_height, crop_width), each >= 1")
    roi = roi_boxes(shape, boxes, box_indices, size)
    spec = RoiAlign(size, boxes=roi, sampling_ratio=1, aligned=True)
    box_list = [[float(v) for v in row] for row in boxes]
    index_list = [int(v) for v in box_indices]

    def call(t: Any) -> Any:
        image = tf.transpose(t, [0, 2, 3, 1])
        y = tf.image.crop_and_resize(image, tf.constant(box_list, dtype=tf.float32), tf.constant(index_list, tf.int32),
                                     list(size), method=method, extrapolation_value=extrapolation_value)
        return tf.transpose(tf.cast(y, t.dtype), [0, 3, 1, 2])

    kwargs = {"image_shape": shape, "boxes": box_list, "box_indices": index_list, "crop_size": list(size),
              "method": method, "extrapolation_value": extrapolation_value}
    reproducer = ("import tensorflow as tf\n# x is (N, C, H, W): TensorFlow's image is its NHWC transpose\n" +
                  TAPE.format(call=f"tf.transpose(tf.image.crop_and_resize(tf.transpose(xt, [0, 2, 3, 1]), "
                                   f"{box_list!r}, {index_list!r}, {list(size)!r}), [0, 3, 1, 2])"))
    impl = tape(call, "tf.image.crop_and_resize", kwargs, reproducer)
    return spec, dataclasses.replace(_first_order(impl), modes={k: _first_order(v) for k, v in impl.modes.items()})


#: What TensorFlow 2.21 lacks for the op: its gradient's own gradient (forward mode in TF differentiates
#: the backward, and the second derivative too) and a pfor converter for its gradient.
LACKS = {"jvp": "TensorFlow registers no gradient for CropAndResizeGradBoxes (LookupError): no forward mode "
                "(ForwardAccumulator differentiates the backward) for tf.image.crop_and_resize",
         "double_backward": "TensorFlow registers no gradient for CropAndResizeGradImage/GradBoxes: no second "
                            "derivative of tf.image.crop_and_resize",
         "vmap": "tf.vectorized_map has no pfor converter for CropAndResizeGradImage"}


def _first_order(impl: Impl) -> Impl:
    return dataclasses.replace(impl, jvp=None, double_backward=None, vmap=None, missing={**impl.missing, **LACKS})
