"""The Relax kernel half: the scheduled PrimFuncs against a NumPy conv, every tiling and fallback.

Each case builds ``relax.kernel.prim_func(spec)`` alone with ``tvm.compile`` (the TIR pipeline
``tvm_fuse.relax.build`` uses) and compares it with ``reference.conv2d_nhwc`` (float64) + the
epilogue, within 1e-5 of max |reference|.
"""

import dataclasses
import re

import numpy as np
import pytest
import tvm

from reference import ACTIVATIONS, assert_close, conv2d_nhwc
from tvm_fuse.relax import compat, kernel, tir_pipeline
from tvm_fuse.schedules import packing, tiling, transposes
from tvm_fuse.spec import KernelSpec

#: As ``tvm_fuse.relax.build`` compiles: with the weight prefetch the schedules ask for.
PIPELINE = tir_pipeline.NAME

CASES = {
    # name: (data NHWC, kernel, Co, strides, padding (t, l, b, r), dilation)
    "seed_s2": ((1, 28, 28, 16), 3, 32, 2, (1, 1, 1, 1), 1),
    "rows_56": ((1, 20, 20, 8), 3, 16, 1, (1, 1, 1, 1), 1),
    "1x1": ((1, 14, 14, 32), 1, 64, 1, (0, 0, 0, 0), 1),
    "1x1_s2": ((1, 14, 14, 16), 1, 32, 2, (0, 0, 0, 0), 1),
    "ragged_co": ((1, 9, 9, 16), 3, 20, 1, (1, 1, 1, 1), 1),
    "ci3_stem": ((1, 32, 32, 3), 7, 16, 2, (3, 3, 3, 3), 1),
    "dilation2": ((1, 16, 16, 8), 3, 16, 1, (2, 2, 2, 2), 2),
    "asym_pad": ((1, 11, 13, 8), 3, 8, 1, (0, 1, 2, 1), 1),
    "batch2": ((2, 10, 10, 8), 3, 24, 1, (1, 1, 1, 1), 1),
    "small_7x7": ((1, 7, 7, 64), 3, 64, 1, (1, 1, 1, 1), 1),
    "co_4": ((1, 12, 12, 8), 3, 4, 1, (1, 1, 1, 1), 1),
}


def _spec(case, activation="relu", bias=True, residual=False, alpha=0.1):
    shape, k, co, s, pad, d = CASES[case]
    spec = KernelSpec.conv(shape, (k, k, shape[3], co), (s, s), pad, (d, d))
    act = dict(activation=activation, alpha=alpha if activation == "leaky_relu" else 0.0)
    return spec.with_epilogue(bias, residual, **act)


def _inputs(spec, rng):
    x = rng.standard_normal(spec.data.shape).astype("float32")
    kh, kw = spec.kernel_size
    w = rng.uniform(-0.5, 0.5, (kh, kw, spec.in_channels, spec.out_channels)).astype("float32")
    b = rng.standard_normal(spec.out_channels).astype("float32")
    r = rng.standard_normal(spec.out.shape).astype("float32")
    return x, w, b, r


def _reference(spec, x, w, b, r):
    out = conv2d_nhwc(x, w, spec.strides, spec.padding, spec.dilation)
    if spec.bias is not None:
        out = out + b
    if spec.residual is not None:
        out = out + r
    return ACTIVATIONS[spec.activation](out, spec.alpha)


def _run(func, spec, x, w, b, r, target, pipeline=PIPELINE):
    lib = tvm.compile(tvm.IRModule({"main": func}), target=target, tir_pipeline=pipeline)
    args = [x, packing.pack_hwio(w, spec.lanes) if spec.lanes else w]
    args += [b] if spec.bias is not None else []
    args += [r] if spec.residual is not None else []
    out = tvm.runtime.empty(spec.out.shape, "float32")
    lib(*[tvm.runtime.tensor(a) for a in args], out)
    return out.numpy()


def _packed(spec, lanes):
    return dataclasses.replace(spec, weight=packing.packed_weight(spec, lanes))


@pytest.mark.parametrize("case", sorted(CASES))
def test_fast_kernel_matches_numpy(case, rng, target):
    spec = _packed(_spec(case), compat.simd_lanes(target))
    x, w, b, r = _inputs(spec, rng)
    got = _run(kernel.prim_func(spec), spec, x, w, b, r, target)
    assert_close(got, _reference(spec, x, w, b, r), rel=1e-5)


@pytest.mark.parametrize(
    "case,tiles",
    [
        ("rows_56", tiling.Tiles(owb=3, ocb=2, icb=8)),  # Wo=20 not a multiple of 3
        ("rows_56", tiling.Tiles(owb=1, ocb=2, icb=8)),  # vector_outer (owb < ocb)
        ("rows_56", tiling.Tiles(owb=6, ocb=1, icb=8, flat=True)),
        ("ragged_co", tiling.Tiles(owb=4, ocb=1, icb=16, flat=True)),
        ("batch2", tiling.Tiles(owb=5, ocb=3, icb=8)),
        ("small_7x7", tiling.Tiles(owb=7, ocb=2, icb=64)),
    ],
    ids=["wo_ragged", "vec_outer", "flat", "flat_ragged_co", "batch_rows", "rows_7x7"],
)
def test_every_tiling_matches_numpy(case, tiles, rng, target):
    spec = _packed(_spec(case, residual=True), 8)
    x, w, b, r = _inputs(spec, rng)
    got = _run(kernel.prim_func(spec, tiles), spec, x, w, b, r, target)
    assert_close(got, _reference(spec, x, w, b, r), rel=1e-5)


