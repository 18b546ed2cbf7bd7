"""Benchmarks of tvm_fuse against stock TVM, PyTorch and ONNX Runtime.

``fma_peak`` measures the machine's fp32 FMA peak, ``bench_layers`` seven conv+BN+ReLU layers
(``bench_layers.LAYERS``), ``bench_models`` ResNet-18/50. ``common`` holds the shared timing,
checking, table and JSON code; ``peers`` builds the PyTorch and ONNX Runtime peers.
"""
