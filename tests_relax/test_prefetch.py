"""The weight prefetch on the Relax backend: ``tvm_fuse.relax.tir_pipeline`` runs
``tvm_fuse.lowering.prefetch_weights`` on the loops the schedules mark, as on Relay.

The direct kernel marks its Ci loop where its parallel loop takes Co blocks first (forced here by
``tiling.co_blocks_outside_rows``), the Winograd GEMM its reduction into L1; each kernel computes
the same as float64 NumPy and as the same kernel compiled with TVM's default pipeline, which
ignores the marks.
"""

import dataclasses
import re

import numpy as np
import pytest
import tvm
from tvm import relax

import tvm_fuse.relax as tfr
from helpers import module, run, tensor_var
from reference import assert_close
from test_kernel import _inputs, _packed, _reference, _run
from test_winograd import winograd_case
from tvm_fuse import lowering
from tvm_fuse.relax import compat, kernel, tir_pipeline
from tvm_fuse.schedules import tiling
from tvm_fuse.spec import KernelSpec

#: a prefetch of the weight, its index, its locality
PREFETCH = re.compile(r"T\.prefetch\(T\.address_of\(weight\w*\[(.*?)\]\), 0, (\d), 1\)")


def _lowered(func, target) -> str:
    """``func`` through the TIR pipeline ``build`` uses, as TVMScript."""
    mod = compat.tirx.transform.BindTarget(target.with_host(target))(tvm.IRModule({"main": func}))
    pipeline, _, _ = compat.tirx.get_tir_pipeline(tir_pipeline.NAME)
    return pipeline(mod)["main"].script()


def _asm(func, target, pipeline) -> str:
    lib = tvm.compile(tvm.IRModule({"main": func}), target=target, tir_pipeline=pipeline)
    return lib.mod.inspect_source("asm")


def _grouped(residual=False):
    """A conv whose Co (64: 8 vectors) makes several groups of the register tile's vectors."""
    spec = KernelSpec.conv((2, 10, 10, 8), (3, 3, 8, 64), (1, 1), (1, 1, 1, 1), (1, 1))
    return _packed(spec.with_epilogue(True, residual, activation="relu"), 8)


@pytest.fixture
def co_first(monkeypatch):
    monkeypatch.setattr(tiling, "co_blocks_outside_rows", lambda spec: True)


@pytest.mark.parametrize("flat", [False, True])
def test_the_direct_kernel_with_co_blocks_first_prefetches_the_next_group(
    flat, co_first, rng, target
):
    spec = _grouped(residual=True)
    tiles = dataclasses.replace(tiling.tiles_for(spec), flat=flat)
    assert spec.weight.shape[0] > tiles.ocb  # a next group to prefetch
    func = kernel.prim_func(spec, tiles)
    text = _lowered(func, target)
    prefetches = PREFETCH.findall(text)
    group = tiles.ocb * 3 * 3 * spec.in_channels * 8
    # each weight vector of a step once, the next group's (``group`` elements ahead), into L2
    assert len(prefetches) == tiles.ocb, prefetches
    assert all(index.endswith(f" + {group}") and loc == "2" for index, loc in prefetches)
    assert "pragma_" not in text and lowering.PRAGMA not in text  # the marks are gone
    assert "prefetcht1" in _asm(func, target, tir_pipeline.NAME)
    x, w, b, r = _inputs(spec, rng)
    want = _reference(spec, x, w, b, r)
    assert_close(_run(func, spec, x, w, b, r, target), want, rel=1e-5)


def test_with_rows_first_the_direct_kernel_does_not_prefetch(target):
    spec = _grouped()
    assert not tiling.co_blocks_outside_rows(spec)
    func = kernel.prim_func(spec)
    assert lowering.PRAGMA not in func.script()
    assert "prefetch" not in _lowered(func, target)


def test_the_prefetching_kernels_accumulators_stay_on_the_stack(co_first, target):
    """apache-tvm puts a ``local`` buffer in a heap workspace, where LLVM, beside a prefetch,
    would store every accumulator at every step (``lowering``)."""
    spec = _grouped()
    text = _lowered(kernel.prim_func(spec), target)
    kept = re.findall(r'T\.alloc_local\(.*annotations=\{"disable_lower_builtin"', text)
    assert len(kept) == 1, re.findall(r"T\.alloc_local\(.*", text)


def test_the_default_pipeline_ignores_the_marks(co_first, rng, target):
    """A plain ``tvm.compile`` of the module (no ``tir_pipeline``) runs the marked kernel as
    it is, without prefetches, with the same result."""
    spec = _grouped(residual=True)
    func = kernel.prim_func(spec)
    assert lowering.PRAGMA in func.script()
    assert "prefetch" not in _asm(func, target, "default")
    x, w, b, r = _inputs(spec, rng)
    got = _run(func, spec, x, w, b, r, target, pipeline="default")
    assert_close(got, _reference(spec, x, w, b, r), rel=1e-5)


def test_the_winograd_gemm_prefetches_into_l1(target):
    spec = winograd_case((1, 14, 14, 64), 64)
    func = kernel.prim_func(spec, cores=2)
    assert lowering.PRAGMA_L1 in func.script()
    text = _lowered(func, target)
    assert PREFETCH.findall(text) and {loc for _, loc in PREFETCH.findall(text)} == {"3"}
    assert "prefetcht0" in _asm(func, target, tir_pipeline.NAME)


def _big_1x1(rng):
    """A 1x1 conv 512 -> 512 on 7x7 + ReLU: its weight (1 MiB) outweighs its input and a third of
    any L2 here, so Co blocks go first and the next group is prefetched. (module, x, want)"""
    w = rng.uniform(-0.05, 0.05, (512, 512, 1, 1)).astype("float32")
    x = rng.standard_normal((1, 512, 7, 7)).astype("float32")
    mod = module(
        [tensor_var("x", x.shape)],
        lambda bb, v: relax.op.nn.relu(relax.op.nn.conv2d(v, relax.const(w))),
    )
    want = np.maximum(np.einsum("oi,nihw->nohw", w[:, :, 0, 0].astype("float64"), x), 0)
    return mod, x, want


def _model_asm(exe) -> str:
    return exe.mod.imports[0].inspect_source("asm")


def test_build_compiles_with_the_prefetch(rng, target):
    mod, x, want = _big_1x1(rng)
    exe = tfr.build(mod, target=target)
    assert "prefetcht1" in _model_asm(exe)
    assert_close(run(exe, x), want, rel=1e-5)


@pytest.mark.parametrize("pipeline", ["tvm_fuse", None])
def test_the_pipeline_in_your_own_compile(pipeline, rng, target):
    """As the README says: the pass in your own ``Sequential``, then ``tvm.compile`` with
    ``tir_pipeline="tvm_fuse"`` prefetches; a plain ``tvm.compile`` runs the same without."""
    mod, x, want = _big_1x1(rng)
    optimized = tvm.transform.Sequential([tfr.pipeline(target)])(mod)
    legalized = relax.transform.LegalizeOps()(optimized)
    options = {"tir_pipeline": pipeline} if pipeline else {}
    exe = tvm.compile(legalized, target=target, **options)
    assert ("prefetcht1" in _model_asm(exe)) == (pipeline is not None)
    assert_close(run(exe, x), want, rel=1e-5)
