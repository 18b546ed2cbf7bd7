"""tvm_fuse.tuning: task extraction, record validation and application, local tuning, the CLI.

Tuning through a tracker (and the failure / Ctrl-C paths, which are cheaper there) is in
``test_tune_rpc.py``. Logs here are written with ``autotvm.record.encode`` from real tasks, so
no measurement is needed to test how they are checked and applied.
"""

import argparse
import io
import json
import re
import time

import pytest
import tvm
import tvm.relay.testing
from tvm import autotvm
from tvm.autotvm.measure import MeasureInput, MeasureResult
from tvm.autotvm.measure import measure

import tvm_fuse
from tvm_fuse import dispatch, examples, onnx_example, strategy, testing, tuning_rule
from tvm_fuse.schedules import conv2d_nhwc_fused, winograd
from tvm_fuse.errors import UserError
from tvm_fuse.tuning import (
    RecordsError,
    check_records,
    cli,
    extract_tasks,
    records_to_apply,
    tuner,
)

FAST = "conv2d_nhwc_fused.x86"


def write_log(path, task, indices, target=None, cost=1e-3, error_no=0):
    """A log with one record of ``task`` per config index, each measured at ``cost`` seconds
    (a list: one cost per index)."""
    costs = cost if isinstance(cost, list) else [cost] * len(indices)
    with open(path, "a", encoding="utf-8") as log:
        for index, seconds in zip(indices, costs):
            inp = MeasureInput(target or task.target, task, task.config_space.get(index))
            res = MeasureResult((seconds,), error_no, 0.1, time.time())
            log.write(autotvm.record.encode(inp, res) + "\n")
    return str(path)


def applied_index(records, task) -> int:
    with autotvm.apply_history_best(records) as best:
        return best.query(task.target, task.workload).index


@pytest.fixture(scope="module")
def layer_task():
    mod, params = examples.small_layer()
    (task,) = extract_tasks(mod, params)
    return task


def task_of(mod, params):
    (task,) = extract_tasks(mod, params)
    return task


# -- task extraction ---------------------------------------------------------------------------
def test_tasks_are_the_workloads_the_build_queries():
    mod, params = examples.basic_block(data_shape=(1, 16, 14, 14))
    tasks = extract_tasks(mod, params)
    assert [t.name for t in tasks] == [FAST] * len(tasks)
    assert {t.workload for t in tasks} == set(testing.fused_workloads(mod, params))
    assert len(tasks) == 2  # conv1 and conv2 (+ residual): different workloads
    for task in tasks:  # the logical task: the HWIO weight, and the lanes it is packed with
        fields = conv2d_nhwc_fused.describe_workload(task.workload)
        assert fields["weight"][1] == (3, 3, 16, 16)
        assert fields["lanes"] == strategy.simd_lanes(tvm_fuse.host_target())


def test_generic_fallback_gives_no_task():
    mod, params = examples.small_layer(
        size=2
    )  # a tiny output: the generic kernel, which has no knobs
    (spec,) = tvm_fuse.describe(tvm_fuse.optimize(mod, params))
    assert strategy.fast_path_refusal(spec, tvm_fuse.host_target()) is not None
    assert extract_tasks(mod, params) == []


@pytest.mark.slow
def test_resnet18_one_task_per_distinct_fast_workload():
    mod, params = tvm.relay.testing.resnet.get_workload(num_layers=18)
    target = tvm_fuse.host_target()
    specs = tvm_fuse.describe(tvm_fuse.optimize(mod, params))
    fast = {s for s in specs if strategy.fast_path_refusal(s, target) is None}
    tasks = extract_tasks(mod, params, target)
    assert len(tasks) == len(fast) == 17  # 16 convs and the classifier (passes/dense.py)
    assert len({t.workload for t in tasks}) == len(tasks)


# -- records: validated as a whole, then applied -------------------------------------------------
def test_records_of_another_layer_build_with_the_default(tmp_path, layer_task):
    log = write_log(tmp_path / "other.log", layer_task, [3])
    mod, params = examples.small_layer(cin=8, size=12, channels=24, kernel=1, padding=0)
    testing.assert_matches_stock(mod, params, tvm_fuse.build(mod, params, tuning_records=log))


def test_applied_records_change_the_schedule_and_stay_correct(tmp_path, layer_task):
    space = layer_task.config_space
    index = next(i for i in range(len(space)) if space.get(i)["ic_outside"].val == 1)
    log = write_log(tmp_path / "own.log", layer_task, [index])
    records = check_records(log)
    with autotvm.apply_history_best(records) as best:
        chosen = best.query(layer_task.target, layer_task.workload)
    assert chosen.index == index and not chosen.is_fallback
    mod, params = examples.small_layer()
    testing.assert_matches_stock(mod, params, tvm_fuse.build(mod, params, tuning_records=log))


