"""Tuning on the Relax backend (``relax.tuning``, ``relax.records``): records written, applied,
refused.

Tiny convs and 2-3 trials: the tests check what the records say and that a build with them
runs the recorded tiles and still computes the NumPy reference (within 1e-5 of max |reference|),
never which tiles are fastest.
"""

import dataclasses
import json

import numpy as np
import pytest
import tvm
import tvm_ffi
from tvm import relax

import tvm_fuse.relax as tfr
from helpers import conv_nchw, module, run, tensor_var
from reference import assert_close, conv2d_nchw
from tvm_fuse import cli, onnx_example, tuning_rule
from tvm_fuse.errors import UserError
from tvm_fuse.relax import api, commands, compat, kernel, records, tuning
from tvm_fuse.schedules import packing, tiling
from tvm_fuse.spec import KernelSpec

SHAPE, CO = (1, 8, 12, 12), 16


@pytest.fixture
def conv_model(rng):
    """conv 3x3 pad 1 (8 -> 16 channels, 12x12) -> ReLU, and its NumPy reference function."""
    w = rng.uniform(-0.5, 0.5, (CO, SHAPE[1], 3, 3)).astype("float32")
    mod = module([tensor_var("x", SHAPE)], lambda bb, x: relax.op.nn.relu(conv_nchw(x, w)))
    return mod, lambda x: np.maximum(conv2d_nchw(x, w, padding=(1, 1, 1, 1)), 0)


def _kernels(mod, target):
    """(GlobalVar, spec) of the fused fast kernels of the optimized ``mod``."""
    found = []
    for gv, func in mod.functions_items():
        spec = kernel.spec_of(func) if isinstance(func, compat.PrimFunc) else None
        if spec is not None and spec.lanes:
            found.append((gv, spec))
    return found


def test_tune_writes_records_with_the_model_first_and_the_fastest_kept(
    conv_model, tmp_path, target
):
    mod, _ = conv_model
    path = tmp_path / "records.json"
    done = tfr.tune(mod, target=target, trials=3, records=path)
    assert [p.name for p in tmp_path.iterdir()] == ["records.json"]  # no temporary file left
    payload = json.loads(path.read_text())
    (entry,) = payload["kernels"]
    (spec,) = [s for _, s in _kernels(api.optimize(mod, target=target), target)]
    assert KernelSpec.from_dict(entry["spec"]) == spec == done[0].spec
    trials = entry["trials"]
    assert len(trials) == 3 and all(t["ms"] > 0 for t in trials)
    model = records.tiles_to_dict(tiling.tiles_for(spec))
    assert trials[0]["tiles"] == model == entry["default"]["tiles"]
    assert len({json.dumps(t["tiles"], sort_keys=True) for t in trials}) == 3
    fastest = min(trials, key=lambda t: t["ms"])
    if fastest["tiles"] == model:  # the model won the pass: kept, nothing timed again
        assert entry["tiles"] == model and entry["ms"] == trials[0]["ms"]
    else:  # the pass's winner was timed again against the model: kept only if clearly faster
        assert entry["tiles"] in (fastest["tiles"], model)
        if entry["tiles"] == model:
            assert entry["ms"] == entry["default"]["ms"]
        else:
            assert entry["ms"] <= entry["default"]["ms"] * (1 - tuning_rule.MIN_GAIN)


def test_a_candidate_must_be_clearly_faster_to_replace_the_model(monkeypatch, target):
    spec = _spec()
    first, second, third = tuning.candidates(spec)[:3]
    cases = [
        ((1.0, 1.1, 1.2), None, first),  # the model fastest: no confirmation
        ((1.0, 0.99, 1.2), (1.0, 0.99), first),  # not 2 % faster: the model stays
        ((1.0, 0.9, 0.95), (1.0, 0.9), second),  # faster in the pass and in the confirmation
        ((1.0, 0.9, 0.95), (1.0, 1.0), first),  # the confirmation does not bear it out
    ]
    for first_pass, confirmation, want in cases:
        times = {t: [ms] for t, ms in zip([first, second, third], first_pass)}
        if confirmation:
            for tiles, ms in zip([first, second], confirmation):
                times[tiles] += [ms] * tuning_rule.CONFIRM_ROUNDS

        def timer(_spec, tiles, _target, _inputs, times=times):
            return lambda: times[tiles].pop(0)

        monkeypatch.setattr(tuning, "timer", timer)
        done = tuning.tune_kernel(spec, target, trials=3)
        assert done.best == want and done.default == first == tiling.tiles_for(spec)
        assert all(not left for left in times.values())  # every timing taken, no more