@pytest.mark.parametrize(
    "activation",
    ["none", "relu", "relu6", "relu6_max_first", "leaky_relu", "sigmoid", "silu"],
)
@pytest.mark.parametrize("residual", [False, True])
def test_each_epilogue_matches_numpy(activation, residual, rng, target):
    spec = _packed(_spec("rows_56", activation, residual=residual), compat.simd_lanes(target))
    x, w, b, r = _inputs(spec, rng)
    x *= 3  # values on both sides of relu6's 6
    got = _run(kernel.prim_func(spec), spec, x, w, b, r, target)
    assert_close(got, _reference(spec, x, w, b, r), rel=1e-5)


@pytest.mark.parametrize("case", ["seed_s2", "ragged_co", "asym_pad", "co_4"])
@pytest.mark.parametrize("bias", [True, False])
def test_generic_fallback_matches_numpy(case, bias, rng, target):
    spec = _spec(case, "silu", bias=bias, residual=True)  # HWIO weight: the generic kernel
    x, w, b, r = _inputs(spec, rng)
    got = _run(kernel.prim_func(spec), spec, x, w, b, r, target)
    assert_close(got, _reference(spec, x, w, b, r), rel=1e-5)


@pytest.mark.parametrize(
    "flat, co_first, loop",
    [
        (False, False, "n_h_c_0_fused"),
        (True, False, "ax0_ax1_0_ax2_0_fused"),
        (False, True, "c_0_n_h_fused"),
        (True, True, "ax2_0_ax0_ax1_0_fused"),
    ],
)
def test_the_parallel_loop_order_follows_the_tile_model(flat, co_first, loop, monkeypatch):
    """As on Relay: (N, Ho, Co blocks) along Wo, (N, pixel tiles, Co blocks) when flat; Co
    blocks first where ``tiling.co_blocks_outside_rows`` says so."""
    monkeypatch.setattr(tiling, "co_blocks_outside_rows", lambda spec: co_first)
    spec = _packed(_spec("seed_s2"), 8)
    tiles = dataclasses.replace(tiling.tiles_for(spec), flat=flat)
    loops = re.findall(r"for (\w+) in T\.parallel", kernel.prim_func(spec, tiles).script())
    assert loop in loops, loops


def test_a_weight_larger_than_its_input_and_the_l2_takes_co_blocks_first():
    """512 -> 512 1x1 on 7x7: 1 MiB of weight against 98 KiB of input, three times more than
    any L2 of the machines here (``tiling.co_blocks_outside_rows``)."""
    spec = _packed(KernelSpec.conv((1, 7, 7, 512), (1, 1, 512, 512), (1, 1), (0,) * 4, (1, 1)), 8)
    assert tiling.co_blocks_outside_rows(spec)
    text = kernel.prim_func(spec).script()
    assert re.search(r"for (c_0_n_h|ax2_0_ax0_ax1_0)_fused in T\.parallel", text), text[:2000]


@pytest.mark.parametrize(
    "case,tiles",
    [
        ("rows_56", tiling.Tiles(owb=3, ocb=2, icb=8)),
        ("ragged_co", tiling.Tiles(owb=4, ocb=1, icb=16, flat=True)),
        ("batch2", tiling.Tiles(owb=5, ocb=3, icb=8)),
        ("batch2", tiling.Tiles(owb=4, ocb=3, icb=8, flat=True)),
    ],
    ids=["rows", "flat_ragged_co", "batch_rows", "batch_flat"],
)
def test_co_blocks_first_computes_the_same(case, tiles, rng, target, monkeypatch):
    monkeypatch.setattr(tiling, "co_blocks_outside_rows", lambda spec: True)
    spec = _packed(_spec(case, residual=True), 8)
    x, w, b, r = _inputs(spec, rng)
    got = _run(kernel.prim_func(spec, tiles), spec, x, w, b, r, target)
    assert_close(got, _reference(spec, x, w, b, r), rel=1e-5)


@pytest.mark.parametrize("flat", [False, True])
def test_a_padded_conv_pads_its_input_up_front_by_rows(flat):
    """As on Relay: one parallel pass over (N, H) pads the input before the conv's loop."""
    spec = _packed(_spec("seed_s2"), 8)
    tiles = dataclasses.replace(tiling.tiles_for(spec), flat=flat)
    loops = re.findall(r"for (\w+) in T\.parallel", kernel.prim_func(spec, tiles).script())
    assert len(loops) >= 2 and loops[0] == "i0_i1_fused", loops