def test_a_config_measured_once_applies_by_its_time_as_in_autotvm(tmp_path, layer_task):
    log = write_log(tmp_path / "once.log", layer_task, [1, 2, 3], cost=[3e-3, 1e-3, 2e-3])
    assert applied_index(records_to_apply(log), layer_task) == 2
    assert applied_index(check_records(log), layer_task) == 2


def test_a_config_measured_again_applies_by_its_median(tmp_path, layer_task):
    """Config 1 was fastest once and slower in three measurements since; config 2 was steady:
    AutoTVM's rule (the lowest time) applies 1, tvm_fuse's (the lowest median) 2. Failed
    measurements count for nothing."""
    log = tmp_path / "again.log"
    write_log(log, layer_task, [1, 1, 1, 1], cost=[0.5e-3, 1.2e-3, 1.3e-3, 1.2e-3])
    write_log(log, layer_task, [2, 2, 2, 2], cost=[1.0e-3, 1.1e-3, 0.9e-3, 1.0e-3])
    write_log(log, layer_task, [3], cost=1e-5, error_no=4)
    assert applied_index(check_records(log), layer_task) == 1
    chosen = records_to_apply(log)
    assert {inp.config.index for inp, _ in chosen} == {2} and len(chosen) == 4
    assert applied_index(chosen, layer_task) == 2
    built = dispatch.checked_records(log, layer_task.target)  # what tvm_fuse.build applies
    assert [inp.config.index for inp, _ in built] == [2, 2, 2, 2]


@pytest.mark.parametrize("other_ms, applied", [(0.99, "default"), (0.97, "other")])
def test_a_config_replaces_the_default_only_when_clearly_faster(
    tmp_path, layer_task, other_ms, applied
):
    """Both measured three times: the other config applies only when its median is at least
    ``tuning_rule.MIN_GAIN`` (2 %) below the default's; AutoTVM's rule takes it either way."""
    default = tuner.default_config_index(layer_task)
    other = 0 if default else 1
    log = tmp_path / "margin.log"
    write_log(log, layer_task, [default] * 3, cost=[1.0e-3, 1.01e-3, 1.0e-3])
    write_log(log, layer_task, [other] * 3, cost=[other_ms * 1e-3] * 3)
    assert applied_index(check_records(log), layer_task) == other
    want = other if applied == "other" else default
    assert applied_index(records_to_apply(log), layer_task) == want


@pytest.fixture(scope="module")
def winograd_task():
    # 3x3, 32 channels, 16x16: Winograd F(4x4) on every kind of core (16 channels: not with
    # full-width AVX-512, whose direct kernel is twice as fast)
    mod, params = examples.small_layer(cin=32, size=16, channels=32)
    return mod, params, task_of(mod, params)


def test_a_log_of_winograd_records_alone_is_checked_and_applied(tmp_path, winograd_task):
    """A model whose only tunable kernel is the Winograd one tunes to a log without a record of
    the direct kernel: its knobs are checked and the build applies it (not the fallback)."""
    mod, params, task = winograd_task
    assert task.name == winograd.NAME
    default = tuner.default_config_index(task)
    index = next(i for i in range(len(task.config_space)) if i != default)
    log = write_log(tmp_path / "winograd.log", task, [index])
    records = check_records(log)
    with autotvm.apply_history_best(records) as best:
        chosen = best.query(task.target, task.workload)
    assert chosen.index == index and not chosen.is_fallback
    testing.assert_matches_stock(mod, params, tvm_fuse.build(mod, params, tuning_records=log))


def test_the_winograd_default_is_kept_within_the_margin(tmp_path, winograd_task):
    _, _, task = winograd_task
    default = tuner.default_config_index(task)
    other = 0 if default else 1
    log = tmp_path / "winograd_margin.log"
    write_log(log, task, [default] * 3, cost=1e-3)
    write_log(log, task, [other] * 3, cost=0.99e-3)  # 1 % faster: not enough
    assert {inp.config.index for inp, _ in records_to_apply(log)} == {default}


