"""Shared benchmark machinery: environment, TVM builders, timing, checks, tables and JSON.

Every script imports this module *before* tvm: it pins ``TVM_NUM_THREADS`` (and the OpenMP
thread count of the peers) to ``THREADS`` (2, or ``TVM_FUSE_BENCH_THREADS``) and turns TopHub
downloads off. Every implementation
is timed alike, TVM's through ``time_evaluator``: warm-up runs, then ``repeat`` measurements of
``number`` back-to-back runs each (``number`` chosen so that one measurement lasts
``min_repeat_ms``), the implementations taking turns; the figure is the median per-run mean.
"""

from __future__ import annotations

import collections
import dataclasses
import json
import logging
import math
import os
import platform
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

#: Threads of every implementation: 2, the cores of the machines this project is measured on,
#: unless ``TVM_FUSE_BENCH_THREADS`` says otherwise (e.g. 1 on a core of its own, ``taskset``).
def _threads() -> int:
    text = os.environ.get("TVM_FUSE_BENCH_THREADS", "2").strip()
    if not text.isdigit() or int(text) < 1:
        raise SystemExit(f"TVM_FUSE_BENCH_THREADS={text!r}: set it to a whole number >= 1")
    return int(text)


THREADS = _threads()
os.environ.setdefault("TVM_NUM_THREADS", str(THREADS))
os.environ.setdefault("OMP_NUM_THREADS", str(THREADS))
os.environ.setdefault("TOPHUB_LOCATION", "NONE")

import numpy as np  # noqa: E402
import tvm  # noqa: E402
from tvm import relay  # noqa: E402
from tvm.contrib import graph_executor  # noqa: E402
from tvm.contrib.debugger import debug_executor  # noqa: E402

import tvm_fuse  # noqa: E402
from tvm_fuse.bench import RESULTS  # noqa: E402
from tvm_fuse.bench.choices import select  # noqa: E402,F401  (re-exported: the suites call it)
from tvm_fuse.bench.idle import Waits, settle  # noqa: E402,F401  (settle: the suites call it here)
from tvm_fuse.bench.kernel_profile import pct_in_rounds, pct_of_peak  # noqa: E402
from tvm_fuse.testing import MODEL_RTOL  # noqa: E402

#: Relative tolerance of every correctness check: max |out - ref| <= RTOL * max |ref|.
RTOL = MODEL_RTOL
logging.getLogger("autotvm").setLevel(logging.ERROR)  # "Cannot find config" for every conv
logging.getLogger("te_compiler").setLevel(logging.ERROR)
logging.getLogger("strategy").setLevel(logging.ERROR)  # "conv2d NHWC layout is not optimized"


# -- what to run ---------------------------------------------------------------------------
@dataclass(frozen=True)
class TimingConfig:
    """Parameters of one measurement, the same for TVM and for the peers."""

    warmup: int = 5
    number: int = 5
    repeat: int = 15
    min_repeat_ms: int = 200


FULL = TimingConfig()
QUICK = TimingConfig(warmup=2, number=2, repeat=3, min_repeat_ms=20)


def peers_available() -> dict[str, str | None]:
    """``{peer: None if importable else the reason it is skipped}`` for torch and onnxruntime."""
    notes = {}
    for name in ("torch", "onnxruntime"):
        try:
            __import__(name)
            notes[name] = None
        except ImportError as err:
            notes[name] = f"{name} not installed ({err}); pip install -e .[bench]"
    return notes


# -- TVM builds ----------------------------------------------------------------------------
def build_fuse(mod, params, target):
    return tvm_fuse.build(mod, params=params, target=target)


def build_stock(mod, params, target):
    """Stock ``relay.build`` at opt_level 3 (NCHWc x86 schedules for NCHW convs)."""
    with tvm.transform.PassContext(opt_level=3):
        return relay.build(mod, target=target, params=params)


