"""LowerFusedConv (Relax): every call of a ``tvm_fuse.conv2d_nhwc_fused`` composite -> ``call_tir``.

Last pass of the Relax pipeline, after ``FuseConvBiasAct``. For each call it asks the meeting point
which algorithm runs the composite's spec (``relax.strategy.with_algorithm``: Winograd where the
shared cost model expects it to pay, among the tiles the ``algorithm`` and ``precision`` options
allow, ``tvm_fuse.algorithm_options``) and which weight layout that kernel wants on the target
(``relax.strategy.preferred_spec``), and computes that weight: a constant weight with NumPy
(``schedules.packing.pack_hwio``, ``schedules.winograd_weights.transform_hwio``), any other with
Relax ops that ``FoldConstant`` folds once the weight is bound (packing only: a conv whose weight is
not a constant runs direct; a depthwise conv's constant weight is checked for NaN and Inf, as the
Relay backend's ``PackWeights`` does, for ``KernelSpec.finite_weight``). It flattens the bias to
``[Co]`` and calls the scheduled PrimFunc of ``relax.kernel.prim_func`` (one per distinct spec,
planned for the target's cores), which carries the spec. The composite functions are dropped once no
call is left. It refuses nothing: a spec the fast kernel does not take runs the scheduled generic
kernel.

It also gives the graph's NCHW <-> NHWC transposes (``permute_dims(x, [0, 2, 3, 1])`` and
``[0, 3, 1, 2]`` of a 4-D tensor of static shape, which ``ConvertLayoutNHWC`` leaves at the entry
and exit) the Relay backend's cache-blocked kernels (``kernel.boundary_transpose``) on x86 LLVM
targets: the default schedule gathers every output vector from as many cache lines (the exit of
a 112x112x64 map: 1 ms, against a 3 ms conv).
"""

from __future__ import annotations

import collections

import tvm
from tvm import relax

from ..algorithm_options import winograd_tiles
from ..schedules import packing, transposes, winograd_weights
from . import compat, kernel, strategy
from .fuse import COMPOSITE, Chain, spec_of_function


def LowerFusedConv(  # pylint: disable=invalid-name
    target=None, algorithm: str = "auto", precision: str = "default"
) -> tvm.transform.Pass:
    """The pass, for ``target`` (None: the enclosing ``with target``, else this CPU), with the
    Winograd tiles ``algorithm`` and ``precision`` allow."""
    tiles = winograd_tiles(algorithm, precision)

    @tvm.transform.module_pass(opt_level=0, name="tvm_fuse.LowerFusedConv")
    def lower(mod, _ctx):
        lowered = _Lower(mod, compat.as_target(target), tiles).run()
        return relax.transform.DeadCodeElimination()(lowered)

    return lower


