"""Seed 000: average pooling, kernel 2, stride 1, SAME padding on [[1, 2], [3, 4]].

Prints the exact forward and the exact input gradient for dy = ones and for
dy = [[1, -2], [3, 4]], and the window each output reads.
"""

import symjac

spec = symjac.Pool("avg", 2, stride=1, padding="same")
x = [[1, 2], [3, 4]]

geometry = symjac.resolve(spec, (2, 2))
print("pads (low, high) per axis:", geometry.pads)
print("valid cells per window:   ", geometry.valid.sum(axis=1).tolist())
print("forward expressions:\n", symjac.expressions(spec, (2, 2)))
print("forward:\n", symjac.forward(spec, x))
print("exact gradient, dy = ones:\n", symjac.vjp(spec, x, [[1, 1], [1, 1]]))
print("exact gradient, dy = [[1, -2], [3, 4]]:\n", symjac.vjp(spec, x, [[1, -2], [3, 4]]))
