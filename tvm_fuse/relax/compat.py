"""The apache-tvm API the Relax backend uses, in one place: the only module that knows its spelling.

The Relax backend is pinned to apache-tvm 0.27 (``.ci/relax-env``); between 0.25 and 0.27 TIR's
expressions moved to ``tvm.tirx``, its schedule to ``tvm.s_tir``, ``PrimExpr.dtype`` to
``.ty.dtype``, ``relax.Constant`` to ``tvm.ir`` with its value in ``.value``, StructInfo became
``expr.ty``, and ``llvm_get_vector_width`` answers 512 on AVX2 machines. Everything else in
``tvm_fuse.relax`` asks this module. Importing it under the Relay stack (TVM 0.19, no ``tvm.s_tir``)
raises ImportError with the reason.
"""

from __future__ import annotations

import os

import numpy as np
import tvm
from tvm import relax

try:
    from tvm import s_tir, tirx
    from tvm.script import ir_builder as _ir_builder
    from tvm.tirx.script.builder import ir as _script_tir
except ImportError as err:  # TVM 0.19: the Relay stack
    raise ImportError(
        f"tvm_fuse.relax needs apache-tvm 0.27 (Relax + TensorIR), found TVM {tvm.__version__}; "
        "create its venv with .ci/relax-env DIR"
    ) from err

Schedule = s_tir.Schedule
#: TIR written statement by statement (TVMScript's builder): ``with IRBuilder() as ib:`` around
#: ``ScriptTIR``'s frames (``prim_func``, ``parallel``, ``buffer_store``, ...), then ``ib.get()``
IRBuilder = _ir_builder.IRBuilder
ScriptTIR = _script_tir
#: The attribute that lets codegen assume a PrimFunc's buffers do not alias, as
#: ``te.create_prim_func`` spells it. A function written by hand must set it too, under this
#: name: while one PrimFunc of a module lacks it (e.g. carries TVM 0.19's ``tir.noalias``
#: instead), no function of the module is compiled with noalias (the fused conv's inner loop
#: then held a third of its FMAs).
NOALIAS = "tirx.noalias"
#: The attribute by which TVM's own schedulers (dlight's ``ApplyDefaultSchedule``, meta_schedule's
#: task extraction) and ``fallback.ScheduleFallback`` leave a PrimFunc's schedule alone
#: (TVM 0.19 spelled it ``tir.is_scheduled``, which 0.27 does not read).
IS_SCHEDULED = "tirx.is_scheduled"
#: What TVM raises for input or IR it refuses, beside ``ValueError``/``TypeError``: 0.19's
#: ``tvm.TVMError`` is gone in 0.27, whose own errors (``InternalError``, a schedule's
#: ``ScheduleError``) are ``RuntimeError``s
Error = RuntimeError
#: ``relax.Constant`` became ``tvm.ir.expr.Constant`` (``GenericConst``) in 0.27
Constant = getattr(relax, "Constant", None) or tvm.ir.expr.Constant
PrimFunc = tirx.PrimFunc
IntImm = tirx.IntImm

#: fp32 lanes of the x86 vector extensions, widest first
_LANES = (("avx512f", 16), ("avx2", 8), ("sse2", 4))


def has_flag(func, key: str) -> bool:
    """Whether the PrimFunc ``func`` carries the attribute ``key`` (``NOALIAS``,
    ``IS_SCHEDULED``) set true."""
    return func.attrs is not None and bool(func.attrs.get(key, False))


def host_target() -> tvm.target.Target:
    """LLVM for this CPU (``Target.from_device``: this CPU's name and triple) and its cores."""
    config = dict(tvm.target.Target.from_device(tvm.cpu()).export())
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    config["num-cores"] = cores or 1
    return tvm.target.Target({k: v for k, v in config.items() if k not in ("id", "features")})


def as_target(target=None) -> tvm.target.Target:
    """``target`` as a Target: None -> the enclosing ``with target`` or the host's; a dict or a
    plain ``llvm ...`` string as TVM reads it."""
    if isinstance(target, tvm.target.Target):
        return target
    if target is None:
        return tvm.target.Target.current(allow_none=True) or host_target()
    return tvm.target.Target(target)