def build_stock_nhwc(mod, params, target):
    """Stock TVM after ``ConvertLayout`` to NHWC, params bound so weights transform at build."""
    mod = tvm.IRModule.from_expr(relay.build_module.bind_params_by_name(mod["main"], params))
    convert = relay.transform.ConvertLayout({"nn.conv2d": ["NHWC", "default"]})
    with tvm.transform.PassContext(opt_level=3):
        mod = tvm.transform.Sequential([relay.transform.RemoveUnusedFunctions(), convert])(mod)
        return relay.build(mod, target=target)


def build_fuse_direct(mod, params, target):
    """``tvm_fuse.build`` with Winograd off: the direct kernel on every conv it fuses."""
    return tvm_fuse.build(mod, params=params, target=target, algorithm="direct")


def algorithms_chosen(mod, params, target) -> str:
    """What ``tvm_fuse.build`` runs for the convs of ``mod``, counted (:func:`algorithm_counts`)."""
    return algorithm_counts(tvm_fuse.describe(tvm_fuse.optimize(mod, params, target)))


def algorithm_counts(specs) -> str:
    """The algorithms of a model's ``KernelSpec``s, counted: e.g. "2 direct, 1 winograd
    F(4x4)"; "none fused" when no conv becomes a fused kernel."""
    names = collections.Counter(s.algorithm_name for s in specs)
    if len(specs) == 1:
        return next(iter(names))
    return ", ".join(f"{n} {name}" for name, n in sorted(names.items())) or "none fused"


#: name -> builder(mod, params, target) of the TVM implementations.
TVM_BUILDERS = {
    "tvm_fuse": build_fuse,
    "tvm_fuse_direct": build_fuse_direct,
    "tvm_nchwc": build_stock,
    "tvm_nhwc": build_stock_nhwc,
}


def warm_up_tvm(target) -> None:
    """One tiny build, so the first timed build does not pay TVM's one-time start-up."""
    data = relay.var("data", shape=(1, 8, 8, 8))
    weight = relay.var("weight", shape=(8, 8, 3, 3))
    func = relay.Function(
        [data, weight], relay.nn.relu(relay.nn.conv2d(data, weight, channels=8, kernel_size=(3, 3)))
    )
    params = {"weight": np.ones((8, 8, 3, 3), "float32")}
    build_stock(tvm.IRModule.from_expr(func), params, target)


# -- runners -------------------------------------------------------------------------------
@dataclass
class Timing:
    """Per-run means (ms) of each repeat of one measurement; ``busy_runs``: how many of them
    started on CPUs that never became idle (``idle.Waits``)."""

    runs_ms: list[float]
    number: int
    busy_runs: int = 0

    @property
    def median_ms(self) -> float:
        return statistics.median(self.runs_ms)

    @property
    def min_ms(self) -> float:
        return min(self.runs_ms)


class Runner:
    """One ready-to-run implementation: ``output()`` for the check, ``timed(n)`` to measure."""

    def output(self) -> np.ndarray:
        raise NotImplementedError

    def timed(self, number: int) -> float:
        """Mean ms of ``number`` back-to-back runs."""
        raise NotImplementedError


class TvmRunner(Runner):
    """A built Relay module on the stock graph executor, inputs set once; timed by TVM."""

    def __init__(self, lib, inputs: dict[str, np.ndarray]):
        self.lib, self.inputs = lib, inputs
        self.dev = tvm.cpu()
        self.module = graph_executor.GraphModule(lib["default"](self.dev))
        self.module.set_input(**inputs)

    def output(self) -> np.ndarray:
        self.module.run()
        return self.module.get_output(0).numpy()

    def timed(self, number: int) -> float:
        evaluator = self.module.module.time_evaluator("run", self.dev, number=number, repeat=1)
        return evaluator().mean * 1e3


def debug_module(lib, inputs: dict[str, np.ndarray], dump_root: str):
    """A built Relay module on TVM's debug executor (its dumps under ``dump_root``), its params
    and ``inputs`` set: each kernel can then be timed alone."""
    module = debug_executor.create(
        lib.get_graph_json(), lib.get_lib(), tvm.cpu(), dump_root=dump_root
    )
    module.set_input(**lib.get_params(), **inputs)
    return module


