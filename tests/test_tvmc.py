"""tvm_fuse as a tvmc composite target: the package it writes is an ordinary tvmc package.

The model is written here with ``onnx.helper`` (``tvm_fuse.onnx_example``: conv + BN + relu,
a residual add, pooling and a dense layer, NCHW, static shapes). The reference is the same ONNX
file compiled by stock tvmc's ``compile`` (``STOCK_TVMC``); both packages are run by the stock
``python -m tvm.driver.tvmc run`` and their ``--outputs`` compared.
"""

import json
import os
import subprocess
import sys
import tarfile

import numpy as np
import pytest
import tvm
from tvm import autotvm
from tvm.driver import tvmc as stock_tvmc
from tvm.driver.tvmc import composite_target, frontends
from tvm.driver.tvmc.target import target_from_cli

import tvm_fuse
from tvm_fuse import cli, onnx_compat, onnx_example
from tvm_fuse import tvmc as fuse_tvmc
from tvm_fuse.testing import MODEL_RTOL, TUNABLE_KERNELS, fused_workloads, relative_error
from tvm_fuse.memory.apply import plan_storage
from tvm_fuse.tuning import check_records
from tvm_fuse.schedules import conv2d_nhwc_fused

TARGET = str(tvm_fuse.host_target())
FUSED_KERNEL = "fused_tvm_fuse_conv2d_nhwc_fused"
#: The reference compiler: stock tvmc with only ``onnx.mapping`` put back where onnx >= 1.19
#: removed it (TVM 0.19's importer reads it; ``tvm_fuse.onnx_compat``, which imports no TVM and
#: registers nothing of tvm_fuse's).
STOCK_TVMC = (
    "-c",
    "from tvm_fuse import onnx_compat; onnx_compat.install(); "
    "from tvm.driver.tvmc.main import main; main()",
)


def _python(*args, cwd=None) -> subprocess.CompletedProcess:
    env = {**os.environ, "TOPHUB_LOCATION": "NONE"}
    done = subprocess.run(
        [sys.executable, *args], capture_output=True, text=True, env=env, cwd=cwd, timeout=900
    )
    assert done.returncode == 0, f"{args[:3]} failed:\n{done.stdout}\n{done.stderr[-3000:]}"
    return done


def _stock_run(package, inputs, out) -> dict:
    """Run ``package`` with the stock tvmc runner; its ``--outputs`` as a dict."""
    run = ["-m", "tvm.driver.tvmc", "run", "--inputs", inputs, "--outputs", out]
    done = _python(*run, "--print-top", "3", package)
    assert "[[" in done.stdout  # --print-top printed the top classes
    with np.load(out) as outputs:
        return dict(outputs)


def _kernel_names(package) -> list[str]:
    with tarfile.open(package) as tar:
        graph = json.load(tar.extractfile("mod.json"))
    return [n["attrs"]["func_name"] for n in graph["nodes"] if n["op"] == "tvm_op"]


def _assert_same_outputs(got: dict, ref: dict) -> None:
    assert sorted(got) == sorted(ref)
    for name, value in ref.items():
        assert got[name].shape == value.shape
        assert relative_error(got[name], value) <= MODEL_RTOL
        np.testing.assert_array_equal(np.argsort(got[name])[:, -3:], np.argsort(value)[:, -3:])


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    """The ONNX model, seeded inputs, and the stock tvmc compile + run of it. The tests load the
    model with stock tvmc's ``frontends`` in this process too: ``onnx.mapping`` first."""
    onnx_compat.install()
    root = tmp_path_factory.mktemp("tvmc")
    model = onnx_example.residual_block(root / "block.onnx")
    inputs = str(root / "inputs.npz")
    data = np.random.default_rng(1).standard_normal((1, 3, 16, 16)).astype("float32")
    np.savez(inputs, data=data)
    stock = str(root / "stock.tar")
    _python(*STOCK_TVMC, "compile", "--target", TARGET, "-o", stock, model)
    return {
        "root": root,
        "model": model,
        "inputs": inputs,
        "stock": _stock_run(stock, inputs, str(root / "stock_out.npz")),
    }


