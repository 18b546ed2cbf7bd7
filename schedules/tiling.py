"""The analytic tile model of the fast kernel: register tile and Ci block from the machine.

The fast schedule (``schedules.conv2d_nhwc_fused``) keeps a register tile of ``owb`` output
pixels along Wo x ``ocb`` vectors of VL output channels as accumulators. Each reduction step
loads ``ocb`` weight vectors and broadcasts ``owb`` input values; the tile holds the smaller of
the two sets in registers and streams the other through one register (``Tiles.vector_outer``),
so the accumulators must fit the vector register file together with ``min(owb, ocb) + 1``
operands, and the more FMAs per load the better. On AVX2 (16 ymm) that admits 3 px x 4 vectors
(12 accumulators + 3 broadcasts + 1 weight, no spill in the assembly), whose 4 FMAs per
broadcast beat 6 x 2's 2: Zen 3 sustains about one broadcast per cycle against two FMAs (8 px x
1 vector runs at 0.46 of the FMA peak), so 6 x 2 has no slack. On Zen 3, 3 x 4 is 4-16 % faster
than 6 x 2 on the stem, l1, seed and 1x1 layers (interleaved A/B, 3 runs); pixels past Wo are
computed and dropped, so a tile that divides Wo (or, for a flat tile, Ho*Wo) wastes nothing;
and at least ``fma_in_flight`` independent accumulators keep both FMA pipes busy. The Ci
reduction is not split by default: inside the register tile a split only breaks the contiguous
weight stream of ``[ky, kx, ci, VL]`` (measured 10-25 % slower on Zen 3); the split stays a knob
for tuning.

On AVX-512 (measured on an Intel rocketlake, 2 cores) a second effect decides the Wo tile:
when a tile's weight slice (Kh*Kw*Ci x ``ocb`` vectors) overflows L1 (the host's L1d, from
sysfs), every weight vector streams from L2 once per tile, so a weight load costs about
``L2_WEIGHT_LOAD_COST`` broadcasts, and a tile one register over the file pays off: for
7 px x 4 vectors (28 accumulators + 4 weights + 1 broadcast = 33 zmm) LLVM spills one
accumulator, one store and one load per 28 FMAs (seen in the assembly), far less than the
weight traffic it saves. That model picks 7 x 4 for l1/seed/l2 of the layer benchmark (5-6 %
faster than the base model's 4 x 4 in an interleaved A/B) and leaves stem and the 1x1 layer,
whose weights fit L1, alone (7 x 4 and 14 x 2 are 10-15 % slower there). Flat tiles keep the
base model (7 x 4 is slower than the base choice on the 14x14 map) unless the L2 weight model
scores its own tile clearly higher (``SPILLING_FLAT_GAIN``: 7x7 maps). AVX2 does not use the model:
on Zen 3 a tile streaming its weight slice from L2 still runs near the peak (l3, 295 KB a tile)
while a tile one register over its 16 costs spills (7 x 2: 40 % slower than 6 x 2); what it
needs is that the slice stays within L2 (:func:`weights_fit_l2`).

Zen 4's AVX-512 cores (measured on 2 znver4 cores) do not use the L2 weight model either.
Timed with AutoTVM's measure (two rounds) against 6 x 4, 5 x 4, 4 x 4, 7 x 2 and 14 x 2, its
7 x 4 ran 2.9-4.1x slower than 4 x 4 on four ResNet-50 1x1 convs with Ci >= 128, and on the
layers where the two models differ (seed, the 1x1 512->128 at 28x28, r50_reduce, stem) the base
model's tile was as fast or faster: for znver4 LLVM unrolls the reduction loop twice and keeps
all 28 accumulators on the stack (124 stack moves in the kernel against 13 for rocketlake,
which does not unroll it).

Zen 5 (measured on 2 znver5 cores, 1 MiB L2 and 48 KiB L1d each) runs 512-bit FMAs at full
width (twice Zen 4's peak) and takes the L2 weight model without the spilled register, for flat
tiles as well, its weight slice kept within L2: 2 vectors x 14 px (28 accumulators, 31 zmm) where
the weights stream from L2. With ``algorithm="direct"`` (interleaved A/B against the Zen 4
model, 7 rounds) l3 ran in 0.93x the time (89 % of the FMA peak), l4 in 0.875x (87 %; 4 vectors
would stream a 1.18 MB slice from L3), ``mb_last`` in 0.85x, l2 0.97x, the others within 2 %.
In a sweep of the knobs, 7 x 4 (LLVM spills) and 6 x 4 ran 6-20 % slower than 14 x 2 on l1-l3.
Which kind of core it is, is read from the host (:func:`host_is_amd`,
:func:`host_splits_avx512`), as the cache sizes are.

On every machine the tile's operand streams must fit the ways of one L1 set
(:func:`fits_l1_sets`): input pixels a multiple of 4 KiB apart (1024 channels, or 512 at
stride 2) share a set. Measured on Zen 5 (12 ways), where it narrows 14 x 2 to 7 x 2 on
ResNet-50's 1x1 convs of 1024 input channels; on Zen 4's 8-way L1 it narrows the flat 6 x 4 of
those layers to 4 x 4, not measured there; Zen 3's 3 x 4 and Rocket Lake's tiles fit already.
This module is plain Python: it knows nothing of TE.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from dataclasses import dataclass, field
from pathlib import Path

from . import packing, winograd_weights

#: Widest register tile along Wo the model considers.
MAX_OWB = 16
#: Most channel vectors in one register tile (oneDNN uses up to 4).
MAX_OCB = 4
#: How much better (relative score) a flat Ho*Wo tile must be than a Wo tile to be chosen.
#: Measured on Zen 3 with 6 x 2 tiles (1 and 2 threads): at 56x56 and 28x28 (score gain ~7 %)
#: both time the same; at 14x14 (8 %) flat is ~15 % faster, at 7x7 (40 %) ~30 % faster.
FLAT_GAIN = 0.075
#: The margin on AVX2 when the conv output fits L2 (the flat tile's second, epilogue pass then
#: rereads it from L2), measured on Zen 3 with 3 x 4 tiles (1 thread, CPU time, interleaved):
#: flat is 11 % faster at 14x14 (gain 6.1 %), 2.5 % faster on l2 and as fast on the stride-2
#: seed at 28x28 (6.9 %). Larger outputs keep ``FLAT_GAIN`` (a 6 x 2 flat tile at 56x56x64,
#: gain 7.1 %, measured 4 % slower than the Wo tile), and so do 1x1 convs, whose work per output
#: is a ninth of a 3x3's (64->128 1x1 stride 2 at 28x28: flat 12 % slower than Wo tiles).
AVX2_FLAT_GAIN = 0.05
#: How much higher the L2 weight model must score its flat tile than the base model's choice
#: (both scored by the L2 model) for a machine that scores flat tiles by the base model (Intel's
#: AVX-512) to take it: that tile may spill a register, which the scores do not count. On an Intel
#: Xeon (reported as ``rocketlake``) the 7 x 4 tile (score 1.13-1.15x: 49 pixels in 7 tiles against
#: 5 x 4's 10 or 6 x 4's 9) ran ResNet-50's 7x7-output convs (1x1, 3x3 stride 2; Ci 512-2048) in
#: 0.90-0.96x the time warm and 0.91-0.96x with their weights flushed; on the 14x14 1x1 convs of
#: ResNet-50 (score 1.05x over 6 x 4) it ran 1.01-1.03x as long (kernels alone, 9 interleaved
#: rounds). Where the L2 model's best tile holds its weight slice in L1, the rule takes that one:
#: 14 x 2 on ResNet-50's 256 -> 1024 at 14x14 (score 1.12x) ran in 0.97x the time, 10 x 2 on
#: MobileNet-v2's 320 -> 1280 at 7x7 in 0.91-0.94x (its 960 -> 320, 7 x 4: 0.92-0.99x).
#: Within whole runs ResNet-50's 7x7-output convs took 0.85-0.93x the time, the model 0.965x.
SPILLING_FLAT_GAIN = 0.1
#: Caches the weight models assume where the host's are unknown (Zen 3/4: 32 KiB L1d).
DEFAULT_L1_BYTES = 32 * 1024
DEFAULT_L2_BYTES = 512 * 1024
DEFAULT_L1_WAYS = 8
#: Cost of one weight-vector load streamed from L2, in broadcasts from L1.
L2_WEIGHT_LOAD_COST = 3


def _host_cache_field(level: int, name: str) -> str | None:
    """The sysfs field ``name`` of this machine's core 0 data cache of ``level`` (Linux), else
    None."""
    for index in sorted(Path("/sys/devices/system/cpu/cpu0/cache").glob("index*")):
        try:
            found, kind, value = ((index / f).read_text().strip() for f in ("level", "type", name))
        except OSError:
            continue
        if found == str(level) and kind in ("Data", "Unified"):
            return value
    return None


@functools.lru_cache(maxsize=None)
def host_cache_bytes(level: int, default: int) -> int:
    """The data cache of ``level`` of this machine's core 0 (Linux sysfs), else ``default``.

    The model assumes it compiles for the machine it runs on, as ``tvm_fuse.host_target()``
    does; a build for another machine can tune instead."""
    size = _host_cache_field(level, "size")
    return int(size[:-1]) * 1024 if size and size.endswith("K") and size[:-1].isdigit() else default


def host_l1d_bytes() -> int:
    """The host's L1 data cache, else ``DEFAULT_L1_BYTES``."""
    return host_cache_bytes(1, DEFAULT_L1_BYTES)