def test_a_winograd_knob_outside_its_config_space_refuses_the_log(tmp_path, winograd_task):
    mod, params, task = winograd_task
    (line,) = open(write_log(tmp_path / "good.log", task, [0]), encoding="utf-8").readlines()
    row = json.loads(line)
    row["config"]["entity"] = [
        [knob, kind, 99 if knob == "block_rows" else value]  # the map has 4 tile rows
        for knob, kind, value in row["config"]["entity"]
    ]
    bad = tmp_path / "bad.log"
    bad.write_text(json.dumps(row) + "\n", encoding="utf-8")
    message = f"line 1 sets block_rows=99, which is not one of {winograd.NAME}'s choices"
    with pytest.raises(RecordsError, match=re.escape(message)):
        check_records(bad)
    with pytest.raises(RecordsError, match=re.escape(message)):
        tvm_fuse.build(mod, params, tuning_records=str(bad))


def corrupt(lines):
    return lines[:1] + ["{not json at all\n"] + lines[1:]


def other_target(lines):
    return [re.sub(r"-mcpu=\w+", "-mcpu=skylake", line) for line in lines]


def other_op(lines):
    rows = [json.loads(line) for line in lines]
    for row in rows:
        row["input"][1] = "dense_pack.x86"
    return [json.dumps(row) + "\n" for row in rows]


def stale_knobs(lines):
    rows = [json.loads(line) for line in lines]
    for row in rows:
        row["config"]["entity"] = row["config"]["entity"][:-1]
    return [json.dumps(row) + "\n" for row in rows]


@pytest.mark.parametrize(
    "spoil, message",
    [
        (corrupt, "line 2 is not an AutoTVM record"),
        (other_target, "line 1 was tuned for"),
        (other_op, "no record of conv2d_nhwc_fused.x86"),
        (stale_knobs, "another version of the schedule"),
        (lambda lines: [], "no tuning records"),
    ],
)
def test_bad_logs_are_refused_whole(tmp_path, layer_task, spoil, message):
    good = write_log(tmp_path / "good.log", layer_task, [0, 1])
    with open(good, encoding="utf-8") as f:
        lines = f.readlines()
    bad = tmp_path / "bad.log"
    bad.write_text("".join(spoil(lines)), encoding="utf-8")
    with pytest.raises(RecordsError, match=message):
        check_records(bad)
    mod, params = examples.small_layer()
    with pytest.raises(RecordsError, match=message):
        tvm_fuse.build(mod, params, tuning_records=str(bad))
    assert isinstance(autotvm.task.DispatchContext.current, autotvm.task.FallbackContext)


def test_missing_log_is_refused(tmp_path):
    with pytest.raises(RecordsError, match="does not exist"):
        check_records(tmp_path / "nope.log")


# -- tuning locally ------------------------------------------------------------------------------
def test_default_config_index_is_the_fallback_schedule(layer_task):
    """The config the tuner measures first lowers to exactly the untuned (fallback) kernel."""

    def lowered(config):
        with layer_task.target:
            return str(tvm.lower(*layer_task.instantiate(config)))

    index = tuner.default_config_index(layer_task)
    fallback = autotvm.task.space.FallbackConfigEntity()
    assert lowered(layer_task.config_space.get(index)) == lowered(fallback)
    other = 0 if index else 1  # owb = 1: a different register tile
    assert lowered(layer_task.config_space.get(other)) != lowered(fallback)


def test_tune_locally_then_build_with_the_records(tmp_path):
    mod, params = examples.small_layer()
    log, stream = tmp_path / "tune.log", io.StringIO()
    # A generous timeout: the other test worker may be compiling while this one measures.
    runner = tuner.local_runner(number=1, repeat=1, timeout=60)
    done = tvm_fuse.tune(
        mod, params, log_file=log, n_trial=4, runner=runner, tuner="random", stream=stream
    )
    (task,) = done.tasks
    again = 2 * tuning_rule.CONFIRM_ROUNDS if task.confirmed else 0  # the best was not the default
    assert task.trials == 4 and done.records_written == 4 + again
    assert task.best_seconds and task.best_gflops > 0
    records = check_records(log)
    assert len(records) == 4 + again and all(res.error_no == 0 for _, res in records)
    assert records[0][0].config.index == tuner.default_config_index(task_of(mod, params))
    assert "[1/1] data [1,14,14,16]" in stream.getvalue() and "4/4 trials" in stream.getvalue()
    testing.assert_matches_stock(mod, params, tvm_fuse.build(mod, params, tuning_records=str(log)))


