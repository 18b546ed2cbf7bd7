"""The analytic tile model (no LLVM build): register budget, divisibility, the chosen tiles, and
the template's fallback config for the layer benchmark's layers."""

import dataclasses

import pytest
import tvm
from tvm import autotvm, te

from tvm_fuse.bench import bench_layers
from tvm_fuse.schedules import conv2d_nhwc_fused as fast
from tvm_fuse.schedules import packing, tiling
from tvm_fuse.spec import KernelSpec, TensorSpec


@pytest.mark.parametrize("lanes", [4, 8, 16])
def test_register_tiles_fit_the_register_file(lanes):
    machine = tiling.machine_for(lanes)
    tiles = tiling.register_tiles(machine, wo=56, co_vectors=8)
    assert tiles
    for owb, ocb in tiles:
        # accumulators + the operands held (the smaller set) + one streamed operand
        assert owb * ocb + min(owb, ocb) + 1 <= machine.vregs
        assert 8 % ocb == 0


def test_avx2_resnet_layers_get_a_latency_hiding_tile():
    """3 px x 4 vectors: 12 accumulators, 3 broadcasts held, the weights streamed (16 ymm)."""
    machine = tiling.machine_for(8)
    l1 = tiling.choose_tiles(machine, wo=56, co_vectors=8, ci=64)
    assert l1 == tiling.Tiles(3, 4, 64) and l1.vector_outer
    assert tiling.choose_tiles(machine, wo=14, co_vectors=32, ci=256) == tiling.Tiles(3, 4, 256)


def test_avx2_two_vector_layers_keep_the_weights_in_registers():
    tiles = tiling.choose_tiles(tiling.machine_for(8), wo=56, co_vectors=2, ci=64)
    assert tiles == tiling.Tiles(6, 2, 64) and not tiles.vector_outer


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
    l4 = tiling.choose_tiles(machine, wo=7, co_vectors=64, ci=512, ho=7, window=9)
    assert l4.flat and l4.owb * l4.ocb >= 10  # 49 pixels in tiles of 5: 1 wasted, not 21
    assert tiling.choose_tiles(machine, wo=14, co_vectors=32, ci=256, ho=14, window=9).flat
    assert not tiling.choose_tiles(machine, wo=56, co_vectors=8, ci=64, ho=56, window=9).flat
    one_row = tiling.choose_tiles(machine, wo=7, co_vectors=64, ci=512, window=9)
    assert not one_row.flat  # one row: Wo tiles


def test_ragged_co_takes_the_flat_tile_on_every_simd_width():
    """A Co padded to whole vectors must not be computed where it is stored (scalar tail)."""
    for lanes in (8, 16):
        machine = tiling.machine_for(lanes)
        assert not tiling.choose_tiles(machine, wo=48, co_vectors=2, ci=24, ho=48).flat
        assert tiling.choose_tiles(machine, wo=48, co_vectors=2, ci=24, ho=48, ragged_co=True).flat
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


#: Zen 5's AVX-512 machine with its caches: 48 KiB, 12-way L1d (4 KiB a way), 1 MiB L2.
ZEN5 = tiling.Machine(
    lanes=16,
    fma_lanes=16,
    vregs=32,
    l2_weight_model=True,
    streaming_spill=0,
    flat_streams=True,
    weights_fit_l2=True,
    l1_bytes=48 * 1024,
    l1_ways=12,
    l2_bytes=1024 * 1024,
    memory_speed=tiling.ZEN5_MEMORY_SPEED,
)


@pytest.mark.parametrize(
    "pixel_stride, owb, ocb, fits",
    [
        (4096, 10, 2, True),  # 10 pixels in one set, plus 2 weight streams: the 12 ways
        (4096, 11, 2, False),
        (4096, 14, 2, False),  # ResNet-50's 1x1 convs on 14x14x1024 before the rule
        (4096, 7, 4, True),
        (8192, 11, 2, False),  # 8 KiB apart: one set as well
        (2048, 14, 2, True),  # two sets of 7
        (2048, 16, 4, True),
        (3 * 4, 16, 4, True),  # an image's 3 channels: every pixel in its own line
        (None, 16, 4, True),  # no stride given: no rule
    ],
)
def test_a_tiles_streams_must_fit_the_ways_of_one_l1_set(pixel_stride, owb, ocb, fits):
    assert tiling.fits_l1_sets(ZEN5, pixel_stride)(owb, ocb) is fits