def host_l2_bytes() -> int:
    """The host's L2 cache (per core), else ``DEFAULT_L2_BYTES``."""
    return host_cache_bytes(2, DEFAULT_L2_BYTES)


@functools.lru_cache(maxsize=None)
def host_l1d_ways() -> int:
    """The associativity of this machine's L1 data cache (Linux sysfs), else
    ``DEFAULT_L1_WAYS``: also for 0 (fully associative) and 1, where :func:`fits_l1_sets` would
    leave no tile at all."""
    ways = _host_cache_field(1, "ways_of_associativity")
    return int(ways) if ways and ways.isdigit() and int(ways) > 1 else DEFAULT_L1_WAYS


def _host_cpuinfo(field_name: str) -> set[str]:
    """The values of ``field_name`` over this machine's CPUs in /proc/cpuinfo (empty where
    unknown)."""
    try:
        text = Path("/proc/cpuinfo").read_text(errors="replace")
    except OSError:
        return set()
    fields = (line.partition(":") for line in text.splitlines())
    return {value.strip() for name, _, value in fields if name.strip() == field_name}


@functools.lru_cache(maxsize=None)
def host_is_amd() -> bool:
    """Whether this machine's CPU is AMD's (``vendor_id`` of /proc/cpuinfo); False where unknown."""
    return "AuthenticAMD" in _host_cpuinfo("vendor_id")


