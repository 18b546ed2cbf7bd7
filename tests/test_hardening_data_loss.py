"""Data loss: ``tvm-fuse`` never destroys a user's file, and an interruption leaves nothing behind.

The output checks run ``cli.main`` in-process (they fail before any build). The signal tests run
the real ``python -m tvm_fuse`` process, wait for a stage they can observe (TVM's library mapped
into the process, the build's progress line), signal it, and check the exit status, the one line
on stderr, the old output kept and no scratch or temporary folder left.
"""

import io
import os
import re
import signal
import subprocess
import sys
import tarfile
import time

import pytest
from tvm_fuse.examples import small_layer

import tvm_fuse
from tvm_fuse import cli, onnx_example, user_inputs
from tvm_fuse.errors import UserError

#: A loaded 2-core machine can take this long to import TVM and start a build.
PATIENCE = 240.0
#: A progress line: a stage, ended with its seconds or left open by the interruption.
PROGRESS = re.compile(r" \.\.\.( [0-9.]+ s)?$")


@pytest.fixture
def model(tmp_path):
    return onnx_example.residual_block(tmp_path / "block.onnx")


def fake_package(path):
    """A tar with the members of a tvmc package (what a previous compile left)."""
    for name in user_inputs.PACKAGE_MEMBERS:
        (path.parent / name).write_bytes(b"old " + name.encode())
    with tarfile.open(path, "w") as archive:
        for name in user_inputs.PACKAGE_MEMBERS:
            archive.add(path.parent / name, arcname=name)
    return path


def _main(*argv):
    return cli.main([str(arg) for arg in argv])


def _one_error_line(capsys, code, *says):
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and err[0].startswith("tvm-fuse: error: "), err
    for text in says:
        assert text in err[0], err


# -- the output is never the model, never another file unless --force --------------------------
def test_output_that_is_the_model_is_refused(model, capsys):
    before = open(model, "rb").read()
    _one_error_line(capsys, _main("compile", model, "-o", model), "is the model")
    assert open(model, "rb").read() == before


def test_output_through_a_symlink_to_the_model_is_refused(model, tmp_path, capsys):
    link = tmp_path / "out.tar"
    os.symlink(model, link)
    before = open(model, "rb").read()
    _one_error_line(capsys, _main("compile", model, "-o", link), "is the model")
    assert open(model, "rb").read() == before and link.is_symlink()


def test_default_output_of_a_model_named_like_it_is_the_model(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    onnx_example.residual_block(tmp_path / "module.tar")  # an ONNX model, oddly named
    before = (tmp_path / "module.tar").read_bytes()
    _one_error_line(capsys, cli.main(["compile", "module.tar"]), "is the model")
    assert (tmp_path / "module.tar").read_bytes() == before


@pytest.mark.parametrize("content", [b"my notes\n", b""])
def test_an_existing_file_that_is_not_a_package_is_kept(model, tmp_path, capsys, content):
    other = tmp_path / "notes.tar"
    other.write_bytes(content)
    _one_error_line(capsys, _main("compile", model, "-o", other), "--force")
    assert other.read_bytes() == content


def test_force_is_in_the_help(capsys):
    with pytest.raises(SystemExit):
        cli.main(["compile", "--help"])
    assert "--force" in capsys.readouterr().out


def test_an_existing_package_may_be_replaced(tmp_path):
    assert user_inputs.is_tvmc_package(fake_package(tmp_path / "old.tar"))
    assert not user_inputs.is_tvmc_package(onnx_example.residual_block(tmp_path / "m.onnx"))


@pytest.mark.parametrize("where", ["MODEL", "DIR", "NOTLOG"])
def test_tune_log_that_would_destroy_a_file_is_refused(model, tmp_path, capsys, where):
    log = {"MODEL": model, "DIR": tmp_path, "NOTLOG": tmp_path / "notes.txt"}[where]
    if where == "NOTLOG":
        log.write_text("my notes\n")
    before = open(model, "rb").read()
    code = _main("tune", model, "--log", log, "--trials", 1)
    _one_error_line(capsys, code, str(log))
    assert open(model, "rb").read() == before
    assert where != "NOTLOG" or log.read_text() == "my notes\n"


# -- signals: one line, the old output kept, nothing left ---------------------------------------
def _start(tmp_path, *argv):
    scratch_tmp = tmp_path / "tmp"
    scratch_tmp.mkdir()
    env = {**os.environ, "TMPDIR": str(scratch_tmp), "TOPHUB_LOCATION": "NONE"}
    err = open(tmp_path / "stderr.txt", "w+b")
    proc = subprocess.Popen(
        [sys.executable, "-m", "tvm_fuse", *map(str, argv)],
        stdout=subprocess.DEVNULL,
        stderr=err,
        env=env,
        cwd=tmp_path,
    )
    return proc, scratch_tmp, tmp_path / "stderr.txt"


def _wait_for(proc, ready, what):
    deadline = time.monotonic() + PATIENCE
    while not ready():
        assert proc.poll() is None, f"the process ended before {what}"
        assert time.monotonic() < deadline, f"no {what} within {PATIENCE} s"
        time.sleep(0.05)


def _tvm_loaded(pid):
    try:
        return "libtvm" in open(f"/proc/{pid}/maps").read()
    except OSError:
        return False


def _assert_clean_exit(proc, signum, stderr, scratch_tmp, out_dir):
    code = proc.wait(PATIENCE)
    lines = stderr.read_text().strip().splitlines()
    assert code == 128 + signum, lines
    assert lines[-1].startswith("tvm-fuse: interrupted"), lines
    assert not any("Traceback" in line or "Exception" in line for line in lines), lines
    assert not list(out_dir.glob(".tvm_fuse-*")), list(out_dir.iterdir())
    assert not list(scratch_tmp.iterdir()), list(scratch_tmp.iterdir())
    return lines


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP])
def test_a_signal_during_the_build_keeps_the_old_output(model, tmp_path, signum):
    old = fake_package(tmp_path / "out.tar")
    before = old.read_bytes()
    proc, scratch_tmp, stderr = _start(tmp_path, "compile", model, "-o", old)
    _wait_for(proc, lambda: b"building for" in stderr.read_bytes(), "build stage")
    proc.send_signal(signum)
    lines = _assert_clean_exit(proc, signum, stderr, scratch_tmp, tmp_path)
    assert [line for line in lines if not PROGRESS.search(line)] == [lines[-1]], lines
    assert old.read_bytes() == before


