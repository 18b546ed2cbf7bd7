"""Tuning through TVM's RPC tracker: a tracker and two servers on 127.0.0.1 (loopback only).

The ``farm`` fixture starts ``python -m tvm.exec.rpc_tracker`` and two ``rpc_server`` processes
on free ports, each in its own process group, waits until the tracker lists both servers, and
kills the groups at the end of the module whatever happened. The failure paths (failed
measurements, Ctrl-C, unreachable tracker, unknown key) are tested here too: with servers
already running, a tuning run costs seconds instead of a LocalRunner's start-up.
"""

import argparse
import io
import os
import signal
import socket
import subprocess
import sys
import time

import pytest
from tvm import autotvm, rpc

import tvm_fuse
from tvm_fuse import examples, onnx_example, testing, tuning_rule
from tvm_fuse.tuning import TrackerError, check_records, check_tracker, cli, rpc_runner

HOST = "127.0.0.1"
KEY = "tvm_fuse_ci"
START_TIMEOUT = 60.0


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind((HOST, 0))
        return sock.getsockname()[1]


def start(*args) -> subprocess.Popen:
    env = dict(os.environ, TVM_NUM_THREADS="1", TOPHUB_LOCATION="NONE")
    return subprocess.Popen(
        [sys.executable, "-m", *args],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,  # its own process group: killed whole, children included
    )


def stop(process: subprocess.Popen) -> None:
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    process.wait(timeout=10)


def wait_for_servers(port, count):
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        try:
            queue = rpc.connect_tracker(HOST, port).summary()["queue_info"]
            if queue.get(KEY, {}).get("free", 0) >= count:
                return
        except (OSError, RuntimeError):
            pass
        time.sleep(0.5)
    raise TimeoutError(f"the tracker on {HOST}:{port} did not list {count} servers in time")


@pytest.fixture(scope="module")
def farm(request):
    """``(host, port)`` of a tracker with two servers registered under KEY."""
    port = free_port()
    processes = []
    request.addfinalizer(lambda: [stop(p) for p in processes])
    tracker = ["tvm.exec.rpc_tracker", "--host", HOST, "--port", str(port)]
    processes.append(start(*tracker, "--port-end", str(port + 1), "--silent"))
    for _ in range(2):
        server_port = free_port()
        processes.append(
            start(
                "tvm.exec.rpc_server",
                f"--tracker={HOST}:{port}",
                f"--key={KEY}",
                f"--host={HOST}",
                f"--port={server_port}",
                f"--port-end={server_port + 1}",
                "--silent",
            )
        )
    wait_for_servers(port, 2)
    return HOST, port


@pytest.fixture(scope="module")
def builder():
    """One LocalBuilder for the module: its worker processes start (import tvm) only once."""
    return autotvm.LocalBuilder(timeout=20)


def test_tune_through_the_tracker_then_build(farm, builder, tmp_path):
    host, port = farm
    mod, params = examples.small_layer()
    log, stream = tmp_path / "rpc.log", io.StringIO()
    done = tvm_fuse.tune(
        mod,
        params,
        log_file=log,
        n_trial=4,
        tracker=f"{host}:{port}",
        key=KEY,
        builder=builder,
        stream=stream,
    )
    task = done.tasks[0]
    again = 2 * tuning_rule.CONFIRM_ROUNDS if task.confirmed else 0  # the best was not the default
    assert task.trials == 4 and task.failures < 4 and done.records_written == 4 + again
    assert len(check_records(log)) == 4 + again
    testing.assert_matches_stock(mod, params, tvm_fuse.build(mod, params, tuning_records=str(log)))


def test_failed_measurements_are_logged_and_tuning_goes_on(farm, builder, tmp_path):
    host, port = farm
    runner = rpc_runner(KEY, host, port, number=1, repeat=1, timeout=1e-4)
    mod, params = examples.small_layer()
    log, stream = tmp_path / "failed.log", io.StringIO()
    done = tvm_fuse.tune(
        mod, params, log_file=log, n_trial=2, runner=runner, builder=builder, stream=stream
    )
    assert done.tasks[0].trials == done.tasks[0].failures == 2
    assert "no valid measurement" in stream.getvalue()
    records = check_records(log)
    assert len(records) == 2 and all(res.error_no != 0 for _, res in records)
    testing.assert_matches_stock(mod, params, tvm_fuse.build(mod, params, tuning_records=str(log)))


def test_ctrl_c_keeps_the_records_written_so_far(farm, builder, tmp_path):
    host, port = farm

    def interrupt(_tuner, _inputs, _results):
        raise KeyboardInterrupt

    mod, params = examples.small_layer()
    log, stream = tmp_path / "interrupted.log", io.StringIO()
    with pytest.raises(KeyboardInterrupt):
        tvm_fuse.tune(
            mod,
            params,
            log_file=log,
            n_trial=8,
            tracker=f"{host}:{port}",
            key=KEY,
            builder=builder,
            callbacks=[interrupt],
            stream=stream,
        )
    written = len(check_records(log))
    assert 0 < written < 8
    assert f"interrupted: {written} records written" in stream.getvalue()
    assert not autotvm.GLOBAL_SCOPE.in_tuning


def test_unknown_key_is_a_clear_error(farm):
    host, port = farm
    start_time = time.monotonic()
    with pytest.raises(TrackerError, match=f"no server with key 'nope'.*{KEY}"):
        check_tracker(host, port, "nope", timeout=5)
    assert time.monotonic() - start_time < 15


def test_unreachable_tracker_is_a_clear_error(tmp_path):
    mod, params = examples.small_layer()
    start_time = time.monotonic()
    with pytest.raises(TrackerError, match="unreachable"):
        tvm_fuse.tune(
            mod, params, log_file=tmp_path / "x.log", tracker=f"{HOST}:{free_port()}", key=KEY
        )
    assert time.monotonic() - start_time < 15


def test_silent_peer_is_not_a_tracker():
    with socket.socket() as silent:
        silent.bind((HOST, 0))
        silent.listen()
        start_time = time.monotonic()
        with pytest.raises(TrackerError, match="does not answer as an RPC tracker"):
            check_tracker(HOST, silent.getsockname()[1], KEY, timeout=2)
    assert time.monotonic() - start_time < 15


def test_cli_tunes_an_onnx_model_through_the_tracker(farm, tmp_path, capsys):
    host, port = farm
    model = onnx_example.residual_block(tmp_path / "block.onnx")
    log = tmp_path / "cli.log"
    top = argparse.ArgumentParser(prog="tvm-fuse")
    cli.add_cli(top.add_subparsers(dest="command"))
    args = top.parse_args(
        ["tune", model, "--log", str(log), "--trials", "2", "--tracker", f"{host}:{port}"]
        + ["--rpc-key", KEY, "--tuner", "random"]
    )
    assert args.run(args) == 0
    records = check_records(log)
    assert len({inp.task.workload for inp, _ in records}) == 2  # the block's two fused convs
    assert f"wrote {len(records)} records for 2 kernels" in capsys.readouterr().out