#: AMD's ``cpu family`` of Zen 3 and Zen 4. Zen 4, the one of the two with AVX-512, runs each
#: 512-bit FMA as two 256-bit halves; Zen 5 (family 26) has 512-bit FMA pipes: the FMA peak of
#: 2 znver5 cores measured 545 GFLOP/s with 16 lanes, 2.4x that of 2 znver4 cores (227).
ZEN3_AND_ZEN4_FAMILY = "25"


#: Zen 5's weight streaming rate relative to Zen 3's (``Machine.memory_speed``): 2 znver5 cores
#: read memory at 43-45 GB/s, and ResNet-50 ran 3.5 % slower when the Winograd cost model
#: assumed Zen 3's rate (it then chose direct for two 7x7x512 convs that F(2x2) runs faster).
ZEN5_MEMORY_SPEED = 2.0
#: Intel's AVX-512 cores' rate (measured on 2 emeraldrapids cores): they read a 16 MB weight at
#: 40-48 GB/s from their shared L3 (300 MB, which keeps ResNet's weights from one run to the
#: next; 25 GB/s from memory). With Zen 3's rate the Winograd cost model chose direct for the
#: 7x7x512 convs (estimated 0.98x) that F(2x2) runs 1.40x faster alone; with this rate it takes
#: F(2x2) there and on 28x28x128 -> 14x14x256 at stride 2: ResNet-18 ran in 0.910x the time
#: (0.906x and 0.930x with only its 7x7x512 convs F(2x2)), ResNet-50, whose only change those
#: convs are, in 0.975-0.987x (three runs); each interleaved with ONNX Runtime, 21-31 rounds.
#: Rocket Lake, on which the tile model's Intel choices were measured, was not measured with it.
INTEL_AVX512_MEMORY_SPEED = 2.0


@functools.lru_cache(maxsize=None)
def host_splits_avx512() -> bool:
    """Whether this machine runs a 512-bit FMA as two 256-bit halves (AMD's Zen 4)."""
    return host_is_amd() and _host_cpuinfo("cpu family") == {ZEN3_AND_ZEN4_FAMILY}


#: Below this many output values per core the fast kernel's launch and packing do not pay.
MIN_OUTPUTS_PER_CORE = 64


def fast_path_refusal(spec, target_name: str, is_x86_llvm: bool, cores: int) -> str | None:
    """Why the fast kernel does not apply to ``spec`` (a ``KernelSpec``) on the target named
    ``target_name``, or None when it does. Both backends' strategies ask this with their own
    reading of the target. The fallback cases: a non-x86 or non-llvm target; a dtype other than
    float32; a tiny output (fewer than MIN_OUTPUTS_PER_CORE values per core); a depthwise conv
    whose C is not a multiple of ``packing.MIN_DEPTHWISE_LANES``. Any Co and Ci of a plain conv
    are covered: a Co that is not a multiple of VL is padded in the packed weight."""
    if not is_x86_llvm:
        return f"target {target_name} is not x86 llvm"
    dtypes = {spec.data.dtype, spec.weight.dtype, spec.out.dtype}
    if dtypes != {"float32"}:
        return f"dtypes {sorted(dtypes)} are not float32"
    if spec.depthwise and spec.out_channels % packing.MIN_DEPTHWISE_LANES:
        return (
            f"depthwise conv of {spec.out_channels} channels: the depthwise kernel needs a "
            f"multiple of {packing.MIN_DEPTHWISE_LANES}"
        )
    outputs = 1
    for dim in spec.out.shape:
        outputs *= dim
    if outputs < MIN_OUTPUTS_PER_CORE * max(1, cores):
        return f"output {spec.out.shape} is tiny"
    return None

