"""Benchmarks of tvm_fuse against stock TVM, PyTorch and ONNX Runtime, installed as tvm_fuse.bench.

``fma_peak`` measures the machine's fp32 FMA peak, ``bench_layers`` seven conv+BN+ReLU layers,
``bench_models`` ResNet-18/50, ``bench_onnx`` whole ONNX models (MobileNet-v2, ResNets) on one
file against stock TVM and ONNX Runtime, ``bench_tuning`` the analytic default against AutoTVM and ``zoo``
the correctness of every relay.testing network. ``common`` holds the shared timing, checking,
table and JSON code; ``peers`` builds the PyTorch and ONNX Runtime peers. Run one with
``tvm-fuse bench SUITE`` or ``python -m tvm_fuse.bench.SCRIPT``; results go under the current
directory (``RESULTS``), never into the installed package.
"""

from pathlib import Path

#: Where results go unless ``--results DIR`` says otherwise: under the current directory, never
#: inside the (possibly installed, read-only) package.
RESULTS = Path("bench-results")
