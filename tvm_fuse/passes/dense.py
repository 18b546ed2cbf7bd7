"""DenseAsConv: a dense layer becomes a 1x1 conv that the fused kernel runs.

Where it sits: in ``tvm_fuse.pipeline()`` after ``ConvertLayoutNHWC`` and ``FoldConstant`` (so a
bound weight is a constant), before ``FuseConvBiasAct``. A dense layer ``x [N, K] . W^T [K, M]``
is a 1x1 conv of a map of N pixels by K channels into M; at batch 1 it is a matrix-vector
product bound by streaming the weight, which the direct kernel does from its packed
``OHWI{VL}o`` weight, split across the cores by output channels. Stock TVM's ``dense_pack`` took
about twice ONNX Runtime's time on ResNet-50's 2048 -> 1000 classifier (see the README's
"Dense layers"). It rewrites::

    %0 = nn.dense(%x, %W)                        # float32, %x: [N, K], %W: [M, K]
    %1 = add(%0, %b)                              # or nn.bias_add(%0, %b); %b: [M] or [1, M];
                                                  # optional
    %2 = nn.relu(%1)                              # or another ACTIVATION_OPS op; optional
    =>  reshape(nn.relu(add(nn.conv2d(reshape(%x, [1, 1, N, K]), <%W^T as [1, 1, K, M]>,
                                      data_layout="NHWC", kernel_layout="HWIO"),
                            reshape(%b, [M]))), [N, M])

which computes the same numbers, so that the fusion pass fuses the conv, its bias and its
activation into one kernel. A constant weight is transposed in NumPy; one that is still a
variable (params given to ``relay.build`` only) by Relay ops, which ``relay.build`` folds once
it binds the params, as ``PackWeights`` does for a conv's, so the kernels are the same bound or
not. It leaves alone other dtypes, and dense layers whose conv the fast kernel would refuse on
the target (``strategy.fast_path_refusal``, e.g. a tiny output: there stock TVM's dense schedule
is the better one).
"""

from __future__ import annotations

import functools
import itertools
import operator

import numpy as np
import tvm
from tvm import relay
from tvm.relay.dataflow_pattern import DFPatternCallback, is_op, rewrite, wildcard

from .. import strategy
from ..ir_utils import rewrite_functions, static_shape, use_counts
from ..spec import ACTIVATIONS, KernelSpec
from ..target import target_or_current


#: The activations moved in front of the reshape back to [N, M], so that the fusion pass sees
#: them on the conv: the element-wise ops of one input among ``spec.ACTIVATIONS``' Relay forms.
ACTIVATION_OPS = tuple(
    sorted({row.relay_op for row in ACTIVATIONS.values() if row.relay_op and not row.gated})
)


def DenseAsConv(target=None) -> tvm.transform.Pass:  # pylint: disable=invalid-name  (pass style)
    """Rewrite dense layers as 1x1 NHWC convs (see the module docstring)."""

    def transform(mod, _ctx):
        chosen = target_or_current(target)
        # the longest chains first: a shorter form would hide the ops above it
        for activation, bias in itertools.product((True, False), repeat=2):

            def rewrite_function(func, bias=bias, activation=activation):
                return rewrite(_DenseCallback(chosen, bias, activation, func), func)

            mod = rewrite_functions(mod, rewrite_function)
        return mod

    return tvm.transform.module_pass(transform, opt_level=0, name="tvm_fuse.DenseAsConv")