@dataclass(frozen=True)
class Machine:
    """What the model needs to know of the target."""

    lanes: int = 8  # fp32 SIMD lanes (VL)
    fma_lanes: int = 8  # fp32 lanes an FMA pipe retires per cycle (Zen 4's AVX-512: 8, see below)
    vregs: int = 16  # vector registers
    fma_in_flight: int = 10  # FMA latency x FMA ports (4 x 2 on Zen 3/4), plus slack
    l2_weight_model: bool = False  # choose Wo tiles by the L2 weight model (AVX-512)
    streaming_spill: int = 1  # registers a tile that streams its weights may spill (that model)
    flat_streams: bool = False  # score flat tiles by that model too
    l1_bytes: int = field(default_factory=host_l1d_bytes)  # L1 data cache, for that model
    l1_ways: int = field(default_factory=host_l1d_ways)  # its associativity (``fits_l1_sets``)
    weights_fit_l2: bool = False  # keep a tile's weight slice within L2 (measured on AVX2)
    l2_bytes: int = field(default_factory=host_l2_bytes)  # L2 cache per core, for that rule
    flat_gain: float = FLAT_GAIN  # margin a flat tile needs over a Wo tile, output in L2
    memory_speed: float = 1.0  # how fast weights stream from memory, relative to Zen 3's
    prefetch_into_l1: bool = True  # the Winograd GEMM prefetches into L1 too (else L2 only)


@dataclass(frozen=True)
class Tiles:
    owb: int  # output pixels per register tile, along Wo (or along Ho*Wo when flat)
    ocb: int  # channel vectors per register tile
    icb: int  # Ci block of the reduction (Ci: not split)
    flat: bool = False  # tile the flattened Ho*Wo pixel axis: tiles may span two rows

    @property
    def vector_outer(self) -> bool:
        """Loop over the channel vectors outside the pixels: the ``owb`` broadcasts stay in
        registers and each weight vector streams through one (fewer registers when owb < ocb)."""
        return holds_broadcasts(self.owb, self.ocb)


def holds_broadcasts(owb: int, ocb: int) -> bool:
    """Whether a tile keeps its broadcasts (rather than its weight vectors) in registers."""
    return owb < ocb


def machine_for(lanes: int) -> Machine:
    """The x86 machine of a SIMD width: AVX-512 has 32 vector registers, AVX2/SSE 16. The kind
    of AVX-512 core is read from the host (see the module's docstring): Zen 4 splits each
    512-bit FMA into two 256-bit halves, so it retires 8 lanes per pipe and cycle as AVX2 does
    (``host_splits_avx512``), and takes the base model; other AMD cores (Zen 5) take the L2
    weight model without spilling and keep a tile's weights within L2; Intel's take the L2
    weight model. Zen 5's and Intel's AVX-512 cores stream weights twice as fast as Zen 3
    (``ZEN5_MEMORY_SPEED``, ``INTEL_AVX512_MEMORY_SPEED``). Intel's prefetch the Winograd GEMM's
    next weight slice into L2 only (presumably because a prefetch into L1 holds one of the core's
    few L1 miss buffers until its line comes from memory; no PMU here to tell). On an Intel Xeon
    (reported as ``rocketlake``) the Winograd convs of ResNet-50 timed alone with their weights
    flushed ran in 0.970x the time that way (512 -> 512 on 7x7 0.936x; the same build timed twice
    0.999x; 11 interleaved rounds), as fast with them warm (0.996x), and ResNet-18 in 0.95-0.99x
    (conv by conv within whole runs, 3 runs)."""
    if lanes < 16:
        return Machine(
            lanes=lanes, fma_lanes=lanes, vregs=16, weights_fit_l2=True, flat_gain=AVX2_FLAT_GAIN
        )
    if host_splits_avx512():
        return Machine(lanes=lanes, fma_lanes=8, vregs=32)
    if host_is_amd():
        return Machine(
            lanes=lanes,
            fma_lanes=lanes,
            vregs=32,
            l2_weight_model=True,
            streaming_spill=0,
            flat_streams=True,
            weights_fit_l2=True,
            memory_speed=ZEN5_MEMORY_SPEED,
        )
    return Machine(
        lanes=lanes,
        fma_lanes=lanes,
        vregs=32,
        l2_weight_model=True,
        memory_speed=INTEL_AVX512_MEMORY_SPEED,
        prefetch_into_l1=False,
    )


