"""The ONNX version every one-node model symjac builds for ONNX Runtime declares (the pools' adapter,
:mod:`symjac.frameworks.onnxruntime`, and its losses', :mod:`symjac.frameworks._ort_losses`)."""

OPSET = 22
IR_VERSION = 10  # what onnxruntime >= 1.20 reads; onnx.helper would write the newest IR it knows
