"""Losses: spec → SymPy templates (loss, derivative, rounding depth) → exact evaluation."""

#: The size budget of one ``verify_loss`` (and ``check_loss_family`` row): the entries of
#: pred (rows x classes for softmax_ce). The exact evaluation holds each entry's values
#: as 200-bit MPFR numbers, about 1.5-2.2 KB of memory an entry at its peak, and takes
#: 10-30 µs of CPU an entry (benchmarks/cliffs.py), so the default 2^20 is about 2 GB;
#: ``verify_loss`` refuses larger inputs up front with an InputError instead of running
#: out of memory. Raise it here for bigger runs (``symjac.loss.MAX_ELEMENTS = ...``).
#: The derivative of mse, sigmoid_ce or softmax_ce (their options, every reduction, no
#: forward), correct or not, is decided by verify_loss's fast route
#: (:mod:`symjac.verifiers.loss.fast._filter`: ~1-3 µs and under 100 B an entry with the inputs)
#: at any size up to :data:`MAX_FAST_ELEMENTS`, in the exact route's words (a wrong loss
#: scale named); this budget stays for the exact route, which a forward to check, the other
#: kinds and a misbehaving call take, and beyond which they are refused up front.
MAX_ELEMENTS = 2**20

#: The size budget of verify_loss's fast route (see above): 2^24 entries, about 1.1 GB
#: besides the inputs and 25-40 s on one core.
MAX_FAST_ELEMENTS = 2**24