#: How much more padding of Co whole VL-lane vectors must cost than VL/2-lane ones for the
#: direct kernel to take VL/2 lanes where that loses no FMA throughput (``direct_lanes``). On
#: znver4 a Co of 24 (MobileNet-v2's 144 -> 24 projection at 56x56) ran in 0.69x the time with
#: 8 lanes (3 vectors) as with 16 (2 vectors, one a third padding), while Co 144 and 1280, whole
#: 16-lane vectors, ran 7-10 % slower with 8 lanes: twice the instructions for the same FMAs.
NARROW_PADDING_GAIN = 1.1


def cpu_splits_avx512(mcpu: str) -> bool:
    """Whether the core a target's ``-mcpu`` names runs a 512-bit FMA as two 256-bit halves
    (``znver4``); this machine's answer when it names none (``host_splits_avx512``)."""
    return mcpu == "znver4" if mcpu else host_splits_avx512()


def direct_lanes(channels: int, lanes: int, mcpu: str) -> int:
    """VL of the direct kernel for a conv of ``channels`` output channels on a target of
    ``lanes`` fp32 lanes and CPU ``mcpu``: ``lanes / 2`` on a core that splits 512-bit FMAs
    (``cpu_splits_avx512``), whose FMA pipes retire 8 lanes a cycle whatever the width, where
    whole ``lanes``-wide vectors would pad Co by ``NARROW_PADDING_GAIN`` more than half-width
    ones; else ``lanes``."""
    half = lanes // 2
    if lanes < 16 or not cpu_splits_avx512(mcpu):
        return lanes
    wide, narrow = (packing.padded_channels(channels, n) for n in (lanes, half))
    return half if wide > NARROW_PADDING_GAIN * narrow else lanes


def fast_weight_spec(spec, lanes: int, mcpu: str):
    """``spec`` (a ``KernelSpec`` on an HWIO weight, which the fast path takes) with the weight
    its x86 kernel wants on a target of ``lanes`` fp32 lanes and CPU ``mcpu``: ``OHW{VL}o`` for a
    depthwise conv (VL a divisor of C: ``packing.depthwise_lanes``), ``WINO{m}_{VL}o`` for a
    Winograd one (``schedules.winograd_weights``), else ``OHWI{VL}o`` (VL: :func:`direct_lanes`).
    Both backends' strategies answer with it once ``fast_path_refusal`` finds nothing."""
    if spec.depthwise:
        lanes = packing.depthwise_lanes(spec.out_channels, lanes)
        return dataclasses.replace(spec, weight=packing.packed_depthwise_weight(spec, lanes))
    if spec.algorithm == "winograd":
        return winograd_weights.winograd_spec(spec, spec.winograd_tile, lanes)
    lanes = direct_lanes(spec.out_channels, lanes, mcpu)
    return dataclasses.replace(spec, weight=packing.packed_weight(spec, lanes))


