"""The analytic tile model (no LLVM build): register budget, divisibility, the chosen tiles, and
the template's fallback config for the layer benchmark's layers."""

import dataclasses
import sys
from pathlib import Path

import pytest
import tvm
from tvm import autotvm, te

from tvm_fuse.schedules import conv2d_nhwc_fused as fast
from tvm_fuse.schedules import packing, tiling
from tvm_fuse.spec import KernelSpec

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:  # ``benchmarks`` is a folder of the repo, not an installed package
    sys.path.insert(0, str(REPO))

from benchmarks import bench_layers  # noqa: E402


@pytest.mark.parametrize("lanes", [4, 8, 16])
def test_register_tiles_fit_the_register_file(lanes):
    machine = tiling.machine_for(lanes)
    tiles = tiling.register_tiles(machine, wo=56, co_vectors=8)
    assert tiles
    for owb, ocb in tiles:
        assert owb * ocb + ocb + 1 <= machine.vregs  # accumulators + weights + one broadcast
        assert 8 % ocb == 0


def test_avx2_resnet_layers_get_a_latency_hiding_tile():
    machine = tiling.machine_for(8)
    assert tiling.choose_tiles(machine, wo=56, co_vectors=8, ci=64) == tiling.Tiles(6, 2, 64)
    assert tiling.choose_tiles(machine, wo=14, co_vectors=32, ci=256) == tiling.Tiles(5, 2, 256)


def test_avx512_has_room_for_a_wider_tile():
    tiles = tiling.choose_tiles(tiling.machine_for(16), wo=56, co_vectors=8, ci=64)
    assert tiles.owb * tiles.ocb > 12


def test_tiny_width_and_single_vector_still_get_a_tile():
    assert tiling.choose_tiles(tiling.machine_for(8), wo=1, co_vectors=1, ci=3) == tiling.Tiles(
        1, 1, 3
    )


def test_waste_lowers_the_score():
    machine = tiling.machine_for(8)
    assert tiling.tile_score(machine, 7, 2, wo=7) > tiling.tile_score(machine, 7, 2, wo=8)


def test_small_maps_tile_the_flattened_pixel_axis():
    machine = tiling.machine_for(8)
    l4 = tiling.choose_tiles(machine, wo=7, co_vectors=64, ci=512, ho=7)
    assert l4.flat and l4.owb * l4.ocb >= 10  # 49 pixels in tiles of 5: 1 wasted, not 21
    assert tiling.choose_tiles(machine, wo=14, co_vectors=32, ci=256, ho=14).flat
    assert not tiling.choose_tiles(machine, wo=56, co_vectors=8, ci=64, ho=56).flat
    assert not tiling.choose_tiles(machine, wo=7, co_vectors=64, ci=512).flat  # one row: Wo tiles


def test_ragged_co_takes_the_flat_tile_on_every_simd_width():
    """A Co padded to whole vectors must not be computed where it is stored (scalar tail)."""
    for lanes in (8, 16):
        machine = tiling.machine_for(lanes)
        assert not tiling.choose_tiles(machine, wo=56, co_vectors=2, ci=24, ho=56).flat
        assert tiling.choose_tiles(machine, wo=56, co_vectors=2, ci=24, ho=56, ragged_co=True).flat
        one_row = tiling.choose_tiles(machine, wo=7, co_vectors=2, ci=24, ho=1, ragged_co=True)
        assert not one_row.flat


def test_avx512_rows_tile_streams_weights_from_l2_when_they_overflow_l1():
    """l1-like 3x3 layers get 7 px x 4 vectors (28 accumulators: one register spilled)."""
    machine = tiling.Machine(lanes=16, vregs=32, l2_weight_model=True, l1_bytes=48 * 1024)
    assert tiling.choose_tiles(machine, wo=56, co_vectors=4, ci=64, ho=56, window=9) == (
        tiling.Tiles(7, 4, 64)
    )
    base = tiling.Machine(lanes=16, vregs=32, l2_weight_model=False, l1_bytes=48 * 1024)
    assert tiling.choose_tiles(base, wo=56, co_vectors=4, ci=64, ho=56, window=9) == (
        tiling.Tiles(4, 4, 64)
    )