def _spec():
    """The packed (8 lanes) spec of ``conv_model``'s kernel."""
    spec = KernelSpec.conv((1, 12, 12, 8), (3, 3, 8, CO), (1, 1), (1, 1, 1, 1), (1, 1))
    spec = spec.with_epilogue(False, False, activation="relu")
    return dataclasses.replace(spec, weight=packing.packed_weight(spec, 8))


def test_candidates_are_distinct_kernels_the_kernel_takes():
    spec = _spec()
    found = tuning.candidates(spec)
    assert found[0] == tiling.tiles_for(spec) and len(set(found)) == len(found) > 3
    assert all(records.tiles_refusal(spec, t) is None for t in found)
    assert any(t.flat for t in found) and any(not t.flat for t in found)


@pytest.mark.parametrize(
    "data,co,flat",
    [((1, 9, 9, 16), 20, {True}), ((1, 1, 12, 8), 16, {False})],
    ids=["ragged_co_flat_only", "one_row_never_flat"],
)
def test_candidates_keep_the_models_layout_rules(data, co, flat):
    spec = KernelSpec.conv(data, (3, 3, data[3], co), (1, 1), (1, 1, 1, 1), (1, 1))
    spec = dataclasses.replace(spec, weight=packing.packed_weight(spec, 8))
    found = tuning.candidates(spec)
    assert {t.flat for t in found} == flat and len(found) > 3
    assert all(records.tiles_refusal(spec, t) is None for t in found)


def _write(path, target, spec, tiles):
    entry = {"spec": spec.to_dict(), "tiles": records.tiles_to_dict(tiles), "ms": 1.0}
    records.write(path, target, [entry])


def _other_tiles(spec):
    model = tiling.tiles_for(spec)
    return next(t for t in tuning.candidates(spec) if (t.owb, t.ocb) != (model.owb, model.ocb))


def test_build_runs_the_recorded_tiles_and_computes_right(conv_model, tmp_path, rng, target):
    mod, reference = conv_model
    optimized = api.optimize(mod, target=target)
    (gv, spec), = _kernels(optimized, target)
    tiles = _other_tiles(spec)
    path = tmp_path / "records.json"
    _write(path, target, spec, tiles)
    applied = records.apply(optimized, path, target)[gv]
    assert str(applied.attrs[records.TILES_ATTR]) == records.tiles_text(tiles)
    attrs = {name: applied.attrs[name] for name in ("global_symbol", records.TILES_ATTR)}
    assert tvm_ffi.structural_equal(applied, kernel.prim_func(spec, tiles).with_attrs(attrs))
    assert not tvm_ffi.structural_equal(applied, kernel.prim_func(spec).with_attrs(attrs))
    x = rng.standard_normal(SHAPE).astype("float32")
    got = run(tfr.build(mod, target=target, tuning_records=path), x)
    assert_close(got, reference(x), rel=1e-5)


def _one_line_error(call, *words):
    with pytest.raises(UserError) as err:
        call()
    message = str(err.value)
    assert "\n" not in message and all(w in message for w in words), message


