"""``tvm-fuse demo|compile|explain|tune --backend relax``: the command line on the Relax backend.

Called by ``tvm_fuse.cli`` when the backend is Relax (``--backend relax``, or apache-tvm is the
installed TVM). ``compile`` writes the compiled module as a shared library (load it with
``tvm.runtime.load_module`` and run it with ``relax.VirtualMachine``); ``explain`` prints each
fused kernel's task description and which kernel runs it, the transposes left, every conv or
BatchNorm left unfused with the reason, and the bytes of the weights (``memory.weights``);
``tune`` writes tuning records (``relax.tuning``) that ``compile --tuning-records`` applies;
``demo`` takes the seed example through the pipeline pass by pass and checks the result against
ONNX Runtime (or stock Relax without it).
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

import numpy as np
import onnx
import tvm
from tvm import relax
from tvm.relax.frontend.onnx import from_onnx

from .. import onnx_example
from ..schedules import loop_nest, transposes
from ..errors import UserError
from ..memory.liveness import tensor_bytes
from ..memory.weights import fallback_bytes, weights_table
from . import api, compat, fuse, kernel, records, strategy, tuning
from .fold_bn import match_chain, fold_refusal
from .layout import ConvertLayoutNHWC
from .lower import LowerFusedConv

#: ``--output`` default of the Relax backend: a shared library, not a tvmc package
DEFAULT_LIBRARY = "module.so"
#: How the calls of tvm_fuse's boundary transposes start in ``_main_calls``.
_BLOCKED_TRANSPOSES = tuple(f"call_tir(tvm_fuse_{name}" for name in transposes.TRANSPOSES)


def load(path, input_shapes=None) -> tvm.IRModule:
    """The ONNX model at ``path`` as a Relax module, its weights bound as constants."""
    if not Path(path).is_file():
        raise UserError(f"{path}: no such file")
    try:
        model = onnx.load(str(path))
    except Exception as err:  # onnx raises DecodeError and friends  # noqa: BLE001
        raise UserError(f"{path}: not an ONNX model ({err})") from None
    return from_onnx(model, shape_dict=input_shapes, keep_params_in_input=False)


def target_of(text):
    try:
        return compat.target_from_text(text)
    except (ValueError, compat.Error) as err:
        raise UserError(f"invalid target {text!r}: {err}") from None


def compile_onnx(
    model,
    output,
    target=None,
    input_shapes=None,
    tuning_records=None,
    algorithm="auto",
    precision="default",
) -> str:
    """Compile ``model`` with the Relax backend (the kernels of ``tuning_records`` tuned;
    ``algorithm``/``precision`` as for ``api.build``) and write the library to ``output`` (the
    command line checks the path first and writes it whole: ``tvm_fuse.output_files``)."""
    target = target_of(target)
    exe = api.build(
        load(model, input_shapes),
        target=target,
        algorithm=algorithm,
        precision=precision,
        tuning_records=tuning_records,
    )
    exe.export_library(str(output))
    return str(output)


def is_shared_library(path) -> bool:
    """True for an ELF file (what ``compile`` writes on Linux)."""
    try:
        with open(path, "rb") as file:
            return file.read(4) == b"\x7fELF"
    except OSError:
        return False


def tune_onnx(args) -> int:
    """``tvm-fuse tune --backend relax``: tune ``args.model``'s kernels into ``args.log``."""
    flags = (("--rpc-tracker", args.tracker), ("--rpc-key", args.rpc_key), ("--tuner", args.tuner))
    given = [flag for flag, value in flags if value]
    if given:
        raise UserError(
            f"{', '.join(given)}: the Relax backend's tuner measures on this machine with its own "
            "search (tvm_fuse.relax.tuning); drop the flag or use --backend relay"
        )
    if args.trials < 1:
        raise UserError(f"--trials {args.trials}: give at least 1 measurement per kernel")
    if Path(args.log).exists() and Path(args.log).resolve() == Path(args.model).resolve():
        raise UserError(f"{args.log}: is the model itself; give -o another path")
    mod = load(args.model, args.input_shapes)

    def report(done):
        print(
            f"{done.spec.data.shape} -> {done.spec.out.shape}: model "
            f"{records.tiles_text(done.default)} {done.default_ms:.3f} ms, tuned "
            f"{records.tiles_text(done.best)} {done.best_ms:.3f} ms ({len(done.trials)} trials)"
        )

    target = target_of(args.target)
    done = tuning.tune(mod, target=target, trials=args.trials, records=args.log, on_kernel=report)
    print(f"wrote records for {len(done)} kernels to {args.log}")
    print(
        f"build with them: tvm-fuse compile {args.model} --tuning-records {args.log} "
        "--backend relax"
    )
    return 0


def explain(mod: tvm.IRModule, target) -> str:
    """The report of ``tvm-fuse explain`` for a Relax module."""
    lines = []
    optimized = api.optimize(mod, target=target)
    specs = api.describe(optimized)
    lines.append(f"fused kernels: {len(specs)} (target {target})")
    for i, spec in enumerate(specs):
        refusal = strategy.fast_path_refusal(spec, target)
        name = kernel.kernel_name(spec)
        why = f" ({refusal})" if refusal and spec.lanes is None else ""
        lines.append(f"\nkernel {i}: {name}{why}")
        lines.append(str(spec))
        loops = None if refusal else loop_nest.describe(spec, strategy.cores(target))
        lines += [f"{'loops:':<11}{loops}"] if loops else []
    names = _main_calls(optimized)
    blocked = sum(n.startswith(_BLOCKED_TRANSPOSES) for n in names)
    left = names.count("permute_dims") + blocked
    lines.append(f"\nlayout transposes left: {left} ({blocked} by tvm_fuse's blocked kernels)")
    lines += leftovers(mod, target)
    fallback = fallback_bytes(specs)
    table = weights_table(constant_bytes(mod), constant_bytes(optimized), fallback)
    lines += ["\nweights:", table]
    return "\n".join(lines)