class KernelRunner(Runner):
    """The one kernel of a ``TvmRunner``'s module whose node name holds ``name``, timed alone
    by TVM's debug executor on the tensors of a whole run (warm in cache). It has no output of
    its own to check; a module without exactly one such kernel is a ``Skip``."""

    def __init__(self, runner: TvmRunner, name: str):
        graph_json = runner.lib.get_graph_json()
        nodes = json.loads(graph_json)["nodes"]
        found = [i for i, n in enumerate(nodes) if n["op"] == "tvm_op" and name in n["name"]]
        if len(found) != 1:
            raise Skip(f"{len(found)} kernels named {name}, not one")
        (self.index,) = found
        self._dumps = tempfile.TemporaryDirectory()  # the debug executor's dump_root
        self.debug = debug_module(runner.lib, runner.inputs, self._dumps.name)
        self.debug.debug_get_output(self.index)  # its inputs: a real run's (quietly, unlike run)

    def timed(self, number: int) -> float:
        return self.debug.run_individual_node(self.index, number=number).mean * 1e3


class CallableRunner(Runner):
    """A peer: ``fn()`` runs one inference (that is what is timed).

    Its output for the check is what ``fn()`` returns, or ``fetch()`` after ``fn()`` when the
    output lands in a pre-bound buffer.
    """

    def __init__(self, fn: Callable, fetch: Callable | None = None):
        self.fn = fn
        self.fetch = fetch

    def output(self) -> np.ndarray:
        out = self.fn()
        return np.array(self.fetch() if self.fetch else out, copy=True)

    def timed(self, number: int) -> float:
        start = time.perf_counter()
        for _ in range(number):
            self.fn()
        return (time.perf_counter() - start) * 1e3 / number


def calibrate(runner: Runner, cfg: TimingConfig) -> int:
    """Warm ``runner`` up; the ``number`` of runs that makes one repeat last ``min_repeat_ms``."""
    per_run_ms = max(runner.timed(cfg.warmup), 1e-6)
    return max(cfg.number, math.ceil(cfg.min_repeat_ms / per_run_ms))


def time_interleaved(runners: dict[str, Runner], cfg: TimingConfig) -> dict[str, Timing]:
    """Measure all ``runners`` in ``cfg.repeat`` rounds, one repeat of each per round.

    Round-robin rather than one implementation after the other, so that a change in the
    machine's background load hits every implementation alike.
    """
    print(f"  timing {', '.join(map(str, runners))}: {cfg.repeat} rounds", flush=True)
    numbers = {name: calibrate(runner, cfg) for name, runner in runners.items()}
    runs, waits = {name: [] for name in runners}, {name: Waits() for name in runners}
    for _ in range(cfg.repeat):
        for name, runner in runners.items():
            waits[name].settle()
            runs[name].append(runner.timed(numbers[name]))
    Waits.combined(waits.values()).report()
    return {name: Timing(runs[name], numbers[name], waits[name].busy) for name in runners}


# -- one benchmark case --------------------------------------------------------------------
@dataclass
class Result:
    """What one implementation did on one case; ``error``/``skipped`` explain a missing time."""

    name: str
    build_s: float | None = None
    timing: Timing | None = None
    check: dict | None = None
    error: str | None = None
    skipped: str | None = None
    extra: dict = field(default_factory=dict)
    #: GFLOP/s of the FMA peak's microkernel in each round (``run_case``'s ``peak``), or None
    peak_runs: list[float] | None = None

    @property
    def ms(self) -> float | None:
        return self.timing.median_ms if self.timing else None

    def to_dict(self, gflop: float | None = None, peak_gflops: float | None = None) -> dict:
        out = {
            "ms": self.ms,
            "min_ms": self.timing.min_ms if self.timing else None,
            "runs_ms": self.timing.runs_ms if self.timing else None,
            "busy_runs": self.timing.busy_runs if self.timing else None,
            "build_s": self.build_s,
            "check": self.check,
            "error": self.error,
            "skipped": self.skipped,
            **self.extra,
        }
        if gflop is not None and self.ms:
            out["gflops"] = gflop / (self.ms * 1e-3)
            out["pct_peak"] = pct_of_peak(gflop, self.ms, peak_gflops)
            # like with like: the peak is the best run of its microkernel
            best = out["min_ms"]
            out["pct_peak_best"] = pct_of_peak(gflop, best, peak_gflops) if best else None
            out["pct_peak_round"] = pct_in_rounds(gflop, self.timing.runs_ms, self.peak_runs)
        if gflop is not None and out.get("kernel_ms"):  # its kernel alone (run_case's kernels)
            out["kernel_pct_peak"] = pct_of_peak(gflop, out["kernel_ms"], peak_gflops)
            out["kernel_pct_peak_best"] = pct_of_peak(gflop, out["kernel_min_ms"], peak_gflops)
            kernel_runs = out["kernel_runs_ms"]
            out["kernel_pct_peak_round"] = pct_in_rounds(gflop, kernel_runs, self.peak_runs)
        return out