class _DenseCallback(DFPatternCallback):
    """Matches a dense layer in ``func``, with a bias (``with_bias``) or without, then an
    activation (``with_activation``) or not. Types and readers come from the matched ops as
    ``func`` has them (``pre``), the arguments of the rewrite from ``post``."""

    def __init__(self, target, with_bias: bool, with_activation: bool, func):
        super().__init__(require_type=False, rewrite_once=True)
        self.target, self.with_bias, self.with_activation = target, with_bias, with_activation
        self.func, self._counts = func, None
        dense = is_op("nn.dense")(wildcard(), wildcard())
        bias = wildcard()
        core = is_op("add")(dense, bias) | is_op("nn.bias_add")(dense, bias)
        core = core if with_bias else dense
        self.pattern = core
        if with_activation:
            self.pattern = functools.reduce(
                operator.or_, (is_op(name)(core) for name in ACTIVATION_OPS)
            )

    def callback(self, pre, post, node_map):
        index = self._dense_index(post)
        if index is None or self._dense_index(pre) != index:
            return post
        core, dense, bias = self._parts(pre, index)
        sizes = _sizes(dense, bias)
        if core.op.name == "nn.bias_add" and core.attrs.axis not in (1, -1):
            return post  # a bias per sample
        if sizes is None or not self._fast(*sizes) or not self._read_once(core, dense):
            return post
        n, k, m = sizes
        _, dense, bias = self._parts(post, index)
        data, weight = dense.args
        conv = relay.nn.conv2d(
            relay.reshape(data, [1, 1, n, k]), _hwio(weight, k, m), channels=m, kernel_size=1,
            data_layout="NHWC", kernel_layout="HWIO",
        )
        if bias is not None:
            conv = relay.add(conv, relay.reshape(bias, [m]))
        if self.with_activation:  # on the conv's output
            conv = relay.Call(post.op, [conv], post.attrs)
        return relay.reshape(conv, [n, m])

    def _core(self, top):
        return top.args[0] if self.with_activation else top

    def _dense_index(self, top) -> int | None:
        """Which argument of the bias op is the dense layer (0 without a bias), or None."""
        core = self._core(top)
        if not self.with_bias:
            return 0 if _is_dense(core) else None
        candidates = [0] if core.op.name == "nn.bias_add" else [0, 1]
        return next((i for i in candidates if _is_dense(core.args[i])), None)

    def _parts(self, top, index: int):
        """(the bias op or the dense layer, the dense layer, the bias or None) of a match."""
        core = self._core(top)
        if not self.with_bias:
            return core, core, None
        return core, core.args[index], core.args[1 - index]

    def _read_once(self, core, dense) -> bool:
        """Whether each op the rewrite takes in under the matched one has no other reader than
        the next (``core`` and ``dense`` as :meth:`_parts` gives them for ``pre``): one that
        had would need the dense layer's value too, computed a second time."""
        inner = [core] if self.with_activation else []
        inner += [dense] if self.with_bias else []
        if self._counts is None:
            self._counts = use_counts(self.func)
        return all(self._counts[node] == 1 for node in inner)

    def _fast(self, n: int, k: int, m: int) -> bool:
        spec = KernelSpec.dense(n, k, m).with_epilogue(self.with_bias)
        return strategy.fast_path_refusal(spec, self.target) is None


def _is_dense(expr) -> bool:
    return isinstance(expr, relay.Call) and getattr(expr.op, "name", None) == "nn.dense"


def _hwio(weight, k: int, m: int) -> relay.Expr:
    """The ``[M, K]`` dense ``weight`` as the ``[1, 1, K, M]`` HWIO weight of a 1x1 conv."""
    if isinstance(weight, relay.Constant):
        return relay.const(np.ascontiguousarray(weight.data.numpy().T).reshape(1, 1, k, m))
    return relay.reshape(relay.transpose(weight, [1, 0]), [1, 1, k, m])


def _shape(expr) -> tuple[int, ...] | None:
    return static_shape(expr.checked_type)


def _sizes(dense, bias) -> tuple[int, int, int] | None:
    """(N, K, M) of a type-checked float32 ``dense`` layer of 2-D data and a per-unit ``bias``
    ([M] or [1, M], or None), else None: the forms the rewrite takes."""
    data, weight = dense.args
    data_shape, weight_shape = _shape(data), _shape(weight)
    if data_shape is None or weight_shape is None or len(data_shape) != 2:
        return None
    types = [data.checked_type.dtype, weight.checked_type.dtype, dense.checked_type.dtype]
    if set(types) != {"float32"} or len(weight_shape) != 2 or weight_shape[1] != data_shape[1]:
        return None
    (n, k), m = data_shape, weight_shape[0]
    if bias is not None:
        bias_shape = _shape(bias)
        if bias_shape not in ((m,), (1, m)) or bias.checked_type.dtype != "float32":
            return None
    return n, k, m
