"""The analytic tile model of the fast kernel: register tile and Ci block from the machine.

The fast schedule (``schedules.conv2d_nhwc_fused``) keeps a register tile of ``owb`` output
pixels along Wo x ``ocb`` vectors of VL output channels as accumulators. Each reduction step
loads ``ocb`` weight vectors and broadcasts ``owb`` input values, so the tile must fit the vector
register file together with them, and the more FMAs per load the better; pixels past Wo are
computed and dropped, so a tile that divides Wo (or, for a flat tile, Ho*Wo) wastes nothing;
and at least ``fma_in_flight`` independent accumulators keep both FMA pipes busy. The Ci reduction is not
split by default: inside the register tile a split only breaks the contiguous weight stream of
``[ky, kx, ci, VL]`` (measured 10-25 % slower on Zen 3); the split stays a knob for tuning.
This module is plain Python: it knows nothing of TE.
"""

from __future__ import annotations

from dataclasses import dataclass

#: Widest register tile along Wo the model considers.
MAX_OWB = 16
#: Most channel vectors in one register tile (oneDNN uses up to 4).
MAX_OCB = 4
#: How much better (relative score) a flat Ho*Wo tile must be than a Wo tile to be chosen.
#: Measured on Zen 3 (1 and 2 threads): at 56x56 and 28x28 (score gain ~7 %) both time the
#: same; at 14x14 (8 %) flat is ~15 % faster, at 7x7 (40 %) ~30 % faster.
FLAT_GAIN = 0.075


@dataclass(frozen=True)
class Machine:
    """What the model needs to know of the target."""

    lanes: int = 8  # fp32 SIMD lanes (VL)
    vregs: int = 16  # vector registers
    fma_in_flight: int = 10  # FMA latency x FMA ports (4 x 2 on Zen 3/4), plus slack


@dataclass(frozen=True)
class Tiles:
    owb: int  # output pixels per register tile, along Wo (or along Ho*Wo when flat)
    ocb: int  # channel vectors per register tile
    icb: int  # Ci block of the reduction (Ci: not split)
    flat: bool = False  # tile the flattened Ho*Wo pixel axis: tiles may span two rows


def machine_for(lanes: int) -> Machine:
    """The x86 machine of a SIMD width: AVX-512 has 32 vector registers, AVX2/SSE 16."""
    return Machine(lanes=lanes, vregs=32 if lanes >= 16 else 16)


def tile_score(machine: Machine, owb: int, ocb: int, wo: int) -> float:
    """FMAs per load of one reduction step x the fraction of computed pixels kept x the
    fraction of the FMA pipeline that ``owb * ocb`` independent accumulators keep busy."""
    fmas = owb * ocb
    kept = wo / (-(-wo // owb) * owb)
    busy = min(1.0, fmas / machine.fma_in_flight)
    return fmas / (fmas + owb + ocb) * kept * busy


def register_tiles(machine: Machine, wo: int, co_vectors: int) -> list[tuple[int, int]]:
    """Every (owb, ocb) whose accumulators, weights and one broadcast fit the registers."""
    return [
        (owb, ocb)
        for ocb in range(1, MAX_OCB + 1)
        if co_vectors % ocb == 0
        for owb in range(1, min(wo, MAX_OWB) + 1)
        if owb * ocb + ocb + 1 <= machine.vregs
    ]


def best_tile(machine: Machine, pixels: int, co_vectors: int) -> tuple[float, int, int]:
    """(score, owb, ocb) of the best register tile along a pixel axis of length ``pixels``."""
    return max(
        (tile_score(machine, owb, ocb, pixels), owb, ocb)
        for owb, ocb in register_tiles(machine, pixels, co_vectors)
    )


def choose_tiles(
    machine: Machine, wo: int, co_vectors: int, ci: int, ho: int = 1, ragged_co: bool = False
) -> Tiles:
    """The model's tiles for a layer of output ``ho x wo``, Co/VL vectors and ``ci`` inputs.

    Tiles run along Wo unless tiling the flattened Ho*Wo axis wastes clearly less (small maps,
    e.g. 7x7: Wo-tiles of 5 compute 10 columns for 7). The flat tile pads the whole input up
    front, which costs about a pass over it, hence the margin ``FLAT_GAIN``.

    ``ragged_co`` (Co not a multiple of VL, padded in the packed weight) always takes the flat
    tile when there is more than one row: a Wo tile is computed where the output is stored, and
    TE's bound inference clips its last channel vector to the real Co, which leaves that vector
    scalar and guarded (seen in ``tvm.lower`` for Co=20 on AVX-512); the flat tile's conv is
    its own stage over whole vectors.
    """
    score, owb, ocb = best_tile(machine, wo, co_vectors)
    flat_score, flat_owb, flat_ocb = best_tile(machine, ho * wo, co_vectors)
    if ho > 1 and (ragged_co or flat_score > score * (1 + FLAT_GAIN)):
        return Tiles(owb=flat_owb, ocb=flat_ocb, icb=ci, flat=True)
    return Tiles(owb=owb, ocb=ocb, icb=ci)