# -- the registry entry (no build) ---------------------------------------------------------------
def test_register_adds_the_four_keys_tvmc_reads():
    fuse_tvmc.register()
    fuse_tvmc.register()  # idempotent
    entry = composite_target.get_codegen_by_target("tvm_fuse")
    assert set(entry) == {"config_key", "pass_default", "default_target", "pass_pipeline"}
    assert entry["pass_pipeline"] is fuse_tvmc.pass_pipeline


def test_tvmc_builds_everything_for_the_llvm_target():
    """``tvm_fuse`` is an extra target, not a target kind: no external codegen gets the graph."""
    fuse_tvmc.register()
    target, extras = target_from_cli("tvm_fuse, llvm -mcpu=znver3")
    assert target.kind.name == "llvm" and str(target.attrs["mcpu"]) == "znver3"
    assert [(e["name"], e["is_tvm_target"]) for e in extras] == [("tvm_fuse", False)]


def test_pass_pipeline_fuses_and_does_not_partition(work):
    model = frontends.load_model(work["model"])
    mod = fuse_tvmc.pass_pipeline(model.mod, model.params, mod_name="default")
    kernels = tvm_fuse.describe(mod)
    assert [k.ops for k in kernels] == [
        ("conv2d", "bias", "relu"),
        ("conv2d", "bias", "add", "relu"),
    ]
    assert all(not (f.attrs and "Compiler" in f.attrs) for f in mod.functions.values())
    assert [p.name_hint for p in mod["main"].params] == ["data"]


def test_composite_target_options_other_than_the_algorithm_are_refused(work):
    model = frontends.load_model(work["model"])
    with pytest.raises(stock_tvmc.TVMCException, match="takes only the options"):
        fuse_tvmc.pass_pipeline(model.mod, model.params, tiles="4")
    with pytest.raises(stock_tvmc.TVMCException, match="unknown precision"):
        fuse_tvmc.pass_pipeline(model.mod, model.params, precision="fastest")


def test_composite_target_algorithm_option_reaches_the_graph_half(work):
    """``--target "tvm_fuse -algorithm=direct, llvm"`` gives tvmc's pipeline the option."""
    model = frontends.load_model(work["model"])
    mod = fuse_tvmc.pass_pipeline(model.mod, model.params, algorithm="direct")
    assert {k.algorithm for k in tvm_fuse.describe(mod)} == {"direct"}


# -- packages run by the stock tvmc (builds) ---------------------------------------------------------
def test_package_runs_with_stock_tvmc_and_matches_stock_compile(work):
    package = str(work["root"] / "fused.tar")
    target = f"tvm_fuse, {TARGET}"
    _python("-m", "tvm_fuse.tvmc", "compile", "--target", target, "-o", package, work["model"])
    assert sum(FUSED_KERNEL in name for name in _kernel_names(package)) == 2
    got = _stock_run(package, work["inputs"], str(work["root"] / "fused_out.npz"))
    _assert_same_outputs(got, work["stock"])
    # the graph carries tvm_fuse's memory plan, which is smaller than TVM's on this model
    with tarfile.open(package) as tar:
        in_package = plan_storage(tar.extractfile("mod.json").read().decode())
    model = frontends.load_model(work["model"])
    on_tvms = plan_storage(tvm_fuse.build(model.mod, model.params, memory="tvm").get_graph_json())
    assert on_tvms.applied and on_tvms.plan_bytes < on_tvms.tvm_bytes
    assert in_package.tvm_bytes == on_tvms.plan_bytes and not in_package.applied


