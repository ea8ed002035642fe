"""Losses: spec → SymPy templates (loss, derivative, rounding depth) → exact evaluation."""

#: The size budget of one ``verify_loss`` (and ``check_loss_family`` row): the entries of
#: pred (rows x classes for softmax_ce). The exact evaluation holds each entry's values
#: as 200-bit MPFR numbers, about 1.5-2.2 KB of memory an entry at its peak, and takes
#: 10-30 µs of CPU an entry (benchmarks/cliffs.py), so the default 2^20 is about 2 GB;
#: ``verify_loss`` refuses larger inputs up front with an InputError instead of running
#: out of memory. Raise it here for bigger runs (``symjac.loss.MAX_ELEMENTS = ...``).
MAX_ELEMENTS = 2**20
