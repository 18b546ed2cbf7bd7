"""Benchmarks of tvm_fuse against stock TVM, PyTorch and ONNX Runtime (DESIGN.md §5).

``fma_peak`` measures the machine's fp32 FMA peak, ``bench_layers`` the seven conv+BN+ReLU
layers of issue 3, ``bench_models`` ResNet-18/50 (issue 4). ``common`` holds the shared timing,
checking, table and JSON code; ``peers`` builds the PyTorch and ONNX Runtime peers.
"""