@pytest.mark.parametrize(
    "ho, ci, stride, tiles",
    [
        (14, 1024, 1, tiling.Tiles(7, 2, 1024)),  # was 14 x 2: 14 pixels in one set
        (14, 512, 2, tiling.Tiles(7, 2, 512)),  # 28x28x512 at stride 2: 4 KiB apart too
        (14, 256, 1, tiling.Tiles(14, 2, 256)),  # 1 KiB apart: four sets, unchanged
        (7, 2048, 1, tiling.Tiles(7, 2, 2048)),  # 7 pixels fit already
    ],
)
def test_zen5_narrows_the_tiles_of_1x1_convs_whose_pixels_share_an_l1_set(ho, ci, stride, tiles):
    """ResNet-50's 1x1 convs (Co 256: 16 vectors): the rule narrows the Wo tile, and leaves the
    choice of Wo tiles over flat ones as it was (flat 6 x 4 scores higher than 7 x 2)."""
    layer = dict(wo=ho, co_vectors=16, ci=ci, ho=ho, window=1)
    assert tiling.choose_tiles(ZEN5, **layer, pixel_stride=stride * ci * 4) == tiles
    assert not tiling.choose_tiles(ZEN5, **layer).flat  # the same kind without the rule


def test_the_l1_ways_come_from_sysfs_else_the_default(monkeypatch):
    monkeypatch.setattr(tiling, "_host_cache_field", lambda level, name: "12")
    tiling.host_l1d_ways.cache_clear()
    assert tiling.host_l1d_ways() == 12
    for unusable in (None, "0", "1"):  # unknown, fully associative, direct-mapped: no tile fits
        monkeypatch.setattr(tiling, "_host_cache_field", lambda level, name, ways=unusable: ways)
        tiling.host_l1d_ways.cache_clear()
        assert tiling.host_l1d_ways() == tiling.DEFAULT_L1_WAYS
    tiling.host_l1d_ways.cache_clear()


def test_avx2_and_the_host_l1():
    assert not tiling.machine_for(8).l2_weight_model
    assert tiling.host_l1d_bytes() >= 16 * 1024


@pytest.mark.parametrize(
    "amd, splits, model, spill, fma_lanes, memory_speed",
    [
        (False, False, True, 1, 16, tiling.INTEL_AVX512_MEMORY_SPEED),
        (True, True, False, 1, 8, 1.0),
        (True, False, True, 0, 16, tiling.ZEN5_MEMORY_SPEED),
    ],
    ids=["intel", "zen4", "zen5"],
)
def test_the_avx512_machine_depends_on_the_kind_of_core(
    amd, splits, model, spill, fma_lanes, memory_speed, monkeypatch
):
    """Intel: the L2 weight model, one register spilled; Zen 4 (512-bit FMAs split in two):
    8 lanes per pipe, the base model; Zen 5: 16 lanes, the model without a spill, the weight
    slice kept within L2; Zen 5 and Intel: twice Zen 3's memory speed; Intel: the Winograd GEMM
    prefetches into L2 only."""
    host_is(monkeypatch, amd, splits)
    machine = tiling.machine_for(16)
    assert (machine.l2_weight_model, machine.streaming_spill) == (model, spill)
    assert machine.fma_lanes == fma_lanes
    assert machine.weights_fit_l2 == machine.flat_streams == (amd and not splits)
    assert machine.memory_speed == memory_speed
    assert machine.prefetch_into_l1 == amd
    assert not tiling.machine_for(8).l2_weight_model
    assert tiling.machine_for(8).prefetch_into_l1


def host_is(monkeypatch, amd: bool, splits: bool = False) -> None:
    """Make the tile model read this kind of host."""
    monkeypatch.setattr(tiling, "host_is_amd", lambda: amd)
    monkeypatch.setattr(tiling, "host_splits_avx512", lambda: splits)


def machine_has(monkeypatch, **facts) -> None:
    """Make the tile model's machine (``tiling.machine_for``) have these ``Machine`` facts."""
    base = tiling.machine_for
    monkeypatch.setattr(
        tiling, "machine_for", lambda lanes: dataclasses.replace(base(lanes), **facts)
    )


def test_a_zen4_host_is_told_by_its_cpu_family(monkeypatch):
    tiling.host_splits_avx512.cache_clear()
    monkeypatch.setattr(tiling, "host_is_amd", lambda: True)
    for family, splits in (("25", True), ("26", False)):
        monkeypatch.setattr(tiling, "_host_cpuinfo", lambda name, f=family: {f})
        assert tiling.host_splits_avx512() is splits
        tiling.host_splits_avx512.cache_clear()
    monkeypatch.setattr(tiling, "host_is_amd", lambda: False)
    assert not tiling.host_splits_avx512()  # an Intel family 25 does not exist; not AMD's
    tiling.host_splits_avx512.cache_clear()