@pytest.mark.parametrize("case", ["seed_s2", "ci3_stem", "rows_56"])
def test_a_large_input_is_padded_row_by_row_inside_the_parallel_loop(
    case, rng, target, monkeypatch
):
    """As on Relay: above ``tiling.PAD_UP_FRONT_MAX_BYTES`` (here: any input) the rows are
    padded where the conv's parallel loop reads them, with the same result."""
    monkeypatch.setattr(tiling, "PAD_UP_FRONT_MAX_BYTES", 0)
    spec = _packed(_spec(case), compat.simd_lanes(target))
    tiles = dataclasses.replace(tiling.tiles_for(spec), flat=False)
    func = kernel.prim_func(spec, tiles)
    loops = re.findall(r"for (\w+) in T\.parallel", func.script())
    assert "i0_i1_fused" not in loops and len(loops) == 1, loops
    x, w, b, r = _inputs(spec, rng)
    got = _run(func, spec, x, w, b, r, target)
    assert_close(got, _reference(spec, x, w, b, r), rel=1e-5)


@pytest.mark.parametrize("packed", [True, False], ids=["fast", "generic"])
@pytest.mark.parametrize("case", ["seed_s2", "small_7x7"])
def test_kernels_are_scheduled_parallel_and_vectorized(case, packed):
    spec = _spec(case)
    spec = _packed(spec, 8) if packed else spec
    func = kernel.prim_func(spec)
    text = func.script()
    assert "T.parallel" in text and "T.vectorized" in text
    assert kernel.spec_of(func) == spec
    assert str(func.attrs["tvm_fuse.kernel"]) == (
        kernel.FAST_NAME if packed else kernel.GENERIC_NAME
    )


@pytest.mark.parametrize("case", ["seed_s2", "ragged_co", "small_7x7", "1x1"])
def test_avx512_layout_and_tiles_compute_right_here_too(case, rng, target):
    """16 lanes (AVX-512's packed weight and the tile model's AVX-512 tiles) on any x86 host:
    LLVM splits the wide vectors where the CPU lacks them, the result must not change."""
    spec = _packed(_spec(case, residual=True), 16)
    x, w, b, r = _inputs(spec, rng)
    got = _run(kernel.prim_func(spec), spec, x, w, b, r, target)
    assert_close(got, _reference(spec, x, w, b, r), rel=1e-5)


def _run_transpose(name, shape, lanes, rng, target):
    """(the kernel's TVMScript, its result, NumPy's) for a random ``shape`` input."""
    func = kernel.boundary_transpose(name, shape, "float32", lanes)
    lib = tvm.compile(tvm.IRModule({"main": func}), target=target, tir_pipeline=PIPELINE)
    x = rng.standard_normal(shape).astype("float32")
    axes = transposes.TRANSPOSES[name].axes
    out = tvm.runtime.empty([shape[a] for a in axes], "float32")
    lib(tvm.runtime.tensor(x), out)
    return func.script(), out.numpy(), x.transpose(*axes)


@pytest.mark.parametrize("name", transposes.TRANSPOSES)
@pytest.mark.parametrize("shape", [(1, 112, 112, 64), (2, 7, 7, 20), (1, 5, 3, 1), (2, 5, 13, 17)])
def test_boundary_transpose_matches_numpy(name, shape, rng, target):
    """Each shape as the host's lanes give it: in registers (whole-vector loads, Shuffles) where
    ``transposes.block_size`` finds a block, tiled (vectorized) elsewhere."""
    lanes = compat.simd_lanes(target)
    script, got, expected = _run_transpose(name, shape, lanes, rng, target)
    in_registers = transposes.block_size(transposes.TRANSPOSES[name].plane(shape), lanes) > 0
    assert "T.parallel" in script
    assert ("T.Shuffle" in script) == in_registers
    assert ("T.vectorized" in script) == (not in_registers)
    np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize("lanes", [16, 8, 4])
@pytest.mark.parametrize(
    "name, shape",
    [
        ("nhwc_to_nchw", (1, 4, 32, 64)),
        ("nhwc_to_nchw", (2, 3, 56, 24)),  # blocks of 8, rows 56 = 3 x 16 + 8
        ("nhwc_to_nchw", (1, 7, 7, 48)),  # 7 = 4 + 3
        ("nhwc_to_nchw", (1, 7, 7, 512)),  # split by channel groups, H*W = 49 = 3 x 16 + 1
        ("nhwc_to_nchw", (2, 3, 5, 128)),  # the same, H*W = 15 = 8 + 7 at 16 lanes
        ("nhwc_to_nchw", (1, 2, 9, 16)),  # a one-row tail
        ("nchw_to_nhwc", (1, 20, 3, 16)),  # rows C = 20 = 16 + 4
        ("nchw_to_nhwc", (2, 24, 3, 56)),
    ],
)
def test_register_transpose_matches_numpy(name, shape, lanes, rng, target):
    """The in-register kernel (the Relay backend's, written here with the script builder) at 16, 8
    and 4 lanes (LLVM splits vectors wider than the host's), whole and partial blocks, batch 2;
    its vectors live in variables, no buffer is allocated."""
    script, got, expected = _run_transpose(name, shape, lanes, rng, target)
    assert "T.Shuffle" in script and "T.parallel" in script and "alloc" not in script
    np.testing.assert_array_equal(got, expected)
