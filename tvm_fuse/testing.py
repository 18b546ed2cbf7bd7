"""Run a built module and compare it with stock TVM: the check every test and demo makes.

The reference is the *original* module built by stock ``relay.build`` (no tvm_fuse pass), so a
wrong rewrite anywhere in the pipeline shows up as a numeric difference. Also here: what the
tests share, e.g. the AutoTVM workloads a build asks for (:func:`fused_workloads`).
"""

from __future__ import annotations

import numpy as np
import tvm
from tvm import autotvm, relay
from tvm.contrib import graph_executor

from .dispatch import build_context
from .examples import random_inputs
from .op import fused_call, is_fused_call, spec_of_call
from .api import build
from .spec import KernelSpec
from .strategy import TUNABLE_KERNELS
from .target import as_target


#: Tolerance of a whole model against its reference: max |error| <= MODEL_RTOL * max |reference|
#: (fp32 sums in another order, over many layers); a single kernel is held to ``assert_close``'s.
MODEL_RTOL = 1e-4


def run(lib, inputs: dict) -> list[np.ndarray]:
    """Run a ``relay.build`` result on the CPU with ``inputs``; return every output."""
    module = graph_executor.GraphModule(lib["default"](tvm.cpu()))
    module.set_input(**inputs)
    module.run()
    return [module.get_output(i).numpy() for i in range(module.get_num_outputs())]


def build_stock(mod, params=None, target=None, opt_level=3):
    """Stock ``relay.build`` of ``mod`` (the reference implementation), TopHub off."""
    with tvm.transform.PassContext(opt_level=opt_level), build_context():
        return relay.build(mod, target=as_target(target), params=params)


def relative_error(got: np.ndarray, ref: np.ndarray) -> float:
    """max |got - ref| / max |ref|: the error measure of every comparison with a reference."""
    scale = float(np.max(np.abs(ref))) or 1.0
    return float(np.max(np.abs(got.astype("float64") - ref.astype("float64")))) / scale


def assert_close(got, ref, rtol=1e-5):
    """Every output within ``rtol`` of the reference, relative to the reference's max."""
    assert len(got) == len(ref), f"{len(got)} outputs, reference has {len(ref)}"
    for i, (g, r) in enumerate(zip(got, ref)):
        assert g.shape == r.shape, f"output {i}: shape {g.shape}, reference {r.shape}"
        err = relative_error(g, r)
        assert err <= rtol, f"output {i}: relative error {err:.3g} > {rtol:g}"


def assert_same_including_specials(got, ref, rtol=1e-5):
    """NaN where the reference has NaN, the same infinities, finite values within ``rtol``
    (``assert_close``)."""
    np.testing.assert_array_equal(np.isnan(got), np.isnan(ref), err_msg="NaN positions differ")
    np.testing.assert_array_equal(np.isposinf(got), np.isposinf(ref), err_msg="+Inf differs")
    np.testing.assert_array_equal(np.isneginf(got), np.isneginf(ref), err_msg="-Inf differs")
    finite = np.isfinite(ref)
    assert_close([got[finite]], [ref[finite]], rtol)


def assert_matches_stock(mod, params=None, lib=None, rtol=1e-5, target=None):
    """``lib`` (default: ``tvm_fuse.build(mod, params)``) computes what stock ``relay.build``
    of ``mod`` does, on seeded random inputs, within ``rtol``; returns ``lib``."""
    lib = build(mod, params, target) if lib is None else lib
    inputs = random_inputs(mod, params)
    assert_close(run(lib, inputs), run(build_stock(mod, params, target), inputs), rtol)
    return lib


class WorkloadRecorder(autotvm.task.DispatchContext):
    """Notes every AutoTVM workload a build asks a config for, and answers none itself."""

    def __init__(self):
        super().__init__()
        self.workloads = []

    def _query_inside(self, target, workload):
        self.workloads.append(workload)

    def update(self, target, workload, cfg):  # stock alter-layout hooks (dense_pack) call it
        self._old_ctx.update(target, workload, cfg)


def fused_workloads(mod, params=None, **build_options) -> list:
    """The tunable kernels' workloads (direct and Winograd) ``tvm_fuse.build`` asks AutoTVM for,
    once each, in order."""
    with WorkloadRecorder() as recorder:
        build(mod, params, **build_options)
    return list(dict.fromkeys(w for w in recorder.workloads if w[0] in TUNABLE_KERNELS))


def fused_conv_call(data, weight, bias=None, residual=None, **fields) -> relay.Call:
    """A fused call of ``data`` (NHWC) and an HWIO ``weight`` (Relay vars, constants or fused
    calls), its spec derived from their shapes; ``fields``: strides, padding, dilation,
    activation, alpha."""
    conv = {k: fields.pop(k) for k in ("strides", "padding", "dilation") if k in fields}
    spec = KernelSpec.conv(_static_shape(data), _static_shape(weight), **conv)
    spec = spec.with_epilogue(bias is not None, residual is not None, **fields)
    return fused_call(spec, data, weight, bias, residual)


def _static_shape(expr) -> tuple[int, ...]:
    if is_fused_call(expr):
        return spec_of_call(expr).out.shape
    if isinstance(expr, relay.Constant):
        return tuple(expr.data.shape)
    return tuple(int(d) for d in expr.type_annotation.shape)