def test_ctrl_c_while_tvm_imports_is_one_line(model, tmp_path):
    proc, scratch_tmp, stderr = _start(tmp_path, "compile", model, "-o", tmp_path / "out.tar")
    _wait_for(proc, lambda: _tvm_loaded(proc.pid), "libtvm mapped")
    proc.send_signal(signal.SIGINT)
    lines = _assert_clean_exit(proc, signal.SIGINT, stderr, scratch_tmp, tmp_path)
    assert [line for line in lines if not PROGRESS.search(line)] == [lines[-1]], lines
    assert not (tmp_path / "out.tar").exists()


def test_an_empty_output_name_is_refused(model, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    _one_error_line(capsys, _main("compile", model, "-o", ""), "is a directory")
    assert not list(tmp_path.glob("*.tar"))


@pytest.mark.parametrize("target", ["MODEL", "NOTES"])
def test_tvmc_compile_never_overwrites_the_model_or_another_file(model, tmp_path, capsys, target):
    out = model if target == "MODEL" else tmp_path / "notes.txt"
    if target == "NOTES":
        out.write_text("my notes\n")
    before = open(out, "rb").read()
    code = _main("tvmc", "compile", "--target", "tvm_fuse, llvm", "-o", out, model)
    _one_error_line(capsys, code, str(out))
    assert open(out, "rb").read() == before


def test_api_tune_refuses_a_log_that_is_a_folder_before_tuning(tmp_path):
    mod, params = small_layer()
    with pytest.raises(UserError, match="is a directory; give log_file="):
        tvm_fuse.tune(mod, params, log_file=tmp_path, n_trial=1)


def test_api_tuning_leaves_no_temporary_folder(tmp_path, monkeypatch):
    scratch_tmp = tmp_path / "tmp"
    scratch_tmp.mkdir()
    monkeypatch.setattr("tempfile.tempdir", str(scratch_tmp))
    mod, params = small_layer()
    done = tvm_fuse.tune(mod, params, log_file=tmp_path / "t.log", n_trial=1, stream=io.StringIO())
    assert done.records_written == 1
    assert not list(scratch_tmp.iterdir())


def test_failed_tuning_leaves_no_error_file_and_names_the_failure(tmp_path, monkeypatch):
    # AutoTVM dumps a tvm_tuning_errors_*.log into the temp folder when all measurements fail
    scratch_tmp = tmp_path / "tmp"
    scratch_tmp.mkdir()
    monkeypatch.setattr("tempfile.tempdir", str(scratch_tmp))
    mod, params = small_layer()
    stream = io.StringIO()
    done = tvm_fuse.tune(
        mod, params, log_file=tmp_path / "t.log", n_trial=1, timeout=1e-4, stream=stream
    )
    assert done.tasks[0].failures == 1
    assert "first failure: RUN_TIMEOUT" in stream.getvalue()
    assert not list(scratch_tmp.iterdir())
