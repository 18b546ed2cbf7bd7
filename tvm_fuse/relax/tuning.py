"""Tuning on the Relax backend: a measured search over the fused kernel's tiles.

``tune(mod, params, target, trials, records)`` optimizes ``mod`` with the Relax pipeline and, for
each distinct fast kernel (``KernelSpec``) it calls, times up to ``trials`` tilings of that kernel
alone on this machine and writes the best to ``records`` (``relax.records``), which
``tvm_fuse.relax.build(..., tuning_records=records)`` applies.

The knobs are the tile model's (``schedules.tiling``), those the Relay AutoTVM template searches
and the TensorIR schedule takes: ``owb`` pixels x ``ocb`` channel vectors per register tile, and
a Wo or a flat Ho*Wo tile (the Ci reduction is not split by the Relax kernel). Candidates are the
tiles whose accumulators fit the vector registers with at most one spill, tried in the order of
the model's score, the model's own choice first. The fastest is then timed again against the
model's, alternately, and replaces it only when it is clearly faster there
(``tvm_fuse.tuning_rule``, the Relay backend's rule too: a shared machine's load shifts during a
pass), so a tuned kernel is never slower than the untuned one in the measurement.
Each candidate is compiled alone with ``tvm.compile`` and timed with ``time_evaluator`` on random
inputs, in this process (no RPC, no listening socket). This is a plain search over a small
space rather than meta_schedule: ``owb`` and ``flat`` change the PrimFunc itself (the Wo padding,
the flattened axis), which a meta_schedule design space over one workload cannot vary.
"""

from __future__ import annotations

import dataclasses
import statistics
from pathlib import Path

import numpy as np
import tvm

from ..errors import UserError
from ..schedules import tiling
from ..spec import KernelSpec
from ..tuning_rule import CONFIRM_ROUNDS, replaces_default
from . import api, compat, kernel, records as records_file

#: Timing of one candidate: repeats (median taken) of at least this many ms each
REPEAT = 5
MIN_REPEAT_MS = 20


@dataclasses.dataclass
class TunedKernel:
    """What the search found for one kernel: the model's tiles, the chosen ones, every trial."""

    spec: KernelSpec
    default: tiling.Tiles
    default_ms: float
    best: tiling.Tiles
    best_ms: float
    trials: list[tuple[tiling.Tiles, float]]

    def record(self) -> dict:
        return {
            "spec": self.spec.to_dict(),
            "tiles": records_file.tiles_to_dict(self.best),
            "ms": self.best_ms,
            "default": {"tiles": records_file.tiles_to_dict(self.default), "ms": self.default_ms},
            "trials": [
                {"tiles": records_file.tiles_to_dict(t), "ms": ms} for t, ms in self.trials
            ],
        }


def tune(
    mod: tvm.IRModule,
    params: dict | None = None,
    target=None,
    trials: int = 16,
    records="tuning_records.json",
    on_kernel=None,
) -> list[TunedKernel]:
    """Tune every distinct fast kernel of ``mod`` with up to ``trials`` measurements each and
    write the records to ``records``; ``on_kernel(TunedKernel)`` is called as each is done."""
    if int(trials) < 1:
        raise UserError(f"trials={trials}: give at least 1 measurement per kernel")
    target = compat.as_target(target)
    folder = Path(records).resolve().parent
    if not folder.is_dir():
        raise UserError(f"{records}: folder {folder} does not exist")
    records_file.existing(records, target)  # a file the records cannot join: say so before tuning
    specs = []
    for spec in api.describe(api.optimize(mod, params, target)):
        if records_file.is_tunable(spec) and spec not in specs:
            specs.append(spec)
    if not specs:
        raise UserError("nothing to tune: the model has no fused kernel on the fast path")
    done = []
    for spec in specs:
        done.append(tune_kernel(spec, target, int(trials)))
        if on_kernel is not None:
            on_kernel(done[-1])
    records_file.write(records, target, [k.record() for k in done])
    return done


def candidates(spec: KernelSpec) -> list[tiling.Tiles]:
    """Every tiling the search considers for ``spec``, the model's first, then by model score.
    A ragged Co over several rows keeps to flat tiles, as the model does (``choose_tiles``)."""
    model = tiling.tiles_for(spec)
    machine = tiling.machine_for(spec.lanes)
    ho, wo = spec.out_hw
    co_vectors = -(-spec.out_channels // spec.lanes)
    if ho == 1:
        layouts = [False]
    else:
        layouts = [True] if spec.out_channels % spec.lanes else [False, True]
    scored = []
    for flat in layouts:
        pixels = ho * wo if flat else wo
        for owb, ocb in tiling.register_tiles(machine, pixels, co_vectors, _one_spill):
            score = tiling.tile_score(machine, owb, ocb, pixels)
            scored.append((-score, flat, owb, ocb))
    found = [model]
    for _, flat, owb, ocb in sorted(scored):
        tiles = tiling.Tiles(owb=owb, ocb=ocb, icb=spec.in_channels, flat=flat)
        if tiles != model and records_file.tiles_refusal(spec, tiles) is None:
            found.append(tiles)
    return found


def _one_spill(_ocb) -> int:
    """Registers a candidate tile may spill: one, as the model allows on AVX-512."""
    return 1


def tune_kernel(spec: KernelSpec, target, trials: int) -> TunedKernel:
    """Time the first ``trials`` candidates of ``spec``; the best, if clearly faster, wins."""
    inputs = _inputs(spec)
    timers = {tiles: timer(spec, tiles, target, inputs) for tiles in candidates(spec)[:trials]}
    measured = [(tiles, once()) for tiles, once in timers.items()]
    default, default_ms = measured[0]
    best, best_ms = min(measured, key=lambda trial: trial[1])
    if best != default:  # the winner of one pass, timed again against the model, alternately
        rounds = [(timers[default](), timers[best]()) for _ in range(CONFIRM_ROUNDS)]
        default_ms = statistics.median(a for a, _ in rounds)
        best_ms = statistics.median(b for _, b in rounds)
    if not replaces_default(default_ms, best_ms):
        best, best_ms = default, default_ms
    return TunedKernel(spec, default, default_ms, best, best_ms, measured)


def timer(spec: KernelSpec, tiles: tiling.Tiles, target, inputs):
    """A function timing the kernel of ``spec`` with ``tiles``, compiled alone for ``target``:
    each call returns the median ms of ``REPEAT`` repeats."""
    out = tvm.runtime.empty(spec.out.shape, spec.out.dtype)
    return prim_func_timer(kernel.prim_func(spec, tiles), target, [*inputs, out])


def prim_func_timer(func, target, args):
    """A function timing the PrimFunc ``func``, compiled alone for ``target``, on ``args``
    (its inputs and outputs): each call returns the median ms of ``REPEAT`` repeats."""
    alone = tvm.IRModule({"main": func.with_attr("global_symbol", "main")})
    lib = tvm.compile(alone, target=target).jit()
    evaluate = lib.time_evaluator("main", tvm.cpu(), repeat=REPEAT, min_repeat_ms=MIN_REPEAT_MS)
    return lambda: float(evaluate(*args).median) * 1e3


def _inputs(spec: KernelSpec):
    rng = np.random.default_rng(0)
    arrays = []
    for name in spec.argument_names:
        tensor = getattr(spec, name)
        arrays.append(rng.standard_normal(tensor.shape).astype(tensor.dtype))
    return [tvm.runtime.tensor(a) for a in arrays]