def check_close(name: str, out: np.ndarray, ref: np.ndarray, rtol: float = RTOL) -> dict:
    """``max |out - ref| <= rtol * max |ref|``; prints a failure loudly, never raises."""
    if out.shape != ref.shape:
        print(f"  !! CHECK FAILED {name}: shape {out.shape} != reference {ref.shape}")
        return {"ok": False, "reason": f"shape {out.shape} != {ref.shape}"}
    err = float(np.max(np.abs(out.astype("float64") - ref))) if out.size else 0.0
    scale = float(np.max(np.abs(ref))) if ref.size else 0.0
    ok = bool(np.isfinite(err) and err <= rtol * scale)
    if not ok:
        print(f"  !! CHECK FAILED {name}: max abs err {err:.3g} > {rtol:g} * max|ref| {scale:.3g}")
    return {"ok": ok, "max_abs_err": err, "max_abs_ref": scale, "rtol": rtol}


def relative_error(out: np.ndarray, exact: np.ndarray) -> float:
    """``max |out - exact| / max |exact|``: the error measure of the README's accuracy table."""
    scale = float(np.max(np.abs(exact)))
    return float(np.max(np.abs(out.astype("float64") - exact))) / scale if scale else 0.0


def run_case(
    preparers: dict[str, Callable[[], Runner]],
    reference: str,
    cfg: TimingConfig,
    exact: np.ndarray | None = None,
    kernels: dict[str, Callable[[Runner], Runner]] | None = None,
    peak: Runner | None = None,
) -> dict[str, Result]:
    """Prepare and check every implementation against ``reference``, then time them all.

    ``preparers[name]()`` builds the implementation and returns its Runner, or raises
    ``Skip`` with a note. With ``exact`` (a float64 reference), every result also records
    its ``err_f64`` (``relative_error``). A failing build or run is recorded as ``error`` and
    printed; the other implementations still run. The reference is prepared first; the timing
    is interleaved (``time_interleaved``). ``kernels[name](runner)``, for an implementation that
    ran, gives a Runner of its main kernel alone (``KernelRunner``), timed in the same rounds
    and recorded as the implementation's ``kernel_ms`` (median) and ``kernel_min_ms``.
    ``peak`` (``fma_peak.PeakRunner``) is timed in the same rounds too; every result records the
    peak's GFLOP/s of each round (``peak_runs``), against which ``Result.to_dict`` gives its
    ``pct_peak_round``.
    """
    order = [reference] + [name for name in preparers if name != reference]
    results, runners, ref_out = {}, {}, None
    for name in order:
        result = results[name] = Result(name)
        print(f"  {name}: building and checking ...", end="", flush=True)
        try:
            start = time.perf_counter()
            runner = preparers[name]()
            result.build_s = time.perf_counter() - start
            out = runner.output()
        except Skip as note:
            result.skipped = str(note)
            print(" skipped", flush=True)
            continue
        except Exception as err:  # pylint: disable=broad-except  # recorded and printed
            result.error = f"{type(err).__name__}: {_last_line(err)}"
            print(f" failed\n  !! {name} FAILED: {result.error}", flush=True)
            continue
        print(f" {time.perf_counter() - start:.1f} s", flush=True)
        if exact is not None:
            result.extra["err_f64"] = relative_error(out, exact)
        if name == reference:
            ref_out = out.astype("float64")
        elif ref_out is None:
            result.check = {"ok": None, "reason": f"no reference: {reference} failed"}
        else:
            result.check = check_close(name, out, ref_out)
        runners[name] = runner
    timed = dict(runners)
    for name, kernel_of in (kernels or {}).items():
        if name in runners:
            try:
                timed[name + KERNEL_SUFFIX] = kernel_of(runners[name])
            except Skip as note:
                print(f"  {name}: its kernel is not timed alone: {note}", flush=True)
    if peak is not None:
        timed[PEAK] = peak
    timings = time_interleaved(timed, cfg)
    peak_runs = [peak.gflops(ms) for ms in timings.pop(PEAK).runs_ms] if peak else None
    for name, timing in timings.items():
        if name in results:
            results[name].timing, results[name].peak_runs = timing, peak_runs
        else:
            extra = results[name.removesuffix(KERNEL_SUFFIX)].extra
            extra.update(kernel_ms=timing.median_ms, kernel_min_ms=timing.min_ms)
            extra["kernel_runs_ms"] = timing.runs_ms
    return results


