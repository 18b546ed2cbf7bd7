"""``onnx.mapping`` for onnx >= 1.19, which removed it and which TVM 0.19's ONNX importer still reads.

TVM 0.19 reads ``onnx.mapping.TENSOR_TYPE_TO_NP_TYPE`` to type every ONNX tensor (the Relay
importer) and ``NP_TYPE_TO_TENSOR_TYPE`` to write ONNX (``tvm.contrib.target.onnx``); without
them ``relay.frontend.from_onnx`` and tvmc fail on any current onnx. :func:`install` puts a
module with those two tables, built from ``onnx.helper``, at ``onnx.mapping``, and only when
onnx has none: an onnx that still ships the module keeps its own. tvm_fuse installs it before it
loads a model; call it yourself before ``relay.frontend.from_onnx``. It imports no TVM.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import sys
import types

import numpy as np

MODULE = "onnx.mapping"


def tensor_type_tables() -> tuple[dict, dict]:
    """``(TENSOR_TYPE_TO_NP_TYPE, NP_TYPE_TO_TENSOR_TYPE)`` as ``onnx.mapping`` defined them.

    Types NumPy has no dtype for (bfloat16, the float8 types) read as float32, as they did in
    ``onnx.mapping``; the reverse table holds only the types NumPy has.
    """
    from onnx import TensorProto, helper  # pylint: disable=import-outside-toplevel

    to_np, from_np = {}, {}
    for name, code in TensorProto.DataType.items():
        try:
            dtype = np.dtype(helper.tensor_dtype_to_np_dtype(code))
        except (KeyError, TypeError, ValueError):
            continue  # UNDEFINED, or a type this onnx cannot express in NumPy
        if dtype.type.__module__ == "numpy":  # not one of ml_dtypes' bfloat16/float8/int4
            to_np[code] = dtype
            from_np.setdefault(dtype, code)
        elif "FLOAT" in name:
            to_np[code] = np.dtype("float32")
    return to_np, from_np


def install() -> bool:
    """Provide ``onnx.mapping`` if this onnx lacks it; True when the shim was installed."""
    import onnx  # pylint: disable=import-outside-toplevel

    if MODULE in sys.modules or _has_own_mapping():
        return False
    module = types.ModuleType(MODULE, "onnx.mapping tables for TVM 0.19, from tvm_fuse")
    module.__spec__ = importlib.machinery.ModuleSpec(MODULE, None)
    module.FROM_TVM_FUSE = True
    module.TENSOR_TYPE_TO_NP_TYPE, module.NP_TYPE_TO_TENSOR_TYPE = tensor_type_tables()
    sys.modules[MODULE] = module
    onnx.mapping = module
    return True


def _has_own_mapping() -> bool:
    return importlib.util.find_spec(MODULE) is not None
