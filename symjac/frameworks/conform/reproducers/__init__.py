"""Reproducers of failing conform cells: ``_write`` (the script of a pool cell), ``_loss`` (of a loss
cell), ``_transforms`` (of a JVP, second-order or vmap cell)."""