#: How ``run_case`` names an implementation's kernel among the runners it times.
KERNEL_SUFFIX = " kernel"
#: How ``run_case`` names the FMA peak's microkernel among the runners it times.
PEAK = "fma peak"


class Skip(Exception):
    """Raised by a preparer whose implementation is not available here."""


def best_of(results: dict[str, Result], names) -> tuple[str | None, float | None]:
    """The fastest of ``names`` that has a time: (name, ms)."""
    timed = [(results[n].ms, n) for n in names if n in results and results[n].ms]
    if not timed:
        return None, None
    ms, name = min(timed)
    return name, ms


def paired_ratio(a: Timing | None, b: Timing | None) -> float | None:
    """The median over rounds of ``a``'s time over ``b``'s in the same round: two
    implementations timed in turns (``time_interleaved``) see the same drift of the machine's
    load within a round, which this ratio cancels and the ratio of the medians does not."""
    if not (a and b):
        return None
    return statistics.median(x / y for x, y in zip(a.runs_ms, b.runs_ms))


def ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a and b else None


def case_record(results: dict[str, Result], versus, gflop=None, peak_gflops=None) -> dict:
    """The JSON record of one case: every result, the best peer and tvm_fuse's ratios.

    A "peer" is every implementation but tvm_fuse's own (``tvm_fuse*``); ``versus`` names the
    peers that get a ratio of their own (present or not, so that every record has the same
    keys).
    """
    fuse, stock = results["tvm_fuse"], results.get("tvm_nchwc")
    best, best_ms = best_of(results, [name for name in results if not name.startswith("tvm_fuse")])
    ratios = {"tvm_fuse/best_peer": ratio(fuse.ms, best_ms)}
    for name in versus:
        ratios[f"tvm_fuse/{name}"] = ratio(fuse.ms, results[name].ms if name in results else None)
    ratios["build tvm_fuse/tvm_nchwc"] = ratio(fuse.build_s, stock.build_s if stock else None)
    return {
        "results": {name: r.to_dict(gflop, peak_gflops) for name, r in results.items()},
        "best_peer": best,
        "ratios": ratios,
        "peak_gflops_in_rounds": next((r.peak_runs for r in results.values() if r.peak_runs), None),
        "ok": all_checks_ok(results),
    }


def all_checks_ok(results: dict[str, Result]) -> bool:
    """False when any implementation errored or failed its check (skips are fine)."""
    return all(
        not r.error and (r.check is None or r.check["ok"] is not False) for r in results.values()
    )


def print_peer_notes(impls) -> None:
    """Say which of the wanted peers are skipped and why."""
    wanted = {"pytorch": "torch", "onnxruntime": "onnxruntime"}
    libs = {wanted[name] for name in impls if name in wanted}
    if "onnxruntime" in libs:
        libs.add("torch")  # the ONNX file is exported from the PyTorch module
    for lib, note in peers_available().items():
        if lib in libs and note:
            print(f"note: peer skipped: {note}")