def test_tvm_fuse_tvmc_keeps_the_stock_options(capsys):
    with pytest.raises(SystemExit) as exit_:
        cli.main(["tvmc", "compile", "--help"])  # what `tvm-fuse tvmc compile --help` runs
    assert exit_.value.code == 0
    out = capsys.readouterr().out
    for option in ("--tuning-records", "--input-shapes", "--pass-config", "--target", "FILE"):
        assert option in out


def _write_records(path, workloads, index=0, costs=(1e-4,)) -> dict:
    """Records of config ``index`` of each workload (0: not the analytic fallback), one per
    cost in seconds, appended to ``path``."""
    chosen = {}
    with open(path, "a", encoding="utf-8") as log:
        for workload in workloads:
            task = autotvm.task.create(workload[0], workload[1:], target=TARGET)
            config = task.config_space.get(index)
            inp = autotvm.measure.MeasureInput(task.target, task, config)
            for seconds in costs:
                res = autotvm.measure.MeasureResult((seconds,), 0, 1.0, 0.0)
                log.write(autotvm.record.encode(inp, res) + "\n")
            chosen[workload] = config.index
    return chosen


def _applied_configs(monkeypatch) -> dict:
    """Fused-kernel workload -> config index, filled as tvmc's ``apply_history_best`` answers."""
    applied = {}

    class Spy(autotvm.task.ApplyHistoryBest):
        def _query_inside(self, target, workload):
            config = super()._query_inside(target, workload)
            if workload[0] in TUNABLE_KERNELS and config is not None:
                applied[workload] = config.index
            return config

    monkeypatch.setattr(autotvm, "apply_history_best", Spy)
    return applied


def test_tuning_records_pass_through_to_the_fused_kernels(work, monkeypatch):
    model = frontends.load_model(work["model"])
    workloads = fused_workloads(model.mod, model.params, target=TARGET)
    assert len(workloads) == 2
    records = str(work["root"] / "records.log")
    chosen = _write_records(records, workloads)

    applied = _applied_configs(monkeypatch)
    package = str(work["root"] / "tuned.tar")
    argv = ["compile", "--target", f"tvm_fuse, {TARGET}", "--tuning-records", records]
    assert fuse_tvmc.main(argv + ["-o", package, work["model"]]) == 0
    assert {w: applied.get(w) for w in chosen} == chosen
    got = _stock_run(package, work["inputs"], str(work["root"] / "tuned_out.npz"))
    _assert_same_outputs(got, work["stock"])


def test_tvmc_applies_records_by_their_median_as_tvm_fuse_build_does(work, monkeypatch):
    """Config 1 was fastest once and slow three times since, config 2 steady: tvmc's own rule
    (the fastest record) would apply 1; with the tvm_fuse target it applies 2."""
    model = frontends.load_model(work["model"])
    workloads = fused_workloads(model.mod, model.params, target=TARGET)
    records = str(work["root"] / "measured_again.log")
    _write_records(records, workloads, index=1, costs=(0.5e-4, 2e-4, 2e-4, 2e-4))
    steady = _write_records(records, workloads, index=2, costs=(1e-4,) * 4)
    applied = _applied_configs(monkeypatch)
    package = str(work["root"] / "median.tar")
    argv = ["compile", "--target", f"tvm_fuse, {TARGET}", "--tuning-records", records]
    assert fuse_tvmc.main(argv + ["-o", package, work["model"]]) == 0
    assert applied == steady


# -- tvmc tune with the composite target -------------------------------------------------------------
def _fused_task_indices(listing: str) -> list[str]:
    """The indices of the fused-kernel tasks in ``tvmc tune --tasks list``'s table."""
    rows = [
        line.split(".", 1)
        for line in listing.splitlines()
        if any(name in line for name in TUNABLE_KERNELS)
    ]
    return [index.strip() for index, _ in rows]