def test_host_vendor_is_read_from_cpuinfo():
    with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as cpuinfo:
        vendors = {line.split(":", 1)[1].strip() for line in cpuinfo if line.startswith("vendor_id")}
    assert tiling.host_is_amd() is (vendors == {"AuthenticAMD"})


def avx2_with_l2(l2_bytes):
    return dataclasses.replace(tiling.machine_for(8), l2_bytes=l2_bytes)


def test_avx2_tile_weights_stay_within_l2():
    """512->512 3x3: 4 vectors would stream 590 KB of weights per tile; 2 vectors, 295 KB."""
    machine = avx2_with_l2(512 * 1024)
    l4 = tiling.choose_tiles(machine, wo=7, co_vectors=64, ci=512, ho=7, window=9)
    assert l4.ocb == 2
    assert tiling.weight_slice_bytes(machine, 9 * 512, l4.ocb) <= machine.l2_bytes
    assert tiling.choose_tiles(machine, wo=14, co_vectors=32, ci=256, ho=14, window=9).ocb == 4


@pytest.mark.parametrize(
    "hw, ci, co_vectors, stride, takes_l2_tile",
    [
        (7, 2048, 32, 1, True),  # 1x1 on 7x7: 49 pixels in 7 tiles of 7 x 4, a register spilled
        (7, 1024, 128, 2, True),
        (7, 160, 64, 1, False),  # its 4-vector slice (40 KB) fits L1: no weight streams
        (14, 1024, 16, 1, False),  # 7 x 4 scores only 1.05x the base model's 6 x 4 here
    ],
)
def test_intel_flat_tiles_take_the_l2_model_where_it_scores_clearly_higher(
    hw, ci, co_vectors, stride, takes_l2_tile, monkeypatch
):
    """Intel AVX-512 scores flat tiles by the base model, but takes the L2 weight model's flat
    tile (7 x 4 on these layers) where that model scores it ``SPILLING_FLAT_GAIN`` above the base
    model's choice."""
    host_is(monkeypatch, amd=False)
    machine = dataclasses.replace(
        tiling.machine_for(16), l1_bytes=48 * 1024, l1_ways=12, l2_bytes=2 * 1024 * 1024
    )
    layer = dict(wo=hw, co_vectors=co_vectors, ci=ci, ho=hw, pixel_stride=stride * ci * 4)
    tiles = tiling.choose_tiles(machine, **layer)
    base = tiling.choose_tiles(dataclasses.replace(machine, l2_weight_model=False), **layer)
    assert tiles.flat and base.flat
    assert (base.owb, base.ocb) != (7, 4)
    assert (tiles.owb, tiles.ocb) == ((7, 4) if takes_l2_tile else (base.owb, base.ocb))


def test_avx2_flat_margin_needs_the_output_in_l2():
    """6 x 2 at 56x56 (flat gains 7.1 %): flat while the 200 KB output fits L2, else Wo tiles."""
    layer = dict(wo=56, co_vectors=2, ci=24, ho=56, window=9)
    assert tiling.choose_tiles(avx2_with_l2(512 * 1024), **layer).flat
    assert not tiling.choose_tiles(avx2_with_l2(128 * 1024), **layer).flat