def is_x86_llvm(target) -> bool:
    triple = str(target.attrs.get("mtriple", "")) if "mtriple" in target.attrs else ""
    return target.kind.name == "llvm" and (not triple or triple.startswith(("x86_64", "i686")))


def num_cores(target) -> int:
    return int(target.attrs["num-cores"]) if "num-cores" in target.attrs else 1


def simd_lanes(target) -> int:
    """fp32 SIMD lanes (VL) of an x86 LLVM target, from LLVM's feature list of its CPU (16 with
    AVX-512F, 8 with AVX2, 4 otherwise); ``llvm_get_vector_width`` says 512 on AVX2 machines."""
    features = tvm.target.codegen.llvm_get_cpu_features(target)
    for feature, lanes in _LANES:
        if feature in features:
            return lanes
    return 4


def expr_dtype(expr) -> str:
    """The dtype of a PrimExpr (``.ty.dtype`` in 0.27, ``.dtype`` before)."""
    ty = getattr(expr, "ty", None)
    return str(ty.dtype) if ty is not None else str(expr.dtype)


def constant_value(expr) -> np.ndarray | None:
    """The NumPy value of a ``relax.Constant``, or None for any other expression."""
    if not isinstance(expr, Constant):
        return None
    value = getattr(expr, "value", None)  # 0.27; .data before
    value = value if value is not None else getattr(expr, "data", None)
    # 0.27's IntImm/FloatImm are Constants too, their value a Python number
    return value.numpy() if hasattr(value, "numpy") else None


def dataflow_readers(func) -> dict:
    """The readers of each var bound in ``func``'s dataflow blocks: ``relax.analysis.udchain``
    over every block (a var read outside its block, a block output, is no ``DataflowVar``)."""
    readers = {}
    for block in func.body.blocks if isinstance(func.body, relax.SeqExpr) else ():
        if isinstance(block, relax.DataflowBlock):
            readers.update(relax.analysis.udchain(block))
    return readers


def constant(value: np.ndarray) -> relax.Constant:
    return relax.const(np.ascontiguousarray(value))


#: Relax's tensor type: ``TensorStructInfo`` before 0.27, ``TensorType`` (``expr.ty``) since
TensorType = getattr(relax, "TensorType", None) or getattr(relax, "TensorStructInfo")


def type_of(expr):
    """The Relax type of an expression (``.ty`` in 0.27, ``.struct_info`` before)."""
    ty = getattr(expr, "ty", None)
    return ty if ty is not None else expr.struct_info


def tensor_shape(expr) -> tuple[int, ...] | None:
    """The static shape of a tensor-valued Relax expression, or None (dynamic, not a tensor)."""
    ty = type_of(expr)
    if not isinstance(ty, TensorType) or ty.shape is None:
        return None
    values = getattr(ty.shape, "values", None)
    if values is None or not all(isinstance(v, IntImm) for v in values):
        return None
    return tuple(int(v) for v in values)


def tensor_dtype(expr) -> str:
    return str(type_of(expr).dtype)


def prim_value(expr) -> float:
    """The number of a scalar argument (``relax.PrimValue`` before 0.27, a FloatImm/IntImm in
    0.27, or a scalar constant)."""
    value = constant_value(expr)
    if value is not None:
        return float(value)
    inner = getattr(expr, "value", expr)  # PrimValue -> its PrimExpr, IntImm -> its number
    return float(getattr(inner, "value", inner))


def target_from_text(text: str | None) -> tvm.target.Target:
    """A target from a command line's ``llvm -mcpu=znver3 -num-cores=2`` (apache-tvm 0.27 no
    longer parses that form: it takes a dict). ``-mcpu=native`` is this CPU; None: the host."""
    if text is None:
        return host_target()
    kind, *options = text.split()
    config = {"kind": kind}
    for option in options:
        key, sep, value = option.lstrip("-").partition("=")
        if not sep:
            raise ValueError(f"target option {option!r} is not -key=value")
        if key == "mcpu" and value == "native":
            value = tvm.target.codegen.llvm_get_system_cpu()
        config[key] = int(value) if value.isdigit() else value
    return tvm.target.Target(config)