def test_tvmc_tune_tunes_the_fused_kernels_and_compile_applies_the_records(
    work, capsys, monkeypatch
):
    log = str(work["root"] / "tvmc_tune.log")
    tune = ["tune", "--target", "tvm_fuse, llvm -mcpu=native", "-o", log]
    assert not fuse_tvmc.main(tune + ["--tasks", "list", work["model"]])
    fused = _fused_task_indices(capsys.readouterr().out)
    assert len(fused) == 2  # conv-bn-relu and conv-bn-add-relu, besides the dense layer's
    measure = ["--trials", "2", "--number", "1", "--repeat", "1", "--tasks", ",".join(fused)]
    assert not fuse_tvmc.main(tune + measure + [work["model"]])

    records = list(autotvm.record.load_from_file(log))
    assert {inp.task.name for inp, _ in records} <= set(TUNABLE_KERNELS)
    model = frontends.load_model(work["model"])
    assert {inp.task.workload for inp, _ in records} == set(
        fused_workloads(model.mod, model.params, target=TARGET)
    )
    assert check_records(log, TARGET)  # the same records as tvm-fuse tune's

    ok = [(np.mean(r.costs), i.task.workload, i.config.index) for i, r in records if not r.error_no]
    best = {}  # the fastest record of each workload (one record per config: also the median's)
    for _, workload, index in sorted(ok, key=lambda measured: measured[0]):
        best.setdefault(workload, index)
    applied = _applied_configs(monkeypatch)
    package = str(work["root"] / "tvmc_tuned.tar")
    argv = ["compile", "--target", f"tvm_fuse, {TARGET}", "--tuning-records", log]
    assert fuse_tvmc.main(argv + ["-o", package, work["model"]]) == 0
    assert applied == best
    got = _stock_run(package, work["inputs"], str(work["root"] / "tvmc_tuned_out.npz"))
    _assert_same_outputs(got, work["stock"])


def test_native_cpu_is_resolved_on_the_tvmc_path():
    cpu = tvm.target.codegen.llvm_get_system_cpu()
    argv = ["compile", "--target", "tvm_fuse, llvm -mcpu=native", "--target-llvm-mcpu", "native"]
    assert fuse_tvmc.resolve_native(argv) == [
        "compile",
        "--target",
        f"tvm_fuse, llvm -mcpu={cpu}",
        "--target-llvm-mcpu",
        cpu,
    ]
    assert fuse_tvmc.resolve_native(["--target=llvm -mcpu=native"]) == [
        f"--target=llvm -mcpu={cpu}"
    ]


@pytest.mark.parametrize(
    "argv, want",
    [
        (["tune", "m.onnx"], ["tune", "--tuner", "ga", "m.onnx"]),  # tvmc's xgb cannot run
        (["tune", "--tuner", "random", "m.onnx"], ["tune", "--tuner", "random", "m.onnx"]),
        (["tune", "--tuner=grid", "m.onnx"], ["tune", "--tuner=grid", "m.onnx"]),
        (["compile", "m.onnx"], ["compile", "m.onnx"]),
    ],
)
def test_tvmc_tune_without_xgboost_takes_ga(argv, want, monkeypatch, capsys):
    monkeypatch.setattr(fuse_tvmc, "default_tuner", lambda: "ga")  # xgboost not importable
    assert fuse_tvmc.tuner_for_here(argv) == want
    assert ("--tuner ga" in capsys.readouterr().err) == (want != argv)
    monkeypatch.setattr(fuse_tvmc, "default_tuner", lambda: "xgb")
    assert fuse_tvmc.tuner_for_here(argv) == argv  # with xgboost: tvmc's own default


@pytest.mark.parametrize("argv", [["tune", "--tuner", "xgb_knob", "m"], ["tune", "--tuner=xgb"]])
def test_tvmc_tune_refuses_an_xgb_tuner_without_xgboost_in_one_line(argv, monkeypatch, capsys):
    monkeypatch.setattr(fuse_tvmc, "default_tuner", lambda: "ga")
    assert cli.main(["tvmc", *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "needs xgboost" in err and "--tuner ga" in err, err
