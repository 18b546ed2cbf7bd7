"""The PyTorch and ONNX Runtime peers: the same network and weights, ``common.THREADS`` threads.

A peer is made from a ``torch.nn.Module`` in eval mode holding the benchmark's weights:
PyTorch runs ``torch.jit.optimize_for_inference(torch.jit.script(module))`` (freezing, conv+BN
folding, oneDNN); ONNX Runtime runs that module exported to ONNX (BatchNorm kept, ORT folds it
itself) with all graph optimizations and pre-bound input and output buffers, so that neither
peer pays for copies that TVM's ``time_evaluator`` does not pay for either.
Both preparers raise ``common.Skip`` when their library is not installed.
"""

from __future__ import annotations

import tempfile
import warnings
from pathlib import Path

import numpy as np

from tvm_fuse.bench import common


def _torch():
    if common.peers_available()["torch"]:
        raise common.Skip(common.peers_available()["torch"])
    import torch  # pylint: disable=import-outside-toplevel

    torch.set_num_threads(common.THREADS)
    return torch


def torch_runner(module, data: np.ndarray) -> common.CallableRunner:
    """``module`` scripted and optimized for inference, run on ``data`` under inference_mode."""
    torch = _torch()
    module = module.eval()
    example = torch.from_numpy(data)
    with torch.inference_mode():
        try:
            jit = torch.jit.optimize_for_inference(torch.jit.script(module))
        except Exception:  # pylint: disable=broad-except  # not scriptable: trace it instead
            jit = torch.jit.optimize_for_inference(torch.jit.trace(module, example))

    def run():
        with torch.inference_mode():
            return jit(example).numpy()

    return common.CallableRunner(run)


def onnx_export(module, data: np.ndarray, path: Path) -> Path:
    """Export ``module`` to ONNX (TorchScript exporter, opset 17), input named ``data``."""
    torch = _torch()
    with warnings.catch_warnings(), torch.inference_mode():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            module.eval(),
            (torch.from_numpy(data),),
            str(path),
            input_names=["data"],
            output_names=["out"],
            opset_version=17,
            dynamo=False,
        )
    return path


def ort_session(path, profile_prefix: str | None = None):
    """An ONNX Runtime session on the ONNX file ``path``: ``THREADS`` intra-op threads, one
    sequential inter-op stream, every graph optimization, CPU; with ``profile_prefix``, its
    profiler on, writing a file of that prefix (``session.end_profiling()`` names it)."""
    import onnxruntime as ort  # pylint: disable=import-outside-toplevel

    options = ort.SessionOptions()
    if profile_prefix is not None:
        options.enable_profiling = True
        options.profile_file_prefix = profile_prefix
    options.intra_op_num_threads = common.THREADS
    options.inter_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def ort_runner(module, data: np.ndarray) -> common.CallableRunner:
    """ONNX Runtime on ``module`` exported to ONNX (:func:`ort_session`)."""
    if common.peers_available()["onnxruntime"]:
        raise common.Skip(common.peers_available()["onnxruntime"])
    with tempfile.TemporaryDirectory() as tmp:
        return ort_file_runner(onnx_export(module, data, Path(tmp) / "model.onnx"), data)


def ort_file_runner(path, data: np.ndarray) -> common.CallableRunner:
    """ONNX Runtime on the ONNX file ``path`` (:func:`ort_session`), its input ``data`` and its
    first output bound once, so that a run times the model only."""
    if common.peers_available()["onnxruntime"]:
        raise common.Skip(common.peers_available()["onnxruntime"])
    session = ort_session(path)
    out_shape = session.run(None, {"data": data})[0].shape
    out = np.empty(out_shape, "float32")
    binding = session.io_binding()
    binding.bind_cpu_input("data", data)
    output = session.get_outputs()[0].name
    binding.bind_output(output, "cpu", 0, np.float32, out.shape, out.ctypes.data)
    return common.CallableRunner(lambda: session.run_with_iobinding(binding), fetch=lambda: out)


def implementations(mod, params, data, target, torch_module, names, built=None) -> dict:
    """name -> zero-argument preparer of a ``common.Runner``, for ``common.run_case``.

    ``names`` are taken from ``common.TVM_BUILDERS`` (built from the Relay ``mod``/``params``)
    and ``pytorch``/``onnxruntime`` (made from ``torch_module()``, a factory of the equivalent
    PyTorch module holding the same weights). The input is named ``data``. ``built``, a dict,
    receives each TVM implementation's built module by name (for a profile of the same build).
    """

    def tvm_prep(name, builder):
        def prepare():
            lib = builder(mod, params, target)
            if built is not None:
                built[name] = lib
            return common.TvmRunner(lib, {"data": data})

        return prepare

    def peer_prep(make_runner):
        return lambda: make_runner(_peer_module(torch_module), data)

    preps = {n: tvm_prep(n, b) for n, b in common.TVM_BUILDERS.items() if n in names}
    peer_runners = {"pytorch": torch_runner, "onnxruntime": ort_runner}
    preps.update({name: peer_prep(r) for name, r in peer_runners.items() if name in names})
    return preps


def _peer_module(factory):
    note = common.peers_available()["torch"]
    if note:
        raise common.Skip(note)
    return factory()
