"""Losses: spec → SymPy templates (loss, derivative, rounding depth) → exact evaluation."""

#: The size budget of one ``verify_loss`` (and ``check_loss_family`` row): the entries of
#: pred (rows x classes for softmax_ce). The exact evaluation holds each entry's values
#: as 200-bit MPFR numbers, about 1.5-2.2 KB of memory an entry at its peak, and takes
#: 10-30 µs of CPU an entry (benchmarks/cliffs.py), so the default 2^20 is about 2 GB;
#: ``verify_loss`` refuses larger inputs up front with an InputError instead of running
#: out of memory. Raise it here for bigger runs (``symjac.loss.MAX_ELEMENTS = ...``).
#: A correct derivative of mse, sigmoid_ce or softmax_ce (default options, no forward)
#: is decided by verify_loss's fast route (:mod:`symjac.verifiers._loss_fast`: ~1.5 µs
#: and ~65 B an entry) at any size up to :data:`MAX_FAST_ELEMENTS`; this budget stays for
#: the exact route, which every other case and every failing verdict within it take (its
#: findings hold each expected value exactly and name a wrong scale). Beyond it, the fast
#: route reports the entries beyond their bound (each found exactly) as wrong_values.
MAX_ELEMENTS = 2**20

#: The size budget of verify_loss's fast route (see above): 2^24 entries, about 1.1 GB
#: besides the inputs and 25-40 s on one core.
MAX_FAST_ELEMENTS = 2**24