def _weight_arg(arg, wanted):
    """The HWIO weight argument in the layout of the ``wanted`` spec (a Winograd spec only for
    a constant weight)."""
    lanes = wanted.lanes
    if lanes is None:
        return arg
    value = compat.constant_value(arg)
    if value is not None and wanted.algorithm == "winograd":
        m, stride = wanted.winograd_tile, wanted.strides[0]
        return compat.constant(winograd_weights.transform_hwio(value, m, lanes, stride))
    if value is not None and wanted.depthwise:
        return compat.constant(packing.pack_depthwise_hwio(value, lanes))
    if value is not None:
        return compat.constant(packing.pack_hwio(value, lanes))
    kh, kw, ci, co = compat.tensor_shape(arg)
    if wanted.depthwise:  # [Kh, Kw, 1, C] -> [C/VL, Kh, Kw, VL]
        arg = relax.op.reshape(arg, (kh, kw, co // lanes, lanes))
        return relax.op.permute_dims(arg, [2, 0, 1, 3])
    co_pad = packing.padded_channels(co, lanes)
    if co_pad != co:
        arg = relax.op.nn.pad(arg, [0, 0, 0, 0, 0, 0, 0, co_pad - co])
    arg = relax.op.reshape(arg, (kh, kw, ci, co_pad // lanes, lanes))
    return relax.op.permute_dims(arg, [3, 0, 1, 2, 4])


def _bias_arg(arg, channels: int):
    value = compat.constant_value(arg)
    if value is not None:
        return compat.constant(value.reshape(channels))
    return relax.op.reshape(arg, (channels,))


@relax.expr_functor.mutator
class _Lower(relax.PyExprMutator):
    def __init__(self, mod, target, tiles):
        super().__init__(mod)
        self.mod_, self.target, self.tiles = mod, target, tiles
        self.kernels = {}  # spec JSON (or transpose, shape, dtype) -> GlobalVar of its PrimFunc
        self.named = collections.Counter()  # kernels added, by name prefix

    def run(self):
        for gv, func in list(self.mod_.functions_items()):
            if isinstance(func, relax.Function) and not _is_composite(func):
                self.builder_.update_func(gv, self.visit_expr(func))
        return self.builder_.get()

    def visit_call_(self, call):
        call = super().visit_call_(call)
        transpose = _boundary_transpose(call)
        if transpose and compat.is_x86_llvm(self.target):
            return self._boundary_transpose(transpose, call)
        func = self.mod_[call.op] if isinstance(call.op, tvm.ir.GlobalVar) else None
        if func is None or not _is_composite(func):
            return call
        spec = spec_of_function(func) or Chain(func).spec
        chain = Chain(func)
        args = dict(zip([p.same_as for p in func.params], call.args))
        by_param = lambda param: next(a for same, a in args.items() if same(param))  # noqa: E731
        weight = by_param(chain.weight)
        value = compat.constant_value(weight)
        spec = strategy.with_algorithm(spec, self.target, self.tiles if value is not None else ())
        wanted = strategy.preferred_spec(spec, self.target)
        if value is not None and wanted.lanes is not None:
            wanted = packing.with_finite_weight(wanted, value)
        tensors = [by_param(chain.data), _weight_arg(weight, wanted)]
        if chain.bias is not None:
            tensors.append(_bias_arg(by_param(chain.bias), spec.out_channels))
        if chain.residual is not None:
            tensors.append(by_param(chain.residual))
        out = compat.TensorType(spec.out.shape, spec.out.dtype)
        return relax.call_tir(self._kernel(wanted), tensors, out)

    def _boundary_transpose(self, transpose: str, call):
        data = call.args[0]
        shape, dtype = compat.tensor_shape(data), compat.tensor_dtype(data)
        key = (transpose, shape, dtype)
        if key not in self.kernels:
            lanes = compat.simd_lanes(self.target)
            func = kernel.boundary_transpose(transpose, shape, dtype, lanes)
            self.kernels[key] = self._add(f"tvm_fuse_{transpose}", func)
        axes = transposes.TRANSPOSES[transpose].axes
        out = compat.TensorType([shape[a] for a in axes], dtype)
        return relax.call_tir(self.kernels[key], [data], out)

    def _kernel(self, spec):
        key = spec.to_json()
        if key not in self.kernels:
            func = kernel.prim_func(spec, cores=strategy.cores(self.target))
            self.kernels[key] = self._add("tvm_fuse_conv2d_nhwc_fused", func)
        return self.kernels[key]

    def _add(self, prefix: str, func):
        """Add ``func`` to the module as ``{prefix}_{i}``, i counting the kernels of ``prefix``."""
        name = f"{prefix}_{self.named[prefix]}"
        self.named[prefix] += 1
        return self.builder_.add_func(func.with_attr("global_symbol", name), name)


def _boundary_transpose(call) -> str | None:
    """The name of the boundary transpose (``schedules.transposes.TRANSPOSES``) that computes
    ``call``, a ``permute_dims`` of a 4-D tensor of static shape; None for any other call."""
    if not (isinstance(call.op, tvm.ir.Op) and call.op.name == "relax.permute_dims"):
        return None
    axes = call.attrs.axes
    shape = compat.tensor_shape(call.args[0])
    if axes is None or shape is None or len(shape) != 4:
        return None
    axes = tuple(int(a) for a in axes)
    return next((name for name, t in transposes.TRANSPOSES.items() if t.axes == axes), None)


def _is_composite(func) -> bool:
    attrs = func.attrs
    return attrs is not None and str(attrs.get("Composite", "")) == COMPOSITE