def add_output_options(parser, name: str) -> None:
    """``--results DIR`` and ``--json PATH`` (default ``DIR/<name>.json``); see ``json_path``."""
    parser.add_argument(
        "--results",
        type=Path,
        default=RESULTS,
        metavar="DIR",
        help=f"folder for the results (default: ./{RESULTS})",
    )
    parser.add_argument("--json", type=Path, metavar="PATH", help=f"JSON file (DIR/{name}.json)")
    parser.set_defaults(json_name=f"{name}.json")


def json_path(args) -> Path:
    """The JSON file of a run parsed with ``add_output_options``."""
    return args.json or args.results / args.json_name


def finish(payload: dict, json_path) -> int:
    """Write the JSON (if ``json_path``), say loudly if anything failed; the exit code."""
    if json_path:
        write_json(json_path, payload)
    if not payload["ok"]:
        print("!! some implementation failed or gave a wrong result: see ERROR/FAIL above")
    return 0 if payload["ok"] else 1


def status(res: dict) -> str:
    """One word for a ``Result.to_dict`` record: reference/ok/FAIL/unchecked/ERROR/skipped."""
    if res["skipped"]:
        return "skipped"
    if res["error"]:
        return "ERROR"
    if res["check"] is None:
        return "reference"
    return {True: "ok", False: "FAIL", None: "unchecked"}[res["check"]["ok"]]


# -- output --------------------------------------------------------------------------------
def fmt(value) -> str:
    """A table cell: floats with 2 decimals (3 below 1, 2 significant digits below 0.001),
    None as "-"."""
    if value is None:
        return "-"
    if isinstance(value, float) and 0 < abs(value) < 1e-3:
        return f"{value:.1e}"
    if isinstance(value, float):
        return f"{value:.2f}" if abs(value) >= 1 else f"{value:.3f}"
    return str(value)


def print_table(headers: list[str], rows: list[list], title: str | None = None) -> str:
    """Print (and return) a plain aligned text table of ``fmt`` cells."""
    cells = [[fmt(c) for c in row] for row in rows]
    widths = [max(len(h), *(len(r[i]) for r in cells)) for i, h in enumerate(headers)]
    lines = [title] if title else []
    lines.append("  ".join(h.rjust(w) for h, w in zip(headers, widths)))
    lines.append("  ".join("-" * w for w in widths))
    lines += ["  ".join(c.rjust(w) for c, w in zip(row, widths)) for row in cells]
    text = "\n".join(lines)
    print(text)
    return text


def machine_info() -> dict:
    """Where and with what the numbers were measured."""
    info = {
        "cpu": tvm.target.codegen.llvm_get_system_cpu(),
        "target": str(tvm_fuse.host_target()),
        "threads": THREADS,
        "tvm_num_threads": os.environ.get("TVM_NUM_THREADS"),
        "loadavg_at_start": os.getloadavg(),
        "python": platform.python_version(),
        "tvm": tvm.__version__,
        "date": time.strftime("%Y-%m-%d %H:%M:%S"),
        "argv": sys.argv,
    }
    for name in ("torch", "onnxruntime"):
        mod = sys.modules.get(name)
        info[name] = getattr(mod, "__version__", None)
    return info


def write_json(path: str | Path, payload: dict) -> Path:
    """Write ``payload`` (dataclasses and NumPy scalars allowed) as indented JSON."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(payload, indent=2, default=_json_default) + "\n")
    print(f"wrote {path}")
    return path


def _json_default(obj):
    if dataclasses.is_dataclass(obj):
        return dataclasses.asdict(obj)
    if isinstance(obj, np.generic):
        return obj.item()
    return str(obj)


def _last_line(err: Exception) -> str:
    """The message of ``err`` without TVM's C++ backtrace (its last non-empty line)."""
    lines = [line for line in str(err).strip().splitlines() if line.strip()]
    return lines[-1] if lines else repr(err)
