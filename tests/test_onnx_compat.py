"""The ``onnx.mapping`` shim: the tables TVM 0.19 reads, and an ONNX model imported by TVM on
whatever onnx is installed, checked against ONNX Runtime.

On an onnx that still ships ``onnx.mapping`` (<= 1.18) the shim's tables are compared with it;
on a newer one the shim is what makes ``relay.frontend.from_onnx`` work at all.
"""

import importlib

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")

from tvm import relay  # noqa: E402

import tvm_fuse  # noqa: E402
from tvm_fuse import onnx_compat, onnx_example, testing  # noqa: E402


def test_tables_are_those_of_onnx_mapping():
    onnx_compat.install()
    mapping = importlib.import_module("onnx.mapping")
    to_np, from_np = onnx_compat.tensor_type_tables()
    if not getattr(mapping, "FROM_TVM_FUSE", False):  # an onnx that has its own: the same tables
        assert dict(mapping.TENSOR_TYPE_TO_NP_TYPE) == to_np
        assert dict(mapping.NP_TYPE_TO_TENSOR_TYPE) == from_np
    # the ONNX spec's type codes: FLOAT 1, BOOL 9, INT64 7, BFLOAT16 16
    assert to_np[1] == np.float32 and to_np[7] == np.int64 and to_np[9] == np.bool_
    assert to_np[16] == np.float32  # NumPy has no bfloat16: read as float32, as onnx.mapping did
    assert from_np[np.dtype("float32")] == 1 and from_np[np.dtype("bool")] == 9


def test_install_gives_tvm_the_tables():
    onnx_compat.install()
    from onnx.mapping import (  # pylint: disable=import-outside-toplevel
        NP_TYPE_TO_TENSOR_TYPE,
        TENSOR_TYPE_TO_NP_TYPE,
    )

    assert TENSOR_TYPE_TO_NP_TYPE[onnx.TensorProto.FLOAT] == np.float32
    assert NP_TYPE_TO_TENSOR_TYPE[np.dtype("int32")] == onnx.TensorProto.INT32
    assert onnx_compat.install() is False  # once is enough


def test_onnx_model_through_tvm_matches_onnxruntime(tmp_path):
    ort = pytest.importorskip("onnxruntime")
    path = onnx_example.residual_block(tmp_path / "block.onnx", channels=16, size=16)
    data = np.random.default_rng(0).standard_normal((1, 3, 16, 16)).astype("float32")
    (expected,) = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(
        None, {"data": data}
    )
    onnx_compat.install()
    mod, params = relay.frontend.from_onnx(onnx.load(path), shape={"data": data.shape})
    assert len(tvm_fuse.describe(tvm_fuse.optimize(mod, params))) == 2
    (got,) = testing.run(tvm_fuse.build(mod, params), {"data": data})
    testing.assert_close([got], [expected], rtol=1e-4)