# -- the template's fallback config: the model's tiles, through the spec ------------------------
#: (owb, ocb, flat, Ci block) the template chooses for the layer benchmark's layers (L1d 32 KiB,
#: L2 512 KiB) by SIMD lanes and the host's vendor (AMD's AVX-512 cores: no L2 weight model); a
#: change here changes speed.
LAYER_TILES = {
    ("stem", 8): (3, 4, 0, 3),
    ("l1", 8): (3, 4, 0, 64),
    ("seed", 8): (3, 4, 1, 64),
    ("l2", 8): (3, 4, 1, 128),
    ("l3", 8): (3, 4, 1, 256),
    ("l4", 8): (5, 2, 1, 512),  # 3 x 4 would stream 590 KB of weights per tile: over L2
    ("down", 8): (3, 4, 0, 64),
    ("stem", 16): (14, 2, 0, 3),
    ("l1", 16): (7, 4, 0, 64),
    ("seed", 16): (7, 4, 0, 64),
    ("l2", 16): (7, 4, 0, 128),
    ("l3", 16): (6, 4, 1, 256),
    ("l4", 16): (7, 4, 1, 512),  # the L2 weight model's flat tile: 49 pixels in 7 tiles
    ("down", 16): (4, 4, 0, 64),
    ("stem", "zen4"): (6, 4, 0, 3),
    ("l1", "zen4"): (4, 4, 0, 64),
    ("seed", "zen4"): (4, 4, 0, 64),
    ("l2", "zen4"): (4, 4, 0, 128),
    ("l3", "zen4"): (6, 4, 1, 256),
    ("l4", "zen4"): (5, 4, 1, 512),
    ("down", "zen4"): (4, 4, 0, 64),
    # 2 vectors x 14 px where the weights stream from L2; l4's 4-vector slice would overflow it
    ("stem", "zen5"): (6, 4, 0, 3),
    ("l1", "zen5"): (14, 2, 0, 64),
    ("seed", "zen5"): (14, 2, 0, 64),
    ("l2", "zen5"): (14, 2, 0, 128),
    ("l3", "zen5"): (14, 2, 0, 256),
    ("l4", "zen5"): (7, 2, 0, 512),
    ("down", "zen5"): (4, 4, 0, 64),
}
#: The target of each column, whether its host is AMD's and splits 512-bit FMAs, its caches.
SMALL_CACHES = dict(l1_bytes=32 * 1024, l1_ways=8, l2_bytes=512 * 1024)
TARGETS = {
    8: ("llvm -mcpu=znver3", True, False, SMALL_CACHES),
    16: ("llvm -mcpu=skylake-avx512", False, False, SMALL_CACHES),
    "zen4": ("llvm -mcpu=znver4", True, True, SMALL_CACHES),
    "zen5": (
        "llvm -mcpu=znver5", True, False, dict(l1_bytes=48 * 1024, l1_ways=12, l2_bytes=1024 * 1024)
    ),
}


@pytest.mark.parametrize(
    "layer, column", LAYER_TILES.keys(), ids=[f"{n}-{c}" for n, c in LAYER_TILES]
)
def test_template_fallback_is_the_tile_model_for_the_benchmark_layers(layer, column, monkeypatch):
    target_name, amd, splits, caches = TARGETS[column]
    host_is(monkeypatch, amd, splits)
    monkeypatch.setattr(tiling, "host_l2_bytes", lambda: caches["l2_bytes"])
    lanes = 16 if isinstance(column, str) else column
    machine_has(monkeypatch, **caches)
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
    target = tvm.target.Target(target_name)
    task = autotvm.task.create(fast.NAME, autotvm.task.serialize_args(args), target)
    config = autotvm.task.space.FallbackConfigEntity()
    with target:
        task.instantiate(config)
    chosen = (config["owb"].val, config["ocb"].val, config["flat"].val, config["tile_ic"].size[-1])
    assert chosen == LAYER_TILES[layer.name, column]
    assert (config["pad_at_row"].val, config["ic_outside"].val) == (0, 0)  # padded up front
    assert config["vec_outer"].val == int(chosen[0] < chosen[1])  # holds the fewer operands
    # l2-l4: the weight outweighs the input and a third of the L2
    assert config["co_outer"].val == int(layer.name in ("l2", "l3", "l4"))


@pytest.mark.parametrize(
    "data, weight, l2_kib, co_first",
    [
        ((1, 7, 7, 512), (1, 1, 512, 2048), 2048, True),  # ResNet-50's last stage: 4 MiB
        ((1, 14, 14, 256), (3, 3, 256, 256), 2048, True),  # 2.25 MiB of weight
        ((1, 28, 28, 128), (3, 3, 128, 128), 1024, True),  # 576 KiB: over a third of 1 MiB
        ((1, 28, 28, 128), (3, 3, 128, 128), 2048, False),  # under a third of 2 MiB
        ((1, 56, 56, 64), (3, 3, 64, 64), 0, False),
        ((1, 28, 28, 512), (1, 1, 512, 128), 0, False),  # 1.6 MB of input, 256 KB of weight
        ((16, 14, 14, 256), (3, 3, 256, 256), 0, False),  # batch 16: the input outweighs it
    ],
)
def test_co_blocks_go_outside_rows_where_the_weight_outweighs_the_input_and_the_l2(
    data, weight, l2_kib, co_first, monkeypatch
):
    monkeypatch.setattr(tiling, "host_l2_bytes", lambda: l2_kib * 1024)
    assert tiling.co_blocks_outside_rows(KernelSpec.conv(data, weight)) is co_first


def test_a_stem_that_reads_nchw_data_weighs_its_three_channels(monkeypatch):
    """The stem's kernel reads the graph's NCHW input: its channels are not the last dim."""
    monkeypatch.setattr(tiling, "host_l2_bytes", lambda: 0)
    spec = KernelSpec.conv((1, 224, 224, 3), (7, 7, 3, 64), (2, 2), (3, 3, 3, 3))
    nchw = dataclasses.replace(spec, data=TensorSpec((1, 3, 224, 224), "NCHW", "float32"))
    assert nchw.in_channels == 3
    assert tiling.co_blocks_outside_rows(nchw) is False  # 9,408 weights against 150,528 inputs