def tile_score(machine: Machine, owb: int, ocb: int, wo: int, weight_cost: float = 1) -> float:
    """FMAs per load of one reduction step (a weight load counting ``weight_cost``) x the
    fraction of computed pixels kept x the fraction of the FMA pipeline that ``owb * ocb``
    independent accumulators keep busy."""
    fmas = owb * ocb
    kept = wo / (-(-wo // owb) * owb)
    busy = min(1.0, fmas / machine.fma_in_flight)
    return fmas / (fmas + owb + weight_cost * ocb) * kept * busy


def register_tiles(
    machine: Machine,
    wo: int,
    co_vectors: int,
    spills=lambda ocb: 0,
    allowed=lambda ocb: True,
    held=min,
    fits_sets=lambda owb, ocb: True,
) -> list[tuple[int, int]]:
    """Every (owb, ocb) whose accumulators, the operands it holds (``held(owb, ocb)``: the
    smaller set, for a schedule that can loop either way, ``vec_outer``) and one streamed
    operand fit the registers with at most ``spills(ocb)`` registers spilled, for the
    ``allowed(ocb)`` vector counts, whose streams ``fits_sets(owb, ocb)`` (:func:`fits_l1_sets`)."""
    return [
        (owb, ocb)
        for ocb in range(1, MAX_OCB + 1)
        if co_vectors % ocb == 0 and allowed(ocb)
        for owb in range(1, min(wo, MAX_OWB) + 1)
        if owb * ocb + held(owb, ocb) + 1 <= machine.vregs + spills(ocb) and fits_sets(owb, ocb)
    ]


def best_tile(
    machine: Machine,
    pixels: int,
    co_vectors: int,
    streams=lambda ocb: False,
    allowed=lambda ocb: True,
    held=min,
    fits_sets=lambda owb, ocb: True,
    spill: int = 0,
) -> tuple[float, int, int]:
    """(score, owb, ocb) of the best register tile along a pixel axis of length ``pixels``.

    ``streams(ocb)``: whether a tile of ``ocb`` vectors streams its weights from L2 (the L2
    weight model); such a tile pays ``L2_WEIGHT_LOAD_COST`` per weight load and may spill
    ``machine.streaming_spill`` registers (any tile ``spill``). ``allowed(ocb)``: the vector
    counts to consider; ``held`` and ``fits_sets``: as for :func:`register_tiles`."""

    def score(owb, ocb):
        return tile_score(machine, owb, ocb, pixels, L2_WEIGHT_LOAD_COST if streams(ocb) else 1)

    def spills(ocb):
        return max(spill, machine.streaming_spill if streams(ocb) else 0)

    tiles = register_tiles(machine, pixels, co_vectors, spills, allowed, held, fits_sets)
    return max((score(owb, ocb), owb, ocb) for owb, ocb in tiles)


def weight_slice_bytes(machine: Machine, reduction: int, ocb: int) -> int:
    """Bytes of one tile's weights: ``reduction`` (Kh*Kw*Ci) fp32 values x ``ocb`` vectors."""
    return reduction * ocb * machine.lanes * 4


def weights_overflow_l1(machine: Machine, reduction: int):
    """``streams`` for :func:`best_tile`: whether ``reduction`` (Kh*Kw*Ci) fp32 values x
    ``ocb`` vectors overflow the machine's L1 data cache."""
    return lambda ocb: weight_slice_bytes(machine, reduction, ocb) > machine.l1_bytes


def fits_l1_sets(machine: Machine, pixel_stride: int | None):
    """``fits_sets`` for :func:`best_tile`: whether a tile's operand streams fit one L1 set.

    Each reduction step broadcasts one value from each of the tile's ``owb`` input pixels,
    ``pixel_stride`` bytes apart (stride x Ci x 4), and loads ``ocb`` weight vectors, each from
    its own Co block. Addresses a multiple of the L1 way's span (L1 size / ways: 4 KiB on
    Zen 3-5 and Rocket Lake) apart fall in one set, so with Ci a multiple of 1024 (or 512 at
    stride 2) all ``owb`` pixels share one set, and so may the weight blocks (their distance,
    Kh*Kw*Ci*VL*4 bytes, is often such a multiple as well). More streams than the set has ways
    evict each other's lines before their next use (a line serves 16 consecutive steps), and
    the broadcasts come from L2. The rule: the streams that share a set, plus ``ocb``, at most
    the ways. On znver5 (12 ways) the 14 x 2 tiles of ResNet-50's 1x1 convs on 14x14x1024 and
    (stride 2) 28x28x512 inputs became 7 x 2: 14x14x1024 -> 256 alone ran in 0.956x and 0.72x
    the time (two runs at different times of the day); ResNet-50 in 0.948-0.977x in three runs
    (15.9-19.6 ms: the host's slow mode) and 0.994-1.011x in five others (14.2-17.4 ms, where two
    identical builds differed by up to 1.8 %), each interleaved with ONNX Runtime, 31-41 rounds:
    a gain in the slow mode, none to measure in the fast one. ``pixel_stride`` None: no rule."""
    if pixel_stride is None:
        return lambda owb, ocb: True
    span = machine.l1_bytes // machine.l1_ways
    offsets = span // math.gcd(pixel_stride, span)  # the set offsets the pixels cycle through
    return lambda owb, ocb: -(-owb // offsets) + ocb <= machine.l1_ways


def weights_fit_l2(machine: Machine, reduction: int):
    """``allowed`` for :func:`best_tile` where the machine keeps weight slices within L2: the
    consecutive tiles of one channel block reread the slice, from L3 once it overflows L2
    (AVX2, Zen 3, l4 = 512->512 at 7x7: 3 x 4 with a 590 KB slice is 10 % slower than 5 x 2's
    295 KB). One vector always passes."""
    if not machine.weights_fit_l2:
        return lambda ocb: True
    return lambda ocb: ocb == 1 or weight_slice_bytes(machine, reduction, ocb) <= machine.l2_bytes


def choose_tiles(
    machine: Machine,
    wo: int,
    co_vectors: int,
    ci: int,
    ho: int = 1,
    ragged_co: bool = False,
    window: int = 1,
    pixel_stride: int | None = None,
) -> Tiles:
    """The model's tiles for a layer of output ``ho x wo``, Co/VL vectors and ``ci`` inputs.

    Tiles run along Wo unless tiling the flattened Ho*Wo axis wastes clearly less (small maps,
    e.g. 7x7: Wo-tiles of 5 compute 10 columns for 7). The flat tile pads the whole input up
    front and applies the epilogue in a second pass over the conv output, hence the margin
    ``FLAT_GAIN``, or the machine's ``flat_gain`` when that output fits L2 and the window is
    larger than 1x1 (the pass is then cheap against the conv). Where the
    machine says so, a tile's weight slice must fit L2 (:func:`weights_fit_l2`). A Wo tile is then
    re-chosen by the L2 weight model where the machine uses it (``window`` = Kh*Kw). The tile
    chosen must keep its operand streams within an L1 set (:func:`fits_l1_sets`;
    ``pixel_stride``: the bytes between the input pixels of neighbouring outputs); that narrows
    the tile, it does not decide between Wo and flat tiles (flat 6 x 4, which the scores prefer
    to 7 x 2 Wo tiles on those layers once 14 x 2 is out: ResNet-50 1.003x and 1.011x as long).

    ``ragged_co`` (Co not a multiple of VL, padded in the packed weight) always takes the flat
    tile when there is more than one row: a Wo tile is computed where the output is stored, and
    TE's bound inference clips its last channel vector to the real Co, which leaves that vector
    scalar and guarded (seen in ``tvm.lower`` for Co=20 on AVX-512); the flat tile's conv is
    its own stage over whole vectors.
    """
    fits = weights_fit_l2(machine, window * ci)
    streams = weights_overflow_l1(machine, window * ci)
    # Wo against flat tiles: compared by the L2 weight model where the machine scores flat
    # tiles by it too, else by the base model; the L1 sets narrow the chosen kind's tile only
    compared = streams if machine.flat_streams else lambda ocb: False
    score, _, _ = best_tile(machine, wo, co_vectors, compared, allowed=fits)
    flat_score, _, _ = best_tile(machine, ho * wo, co_vectors, compared, fits)
    out_bytes = ho * wo * co_vectors * machine.lanes * 4
    cheap_pass = window > 1 and out_bytes <= machine.l2_bytes
    margin = machine.flat_gain if cheap_pass else FLAT_GAIN
    sets = fits_l1_sets(machine, pixel_stride)
    if ho > 1 and (ragged_co or flat_score > score * (1 + margin)):
        _, owb, ocb = best_tile(machine, ho * wo, co_vectors, compared, fits, fits_sets=sets)
        if machine.l2_weight_model and not machine.flat_streams:
            owb, ocb = _streaming_flat_tile(machine, ho * wo, co_vectors, (owb, ocb), streams, sets)
        return Tiles(owb=owb, ocb=ocb, icb=ci, flat=True)
    wo_streams = streams if machine.l2_weight_model else compared
    _, owb, ocb = best_tile(machine, wo, co_vectors, wo_streams, allowed=fits, fits_sets=sets)
    return Tiles(owb=owb, ocb=ocb, icb=ci)


def _streaming_flat_tile(machine: Machine, pixels: int, co_vectors: int, base, streams, sets):
    """(owb, ocb): the L2 weight model's flat tile (``streams``: :func:`weights_overflow_l1`)
    where it scores ``SPILLING_FLAT_GAIN`` above the ``base`` tile by that model, else ``base``."""
    score, owb, ocb = best_tile(machine, pixels, co_vectors, streams, fits_sets=sets)
    base_cost = L2_WEIGHT_LOAD_COST if streams(base[1]) else 1
    base_score = tile_score(machine, *base, pixels, base_cost)
    return (owb, ocb) if score >= base_score * (1 + SPILLING_FLAT_GAIN) else base


def tiles_for(spec) -> Tiles:
    """The model's tiles for a :class:`~tvm_fuse.spec.KernelSpec` of the fast kernel (its
    weight packed with ``spec.lanes`` lanes; Co padded to whole vectors when ragged)."""
    ho, wo = spec.out_hw
    kh, kw = spec.kernel_size
    lanes, co = spec.lanes, spec.out_channels
    return choose_tiles(
        machine_for(lanes),
        wo,
        co_vectors=-(-co // lanes),
        ci=spec.in_channels,
        ho=ho,
        ragged_co=co % lanes != 0,
        window=kh * kw,
        pixel_stride=spec.strides[1] * spec.in_channels * 4,  # float32 NHWC: one pixel, Ci values
    )


def co_blocks_outside_rows(spec) -> bool:
    """Whether the direct kernel of ``spec`` (a ``KernelSpec``) splits its parallel loop by Co
    blocks before rows: where its weight outweighs its input, so that each core streams its half of
    the weight once rather than all of it for each of its rows, unless the whole weight fits in a
    third of the L2 (room left for the input rows and the output): then split by rows, each core
    keeps all of it in its own L2 and reads its input rows once for every Co block. On emeraldrapids
    (2 MiB L2) the forced direct l2 (28x28x128, 576 KiB of weight) ran at 95-97 against 76 % of the
    FMA peak on 1 thread and 60-77 against 57-67 % on 2 (4 runs, the peak timed in the same rounds);
    ResNet-18 with every conv direct in 0.943x and 0.993x the time, as built (its 14x14 -> 7x7 1x1
    conv changes) 0.972x (15 interleaved rounds each). The 1x1 1024 -> 256 at 14x14 (1 MiB) and a
    stride-2 256 -> 256 (2.25 MiB) keep their Co blocks outside (rows: 79 against 92 % and 33
    against 88 %)."""
    kh, kw = spec.kernel_size
    weight = kh * kw * spec.in_channels * spec.out_channels
    if weight <= math.prod(spec.data.shape):  # the input (NHWC or, for a stem, NCHW)
        return False
    return 3 * weight * 4 > host_l2_bytes()  # float32


def prefetches_next_group(values: int, co_blocks_outside: bool) -> bool:
    """Whether the direct kernel, its weight read by groups of ``values`` (float32), prefetches
    the group its next parallel iteration reads (:func:`prefetches_next_slice`): only where its
    parallel loop takes Co blocks before rows (``co_blocks_outside``). With rows first, each
    iteration reads the next group, every group once per row; the whole weight stays in cache
    (:func:`co_blocks_outside_rows` puts rows first only where it fits a third of the L2), and
    where no loop inside the iteration rereads its group (flat tiles) every step of the kernel
    would prefetch. Such a prefetch made the stride-2 ``seed`` conv (64 -> 128, 3x3 on 56x56,
    flat tiles) 1.34-1.35x as long warm and 1.16-1.25x with its caches flushed (znver3, kernels
    alone, the same plan and opt level, 15 interleaved rounds, two runs)."""
    return co_blocks_outside and prefetches_next_slice(values)


def next_group_prefetch(ocb: int, packed_shape, co_blocks_outside: bool) -> int | None:
    """How far ahead (weight elements) the direct kernel prefetches, or None where it does not
    (:func:`prefetches_next_group`): one group of ``ocb`` Co blocks of its packed ``[Co/VL, Kh,
    Kw, Ci, VL]`` weight (``packed_shape``), the group its next parallel iteration reads."""
    group = ocb * math.prod(int(d) for d in packed_shape[1:])
    return group if prefetches_next_group(group, co_blocks_outside) else None


def prefetches_next_slice(values: int) -> bool:
    """Whether a kernel that computes from a weight slice of ``values`` (float32) prefetches the
    next one into L2 meanwhile (``tvm_fuse.lowering``): where both fit in L2. A 3x3x512 conv's
    590 KB slices did not fit twice in Zen 5's 1 MiB: each prefetch pushed out the slice being
    reread for every output row, and the stride-2 7x7x512 conv ran 1.33x as long."""
    return 2 * values * 4 <= host_l2_bytes()


#: Largest padded input the direct kernel pads whole, up front, in a parallel pass by rows;
#: larger ones are padded row by row inside the kernel's parallel loop. Up front measured 3-10 %
#: faster on inputs of 0.6-0.9 MB (stem, seed, l1; Zen 4, AVX-512 and AVX2 code), the two equal
#: on 12.8 MB (224x224x64, 0.6 %); row by row holds a few rows instead of a copy of the whole
#: input while the kernel runs, which matters for large maps.
PAD_UP_FRONT_MAX_BYTES = 4 * 1024 * 1024


def pads_by_rows(spec, tiles: Tiles) -> bool:
    """Whether the direct kernel of ``spec`` (a ``KernelSpec``) pads its input row by row inside
    its parallel loop rather than whole up front: a Wo tiling of a padded input larger than
    ``PAD_UP_FRONT_MAX_BYTES`` (a flat tiling, whose tiles span rows, always pads up front; a
    conv without padding reads its input in place)."""
    n, h, w, ci = spec.data.shape
    top, left, bottom, right = spec.padding
    padded_bytes = n * (h + top + bottom) * (w + left + right) * ci * 4  # float32
    return any(spec.padding) and not tiles.flat and padded_bytes > PAD_UP_FRONT_MAX_BYTES


#: Most input channels for which the direct kernel reads NCHW data itself (``reads_nchw_data``):
#: an image's. From 4 channels up the entry transpose moves whole vectors (register blocks).
NCHW_DATA_MAX_CHANNELS = 3


def reads_nchw_data(spec) -> bool:
    """Whether the direct kernel of ``spec`` (a ``KernelSpec``: NHWC data, packed weight) should
    read the NCHW tensor its data is the graph's entry transpose of, transposing as it pads: where
    it pads its whole input up front anyway, and the input has at most
    ``NCHW_DATA_MAX_CHANNELS`` channels, which the transpose, too, moves one value at a time. The
    transpose's own pass over the input then goes: on znver5 the stem (3 -> 64 channels, 7x7
    stride 2 on 224x224, between the graph's boundary transposes) ran in 0.981x the time
    (interleaved, 21 rounds)."""
    padded_up_front = any(spec.padding) and not pads_by_rows(spec, tiles_for(spec))
    return spec.in_channels <= NCHW_DATA_MAX_CHANNELS and padded_up_front