def test_avx512_weights_that_fit_l1_keep_the_base_tile():
    """The stem (7x7x3 weights, 37.6 KB for 4 vectors) and a 1x1 layer: as without the model."""
    with_model, without = (
        tiling.Machine(lanes=16, vregs=32, l2_weight_model=uses, l1_bytes=48 * 1024)
        for uses in (True, False)
    )
    for wo, co_vectors, ci, window in [(112, 4, 3, 49), (28, 8, 64, 1)]:
        layer = dict(wo=wo, co_vectors=co_vectors, ci=ci, ho=wo, window=window)
        assert tiling.choose_tiles(with_model, **layer) == tiling.choose_tiles(without, **layer)


def test_avx2_and_the_host_l1():
    assert not tiling.machine_for(8).l2_weight_model and tiling.machine_for(16).l2_weight_model
    assert tiling.host_l1d_bytes() >= 16 * 1024


# -- the template's fallback config: the model's tiles, through the spec ------------------------
#: (owb, ocb, flat, Ci block) the template chose for the layer benchmark's layers before its
#: arguments became the spec's named fields (L1d 32 KiB); a change here changes speed.
LAYER_TILES = {
    ("stem", 8): (6, 2, 0, 3),
    ("l1", 8): (6, 2, 0, 64),
    ("seed", 8): (6, 2, 0, 64),
    ("l2", 8): (6, 2, 0, 128),
    ("l3", 8): (6, 2, 1, 256),
    ("l4", 8): (5, 2, 1, 512),
    ("down", 8): (6, 2, 0, 64),
    ("stem", 16): (14, 2, 0, 3),
    ("l1", 16): (7, 4, 0, 64),
    ("seed", 16): (7, 4, 0, 64),
    ("l2", 16): (7, 4, 0, 128),
    ("l3", 16): (6, 4, 1, 256),
    ("l4", 16): (5, 4, 1, 512),
    ("down", 16): (4, 4, 0, 64),
}
TARGETS = {8: "llvm -mcpu=znver3", 16: "llvm -mcpu=skylake-avx512"}


@pytest.mark.parametrize(
    "layer, lanes", LAYER_TILES.keys(), ids=[f"{n}-{l}" for n, l in LAYER_TILES]
)
def test_template_fallback_is_the_tile_model_for_the_benchmark_layers(layer, lanes, monkeypatch):
    base_machine = tiling.machine_for
    monkeypatch.setattr(
        tiling, "machine_for", lambda vl: dataclasses.replace(base_machine(vl), l1_bytes=32 * 1024)
    )
    layer = bench_layers.LAYERS[layer]
    spec = KernelSpec.conv(
        (1, layer.hw, layer.hw, layer.cin),
        (layer.kernel, layer.kernel, layer.cin, layer.cout),
        (layer.stride,) * 2,
        (layer.pad,) * 4,
    ).with_epilogue(bias=True, activation="relu")
    spec = dataclasses.replace(spec, weight=packing.packed_weight(spec, lanes))
    data, bias = (
        te.placeholder(t.shape, name=n) for n, t in (("data", spec.data), ("b", spec.bias))
    )
    weight = te.placeholder((layer.kernel, layer.kernel, layer.cin, layer.cout), name="w")
    args = fast.workload_args(spec, data, weight, bias, None)
    target = tvm.target.Target(TARGETS[lanes])
    task = autotvm.task.create(fast.NAME, autotvm.task.serialize_args(args), target)
    config = autotvm.task.space.FallbackConfigEntity()
    with target:
        task.instantiate(config)
    chosen = (config["owb"].val, config["ocb"].val, config["flat"].val, config["tile_ic"].size[-1])
    assert chosen == LAYER_TILES[layer.name, lanes]
    assert (config["pad_at_row"].val, config["ic_outside"].val) == (int(not chosen[2]), 0)
