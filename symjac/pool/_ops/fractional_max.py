"""Fractional max pooling: max pooling over windows placed by given pseudo-random samples.

Graham's fractional max pooling (PyTorch ``fractional_max_pool2d/3d``, TensorFlow
``tf.nn.fractional_max_pool``) takes a window's maximum as max pooling does; only the windows
differ: along each axis they start at pseudo-random places, so windows of one layer have
unequal gaps (PyTorch: floor(α) or ceil(α) apart, each k wide) or unequal widths (TensorFlow:
[s_i, s_{i+1}), one cell more when ``overlapping``), and neighbours may share cells. With the
samples (or sequences) given, the operator is deterministic and its Jacobian exact: one-hot
rows off ties, max pooling's Clarke set at ties. The window starts are a geometry
(:func:`symjac.pool._geometry.resolve` computes them from :class:`symjac.FractionalMaxPool`,
exactly, from PyTorch's ``generate_intervals`` or TensorFlow's sequences); every other rule is
max pooling's (:mod:`symjac.pool._ops.max`): the ties and their policies (PyTorch and
TensorFlow route to the first maximal cell in row-major order), the Clarke test, the rounding
model (a max rounds nothing), the lowering, and the conventions at NaN and ±inf.

What a fractional kernel gets wrong, and what shows it here: the interval formula (another
floor, a sample read on the wrong axis) and the last window (PyTorch pins it at L - k) move
windows, which the exact forward and every probed row name by window; an ``overlapping`` flag
ignored drops the shared cells' rows; a tie routed outside the Clarke set or an upstream
gradient not multiplied in shows as for max pooling. The coverage plan
(:func:`symjac.cover`) picks lengths where α is an integer, where it is not (both gaps), where
windows overlap (α < k) and where they skip cells (α > k).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from symjac.pool._ops.max import Max

if TYPE_CHECKING:
    from symjac.pool._symbolic import WindowClass


class FractionalMax(Max):
    """Fractional max pooling (:class:`symjac.FractionalMaxPool`): max pooling's rules on its windows."""

    name = "fractional_max"
    spec_type = "FractionalMaxPool"
    any_geometry = False
    samples: tuple[dict[str, Any], ...] = ({"kernel": 2, "output_size": 2}, {"kernel": (2, 2), "output_size": (2, 3), "samples": (0.5, 0.75)},
               {"sequences": ((0, 1, 3), (0, 2, 3, 4)), "overlapping": True}, {"kernel": (3,), "output_size": (2,)},
               {"sequences": ((0, 2, 3, 5),)})

    def neighbour_changes(self, spec: Any, divisors: tuple[Any, ...]) -> list[dict[str, Any]]:
        """Its own conventions one step away (:func:`symjac.infer`'s hints): TensorFlow's ``overlapping``
        flipped, or PyTorch's samples in the reverse axis order (PyTorch's 2-D op reads them W, H)."""
        if spec.sequences is not None:
            return [{"overlapping": not spec.overlapping}]
        reverse = tuple(spec.samples[::-1])
        return [{"samples": tuple(str(u) for u in reverse)}] if reverse != tuple(spec.samples) else []

    def class_note(self, c: WindowClass) -> str:
        return ", fractional windows"


FRACTIONAL_MAX = FractionalMax()