def constant_bytes(mod: tvm.IRModule) -> int:
    """Bytes of the distinct tensor constants of ``mod``'s Relax functions: the weights a build
    of it holds."""
    found = set()

    def visit(expr):
        if isinstance(expr, compat.Constant) and compat.tensor_shape(expr) is not None:
            found.add(expr)

    for func in mod.functions.values():
        if isinstance(func, relax.Function):
            relax.analysis.post_order_visit(func, visit)
    return sum(tensor_bytes(compat.tensor_shape(c), compat.tensor_dtype(c)) for c in found)


def leftovers(mod: tvm.IRModule, target) -> list[str]:
    """A line for each BatchNorm and conv the pipeline leaves to stock TVM, with the reason."""
    lines = []
    prepared = relax.transform.FoldConstant()(mod)
    for refusal in _bn_refusals(prepared):
        lines.append(f"BatchNorm not folded: {refusal}")
    fused = fuse.FuseConvBiasAct()(ConvertLayoutNHWC()(api.FoldBatchNorm()(prepared)))
    for conv in api.op_calls(fused["main"], "relax.nn.conv2d"):
        lines.append(f"conv2d not fused: {conv_refusal(conv)}")
    return ["\nleft to stock TVM:" if lines else "\nleft to stock TVM: no conv, no BatchNorm"] + [
        "  " + line for line in lines
    ]


def conv_refusal(conv) -> str:
    attrs = conv.attrs
    layouts = (str(attrs.data_layout), str(attrs.kernel_layout), str(attrs.out_layout))
    if int(attrs.groups) != 1 and not fuse.is_depthwise(conv):
        return f"grouped (groups={int(attrs.groups)})"
    if layouts != ("NHWC", "HWIO", "NHWC"):
        return f"layouts {layouts} are not NHWC/HWIO"
    dtypes = {compat.tensor_dtype(e) for e in (conv.args[0], conv.args[1], conv)}
    if dtypes != {"float32"}:
        return f"dtypes {sorted(dtypes)} are not float32"
    if compat.tensor_shape(conv) is None:
        return "dynamic shapes"
    return "no fusion pattern matched"


def _bn_refusals(mod) -> list[str]:
    found = []
    for block in mod["main"].body.blocks:
        if not isinstance(block, relax.DataflowBlock):
            continue
        users = relax.analysis.udchain(block)
        values = {b.var: b.value for b in block.bindings}
        for binding in block.bindings:
            chain = match_chain(binding.value, values)
            reason = chain and fold_refusal(chain, users, values)
            if reason:
                found.append(reason)
    return found


def demo() -> int:
    """The seed example through the Relax pipeline, pass by pass; 0 when the result is right."""
    target = compat.host_target()
    with tempfile.TemporaryDirectory() as folder:
        path = onnx_example.conv_bn_act(Path(folder) / "seed.onnx")
        mod = load(path)
        x = np.random.default_rng(1).standard_normal((1, 64, 56, 56)).astype("float32")
        reference = _reference(path, mod, x, target)
    print(f"seed example: [1,64,56,56] -> conv 3x3 s2 p1 (128) -> BatchNorm -> ReLU on {target}")
    steps = [
        ("FoldConstant", relax.transform.FoldConstant()),
        ("FoldBatchNorm", api.FoldBatchNorm()),
        ("ConvertLayoutNHWC", ConvertLayoutNHWC()),
        ("FuseConvBiasAct", fuse.FuseConvBiasAct()),
        ("LowerFusedConv", LowerFusedConv(target)),
    ]
    current = mod
    for name, step in steps:
        current = step(current)
        print(f"\n=== after {name}: main calls {', '.join(_main_calls(current))}")
    print("\n=== the fused kernel's task description")
    for spec in api.describe(current):
        print(spec)
    start = time.perf_counter()
    exe = api.build(mod, target=target)
    vm = relax.VirtualMachine(exe, tvm.cpu())
    got = vm["main"](tvm.runtime.tensor(x)).numpy()
    err = float(np.abs(got - reference).max() / np.abs(reference).max())
    print(f"\nbuilt in {time.perf_counter() - start:.1f} s; max error {err:.2g} of max |reference|")
    return 0 if err <= 1e-4 else 1


def _main_calls(mod):
    names = []
    for block in mod["main"].body.blocks:
        for b in block.bindings:
            value = b.value
            if isinstance(value, relax.Call):
                op = value.op
                name = op.name if isinstance(op, tvm.ir.Op) else op.name_hint
                if name == "relax.call_tir":
                    name = f"call_tir({value.args[0].name_hint})"
                names.append(name.replace("relax.", ""))
    return names


def _reference(path, mod, x, target):
    try:
        import onnxruntime  # pylint: disable=import-outside-toplevel
    except ImportError:
        vm = relax.VirtualMachine(tvm.compile(mod, target=target), tvm.cpu())
        return vm["main"](tvm.runtime.tensor(x)).numpy()
    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return session.run(None, {"data": x})[0]