def test_bad_records_are_one_line_errors(conv_model, tmp_path, target, monkeypatch):
    mod, _ = conv_model
    optimized = api.optimize(mod, target=target)
    (_, spec), = _kernels(optimized, target)
    path = tmp_path / "records.json"
    build = lambda: tfr.build(mod, target=target, tuning_records=path)  # noqa: E731
    _one_line_error(build, str(path), "does not exist")
    build_from_folder = lambda: tfr.build(mod, target=target, tuning_records=tmp_path)  # noqa: E731
    _one_line_error(build_from_folder, str(tmp_path), "is a directory")
    path.write_text('{"input": ["llvm", "conv2d_nhwc_fused.x86"], "result": [[0.1]]}\n')
    _one_line_error(build, str(path), "not tvm_fuse Relax tuning records")
    path.write_bytes(b"\xf5\x00garbage")
    _one_line_error(build, str(path), "not tvm_fuse Relax tuning records")
    path.unlink()
    _write(path, compat.target_from_text("llvm -mcpu=skylake-avx512"), spec, tiling.tiles_for(spec))
    _one_line_error(build, str(path), "skylake-avx512", "tune again")
    path.unlink()
    _write(path, target, spec, tiling.Tiles(owb=4, ocb=3, icb=8))  # 2 channel vectors
    _one_line_error(build, str(path), "record 1", "ocb=3")
    path.unlink()
    other = tfr.describe(api.optimize(_other_model(), target=target))[0]
    _write(path, target, other, tiling.tiles_for(other))
    _one_line_error(build, str(path), "none of its 1 records", "tune this model")
    path.write_text(path.read_text().replace('"owb"', '"wide"'))
    _one_line_error(build, str(path), "record 1 is malformed")
    _one_line_error(lambda: tfr.tune(mod, target=target, trials=0, records=path), "trials=0")
    model = tmp_path / "model.onnx"
    model.write_bytes(b"\x08\x07")
    measured = []
    monkeypatch.setattr(tuning, "tune_kernel", lambda *args: measured.append(args))
    _one_line_error(lambda: tfr.tune(mod, target=target, records=model), "not tvm_fuse Relax")
    assert not measured and model.read_bytes() == b"\x08\x07"  # refused before any tuning


def _other_model():
    w = np.ones((32, 8, 1, 1), "float32")
    return module([tensor_var("x", SHAPE)], lambda bb, x: conv_nchw(x, w, padding=0))


def test_records_of_two_models_share_a_file_but_not_a_target(tmp_path, target):
    path = tmp_path / "records.json"
    spec = _spec()
    other = tfr.describe(api.optimize(_other_model(), target=target))[0]
    _write(path, target, spec, tiling.tiles_for(spec))
    _write(path, target, other, tiling.tiles_for(other))
    _write(path, target, spec, _other_tiles(spec))  # replaces the first record
    found = records.best_tiles(path, target)
    assert found == {spec.to_json(): _other_tiles(spec), other.to_json(): tiling.tiles_for(other)}
    avx512 = compat.target_from_text("llvm -mcpu=skylake-avx512")
    _one_line_error(lambda: _write(path, avx512, spec, tiling.tiles_for(spec)), "another file")
    assert records.best_tiles(path, target) == found
    assert sorted(p.name for p in tmp_path.iterdir()) == ["records.json"]


def test_cli_tunes_and_compiles_with_the_records(tmp_path, rng, capsys, monkeypatch):
    ort = pytest.importorskip("onnxruntime")
    monkeypatch.chdir(tmp_path)
    model = onnx_example.residual_block(tmp_path / "block.onnx")
    argv = ["tune", model, "-o", "rec.json", "--trials", "2", "--backend", "relax"]
    assert cli.main(argv) == 0
    out = capsys.readouterr().out
    specs = set(tfr.describe(tfr.optimize(commands.load(model))))
    tunable = [spec for spec in specs if records.is_tunable(spec)]
    assert tunable  # the other conv may take Winograd, whose plan is not tuned
    assert f"wrote records for {len(tunable)} kernels to rec.json" in out
    assert cli.main(["compile", model, "--tuning-records", "rec.json", "-o", "b.so"]) == 0
    vm = relax.VirtualMachine(tvm.runtime.load_module(str(tmp_path / "b.so")), tvm.cpu())
    x = rng.standard_normal((1, 3, 16, 16)).astype("float32")
    want = ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, {"data": x})[0]
    assert_close(vm["main"](tvm.runtime.tensor(x)).numpy(), want)
    assert cli.main(["tune", model, "-o", "rec.json", "--rpc-key", "k"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--rpc-key" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["b.so", "block.onnx", "rec.json"]


def test_a_record_for_another_algorithm_is_refused(tmp_path, target):
    winograd = dataclasses.replace(_spec(), algorithm="winograd", winograd_tile=2)
    path = tmp_path / "records.json"
    _write(path, target, winograd, tiling.tiles_for(_spec()))
    _one_line_error(lambda: records.best_tiles(path, target), "not a direct fast kernel")
