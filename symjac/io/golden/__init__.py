"""Golden data: ``_write`` (JSON/NPZ/bin, the C header, ``check_expect``), ``_cover`` (``--cover``: a
case at every coverage-plan shape and family), ``_ties`` (tied windows), ``_second`` (second
derivatives), ``_onnx`` (ONNX backend-test layout), ``_bounds`` (each entry's max_abs_error), ``_held``
(values the dtypes hold)."""