class ScriptedMeasure(measure.Builder, measure.Runner):
    """Builder and runner in one that measures nothing: config ``index``'s k-th measurement
    takes ``times[index][k]`` seconds (the last one once they run out), any other config 9 ms."""

    def __init__(self, times: dict):
        measure.Builder.__init__(self, n_parallel=2)
        self.times, self.measured = times, []

    def set_task(self, task, build_kwargs=None):  # pylint: disable=arguments-differ
        measure.Builder.set_task(self, task, build_kwargs)

    def get_build_kwargs(self):
        return {}

    def build(self, measure_inputs):
        return [None] * len(measure_inputs)

    def run(self, measure_inputs, build_results):
        results = []
        for inp in measure_inputs:
            index = inp.config.index
            times = self.times.get(index, [9e-3])
            seconds = times[min(self.measured.count(index), len(times) - 1)]
            self.measured.append(index)
            results.append(MeasureResult((seconds,), 0, 0.0, time.time()))
        return results


@pytest.mark.parametrize(
    "searched_later, applied",
    [(1.2e-3, "default"), (0.99e-3, "default"), (0.6e-3, "searched")],
)
def test_the_search_best_is_measured_again_against_the_default(
    tmp_path, layer_task, searched_later, applied
):
    """The search's best (0.5 ms once) is measured ``CONFIRM_ROUNDS`` more times alternately with
    the default (1 ms): it applies only if its median stays clearly (2 %) below the default's."""
    mod, params = examples.small_layer()
    default = tuner.default_config_index(layer_task)
    searched = 0 if default else 1  # the grid tuner's first config
    measure = ScriptedMeasure({default: [1e-3], searched: [0.5e-3, searched_later]})
    log, stream = tmp_path / "confirm.log", io.StringIO()
    done = tvm_fuse.tune(
        mod, params, log_file=log, n_trial=3, runner=measure, builder=measure, tuner="grid",
        stream=stream,
    )
    (task,) = done.tasks
    rounds = [default, searched] * tuning_rule.CONFIRM_ROUNDS
    assert measure.measured[0] == default and measure.measured[-len(rounds):] == rounds
    assert task.trials == 3 and done.records_written == 3 + len(rounds)
    assert task.best_index == searched and task.best_seconds == 0.5e-3
    assert task.confirmed == (1e-3, searched_later)
    assert applied_index(check_records(log), layer_task) == searched  # AutoTVM's rule
    want = searched if applied == "searched" else default
    assert applied_index(records_to_apply(log), layer_task) == want
    winner = "the search's best" if applied == "searched" else "the default"
    assert "medians: default 1.000 ms, search's best" in stream.getvalue()
    assert f"{winner} applies" in stream.getvalue()


def test_no_confirmation_when_the_default_is_the_best(tmp_path, layer_task):
    mod, params = examples.small_layer()
    default = tuner.default_config_index(layer_task)
    measure = ScriptedMeasure({default: [1e-3]})
    done = tvm_fuse.tune(
        mod, params, log_file=tmp_path / "d.log", n_trial=3, runner=measure, builder=measure,
        tuner="grid", stream=io.StringIO(),
    )
    assert done.records_written == 3 and done.tasks[0].confirmed is None
    assert len(measure.measured) == 3


@pytest.mark.parametrize(
    "options, message",
    [
        ({"tuner": "annealing"}, "unknown tuner"),
        ({"tracker": "127.0.0.1:9190"}, "needs both"),
        ({"tracker": "nowhere", "key": "k"}, "not host:port"),
        ({"runner": object(), "key": "k", "tracker": "h:1"}, "not both"),
    ],
)
def test_bad_tune_options_fail_before_any_work(tmp_path, options, message):
    mod, params = examples.small_layer()
    with pytest.raises(ValueError, match=message):
        tvm_fuse.tune(mod, params, log_file=tmp_path / "x.log", **options)
    assert not (tmp_path / "x.log").exists()


# -- the command line ----------------------------------------------------------------------------
def tune_parser():
    top = argparse.ArgumentParser(prog="tvm-fuse")
    cli.add_cli(top.add_subparsers(dest="command"))
    return top


def test_cli_parses_the_tune_command():
    args = tune_parser().parse_args(
        ["tune", "m.onnx", "--log", "t.log", "--trials", "8", "--rpc-key", "k", "--tracker", "h:1"]
    )
    assert (args.model, args.log, args.trials, args.rpc_key, args.tracker) == (
        "m.onnx",
        "t.log",
        8,
        "k",
        "h:1",
    )
    assert args.run is cli.run


def test_cli_unreachable_tracker_is_a_user_error(tmp_path):
    model = onnx_example.residual_block(tmp_path / "block.onnx")
    argv = ["tune", model, "--log", str(tmp_path / "t.log"), "--tracker", "127.0.0.1:1"]
    args = tune_parser().parse_args(argv + ["--rpc-key", "k"])
    start = time.monotonic()
    with pytest.raises(UserError, match="127.0.0.1:1 is unreachable"):
        args.run(args)
    assert time.monotonic() - start < 15