@pytest.mark.parametrize(
    "data, padding, flat, by_rows",
    [
        ((1, 224, 224, 3), 3, False, False),  # the stem: 0.6 MB padded, up front
        ((1, 56, 56, 64), 1, False, False),  # l1: 0.9 MB
        ((1, 224, 224, 64), 1, False, True),  # 13 MB: row by row
        ((1, 224, 224, 64), 1, True, False),  # a flat tiling always pads up front
        ((1, 224, 224, 64), 0, False, False),  # nothing to pad: the input is read in place
    ],
)
def test_only_large_inputs_are_padded_row_by_row(data, padding, flat, by_rows):
    spec = KernelSpec.conv(data, (3, 3, data[3], 64), (1, 1), (padding,) * 4)
    tiles = tiling.Tiles(owb=4, ocb=4, icb=data[3], flat=flat)
    bytes_ = data[0] * (data[1] + 2 * padding) * (data[2] + 2 * padding) * data[3] * 4
    assert tiling.pads_by_rows(spec, tiles) == by_rows
    assert by_rows == (padding > 0 and not flat and bytes_ > tiling.PAD_UP_FRONT_MAX_BYTES)


@pytest.mark.parametrize(
    "channels, mcpu, want",
    [(24, "znver4", 8), (40, "znver4", 8), (1000, "znver4", 16), (144, "znver4", 16),
     (17, "znver4", 8), (24, "rocketlake", 16), (24, "znver5", 16)],
)
def test_direct_kernel_takes_half_vectors_only_where_they_cost_no_fma_throughput(
    channels, mcpu, want
):
    """Zen 4 retires 8 lanes per FMA pipe and cycle either way, so a Co that 16-lane vectors
    pad by a fifth or more (24 -> 32) takes 8 lanes; one they cover (144) or barely pad
    (1000 -> 1008) keeps 16. Intel's AVX-512 and Zen 5 keep 16 (it would halve their FMA rate)."""
    assert tiling.direct_lanes(channels, 16, mcpu) == want
    assert tiling.direct_lanes(channels, 8, mcpu) == 8  # AVX2: never narrower


@pytest.mark.parametrize(
    "mcpu, splits", [("znver4", True), ("znver5", False), ("znver3", False), ("rocketlake", False)]
)
def test_the_kind_of_core_comes_from_the_targets_cpu(mcpu, splits, monkeypatch):
    monkeypatch.setattr(tiling, "host_splits_avx512", lambda: not splits)  # never asked
    assert tiling.cpu_splits_avx512(mcpu) is splits
    monkeypatch.setattr(tiling, "host_splits_avx512", lambda: splits)
    assert tiling.cpu_splits_avx512("") is splits  # no -mcpu: this machine


@pytest.mark.parametrize(
    "mcpu, layouts",
    [
        ("znver4", ("OHWI8o", "OHWI16o")),
        ("znver5", ("OHWI16o",) * 2),
        ("skylake-avx512", ("OHWI16o",) * 2),
    ],
)
def test_the_strategy_packs_a_co_of_24_for_8_lanes_on_zen4_only(mcpu, layouts):
    from tvm_fuse import strategy  # pylint: disable=import-outside-toplevel

    target = tvm.target.Target(f"llvm -mcpu={mcpu} -num-cores=2")
    for co, layout in zip((24, 144), layouts):
        spec = KernelSpec.conv((1, 56, 56, 144), (1, 1, 144, co))
        assert strategy.preferred_spec(spec, target).weight.layout == layout


@pytest.mark.parametrize(
    "values, prefetches",
    [
        (3 * 3 * 512 * 32, False),  # 3x3x512, two Co vectors of 16: 590 KB, twice over 1 MiB
        (3 * 3 * 256 * 32, True),  # 295 KB
        (2048 * 32, True),  # 1x1x2048: 262 KB
    ],
)
def test_the_next_weight_slice_is_prefetched_where_two_fit_in_l2(values, prefetches, monkeypatch):
    monkeypatch.setattr(tiling, "host_l2_bytes", lambda: 1024 * 1024)
    assert tiling.prefetches_next_slice(values) is prefetches
    # the direct kernel's group: only where its parallel loop takes Co blocks before rows
    assert tiling.prefetches_next_group(values, co_blocks_outside=True) is prefetches
    assert tiling.prefetches_next_group(values, co_blocks_outside=False) is False
