"""Conv by conv within whole runs: tvm_fuse's kernels against ONNX Runtime's nodes.

A whole-model ratio says whether tvm_fuse is faster; this says where. Both sides are timed
inside whole runs of the model, so each conv reads its weights and input as it does in real use
(from L3 or memory for a large model), not warm from a kernel repeated alone: tvm_fuse's kernels
by TVM's debug executor (``profile``: one sequential run, every kernel timed), ONNX Runtime's
nodes by its own profiler. Convs are grouped by shape (window, stride, channels, output map),
which ONNX Runtime's profile records and tvm_fuse's ``KernelSpec`` states; everything else
(pooling, transposes, the classifier) is grouped by op. Each side's profiling adds a little to
its run, so the sums run slightly above the whole model's time.

    tvm-fuse bench onnx --models resnet50 --by-conv
"""

from __future__ import annotations

import collections
import json
import statistics
import tempfile

from tvm_fuse.bench import bench_models, common, peers  # noqa: E402  (common first: threads)

#: Whole runs profiled on each side (after one warm-up run).
ROUNDS = 11


#: ONNX Runtime's blocked (NCHWc) convs pad channels to their block (16 fp32 with AVX-512, 8
#: with AVX2), and its profile records the padded shapes (MobileNet-v2's 96 -> 24 projection as
#: 96 -> 32): rows are matched with their channels rounded up to this.
CHANNEL_BLOCK = 16


def conv_names(kernel: tuple[int, int], stride: int, ci: int, co: int, out_hw) -> tuple:
    """(label, key) of a conv's row: the label as a row shows it, ``3x3/1 256->256 @14x14``;
    the key both sides match on, its channels rounded up to ``CHANNEL_BLOCK``."""
    label = f"{kernel[0]}x{kernel[1]}/{stride} {ci}->{co} @{out_hw[0]}x{out_hw[1]}"
    blocks = tuple(-(-c // CHANNEL_BLOCK) * CHANNEL_BLOCK for c in (ci, co))
    return label, (tuple(kernel), stride, *blocks, tuple(out_hw))


def spec_names(spec) -> tuple:
    """:func:`conv_names` of a fused kernel's ``KernelSpec``."""
    return conv_names(
        spec.kernel_size, spec.strides[0], spec.in_channels, spec.out_channels, spec.out_hw
    )


def ort_node_names(op_name: str, input_shapes: list, output_shape) -> tuple:
    """:func:`conv_names` of an ONNX Runtime ``Conv``/``FusedConv`` node (NCHW data, OIHW
    weight; Ci is the data's, as the weight of a grouped conv holds Ci / groups), its stride
    read off the input and output maps; other ops named and keyed by their op."""
    if op_name not in ("Conv", "FusedConv") or len(input_shapes) < 2:
        return op_name, op_name
    (_, ci, height, _), (co, _, kh, kw) = input_shapes[:2]
    out_h, out_w = output_shape[2:]
    return conv_names((kh, kw), max(1, round(height / out_h)), ci, co, (out_h, out_w))


def kernel_name(func_name: str) -> str:
    """A TVM kernel's function name without the prefix every one has: ``nn_max_pool2d``."""
    return func_name.removeprefix("tvmgen_default_fused_")


def tvm_fuse_rows(lib, specs, data, rounds: int = ROUNDS) -> list[dict]:
    """Each kernel of tvm_fuse's build ``lib`` (graph executor) in ``rounds`` whole runs:
    ``label`` and ``key`` (its conv's, from ``specs`` by the node's shapes, or the node's op),
    ``algorithm`` and the median ``ms``."""
    kernels = bench_models.kernel_nodes(lib.get_graph_json(), specs)
    times = collections.defaultdict(list)
    with tempfile.TemporaryDirectory() as dumps:
        module = common.debug_module(lib, {"data": data}, dumps)
        module.profile()  # warm-up
        for _ in range(rounds):
            common.settle()
            calls = module.profile().calls
            if len(calls) != len(kernels):
                raise RuntimeError(f"{len(calls)} profiled calls for {len(kernels)} kernels")
            for (index, *_), call in zip(kernels, calls):
                times[index].append(call["Duration (us)"].microseconds / 1e3)
    rows = []
    for index, node, _, spec in kernels:
        if spec is None:
            label = key = kernel_name(node["attrs"]["func_name"])
        else:
            label, key = spec_names(spec)
        algorithm = spec.algorithm_name if spec else "other"
        ms = statistics.median(times[index])
        rows.append({"label": label, "key": key, "algorithm": algorithm, "ms": ms})
    return rows


def ort_rows(path, data, rounds: int = ROUNDS) -> list[dict]:
    """Each node ONNX Runtime runs for the ONNX file ``path`` (``peers.ort_session``'s options),
    from its profiler over ``rounds`` whole runs: ``label``, ``key`` and the median ``ms``."""
    with tempfile.TemporaryDirectory() as folder:
        session = peers.ort_session(path, profile_prefix=f"{folder}/ort")
        common.settle()  # TVM's worker threads spin for a while after tvm_fuse's runs
        session.run(None, {"data": data})  # warm-up
        for _ in range(rounds):
            session.run(None, {"data": data})
        with open(session.end_profiling(), encoding="utf-8") as file:
            events = json.load(file)
    times, names = collections.defaultdict(list), {}
    for event in events:
        if event.get("cat") != "Node" or not event["name"].endswith("_kernel_time"):
            continue
        args = event["args"]
        shapes = [next(iter(t.values())) for t in args.get("input_type_shape", [])]
        outputs = [next(iter(t.values())) for t in args.get("output_type_shape", [])]
        names[event["name"]] = ort_node_names(args["op_name"], shapes, outputs[0])
        times[event["name"]].append(event["dur"] / 1e3)
    # the first run is the warm-up
    return [
        {"label": names[n][0], "key": names[n][1], "ms": statistics.median(t[1:] or t)}
        for n, t in times.items()
    ]


def compare(fuse: list[dict], ort: list[dict]) -> list[dict]:
    """Both sides' rows summed by key, slowest on ONNX Runtime first: ``label`` (tvm_fuse's
    where it has the row: ONNX Runtime's may show padded channels), ``count``
    (the larger side's), ``tvm_fuse_ms``, ``onnxruntime_ms``, ``ratio`` (None where a side has
    no such row; a side's ms None where it has none) and tvm_fuse's ``algorithms``."""
    groups: dict[object, dict] = {}
    for side, rows in (("tvm_fuse", fuse), ("onnxruntime", ort)):
        for row in rows:
            group = groups.setdefault(
                row["key"],
                {"label": row["label"], "tvm_fuse": [], "onnxruntime": [], "algorithms": set()},
            )
            group[side].append(row["ms"])
            if "algorithm" in row:
                group["algorithms"].add(row["algorithm"])
    out = []
    for group in groups.values():
        fuse_ms, ort_ms = (sum(group[s]) if group[s] else None for s in ("tvm_fuse", "onnxruntime"))
        out.append(
            {
                "label": group["label"],
                "count": max(len(group["tvm_fuse"]), len(group["onnxruntime"])),
                "tvm_fuse_ms": fuse_ms,
                "onnxruntime_ms": ort_ms,
                "ratio": fuse_ms / ort_ms if fuse_ms is not None and ort_ms else None,
                "algorithms": ", ".join(sorted(group["algorithms"])),
            }
        )
    return sorted(out, key=lambda row: (-(row["onnxruntime_ms"] or 0), -(row["tvm_fuse_ms"] or 0)))


def conv_kind(row: dict) -> str:
    """The kind of conv a :func:`compare` row is, for :func:`by_kind`: ``1x1``, ``depthwise``,
    ``winograd`` or ``direct KxK`` by what tvm_fuse runs; ``other`` for a row that is no conv
    on both sides."""
    if row["ratio"] is None:
        return "other"
    for kind in ("winograd", "depthwise"):
        if kind in row["algorithms"]:
            return kind
    window = row["label"].split("/", 1)[0]
    return window if window == "1x1" else f"direct {window}"


def by_kind(rows: list[dict]) -> list[dict]:
    """:func:`compare`'s rows summed by :func:`conv_kind`: ``kind``, ``count``, both sides' ms
    and their ``ratio``; the rows one side lacks (ops only it runs) as ``other``."""
    kinds: dict[str, list] = {}
    for row in rows:
        total = kinds.setdefault(conv_kind(row), [0, 0.0, 0.0])
        total[0] += row["count"]
        total[1] += row["tvm_fuse_ms"] or 0.0
        total[2] += row["onnxruntime_ms"] or 0.0
    return [
        {
            "kind": kind,
            "count": count,
            "tvm_fuse_ms": fuse_ms,
            "onnxruntime_ms": ort_ms,
            "ratio": fuse_ms / ort_ms if kind != "other" and ort_ms else None,
        }
        for kind, (count, fuse_ms, ort_ms) in sorted(kinds.items(), key=lambda kv: -kv[1][2])
    ]


def by_conv(lib, specs, path, data, rounds: int = ROUNDS) -> dict:
    """:func:`compare` of tvm_fuse's build ``lib`` of the ONNX file ``path`` (``specs``: its
    ``KernelSpec``s) and ONNX Runtime's run of it, the same :func:`by_kind`, and each side's
    summed ``*_sum_ms``."""
    rows = compare(tvm_fuse_rows(lib, specs, data, rounds), ort_rows(path, data, rounds))
    sums = {
        f"{side}_sum_ms": sum(r[f"{side}_ms"] or 0.0 for r in rows)
        for side in ("tvm_fuse", "onnxruntime")
    }
    return {"rounds": rounds, "rows": rows, "by_kind": by_kind(rows), **sums}


def print_by_conv(model: str, result: dict) -> None:
    """The table of :func:`by_conv`'s ``result`` for ``model``, with both sides' sums."""
    rows = [
        [r["label"], r["count"], r["tvm_fuse_ms"], r["onnxruntime_ms"], r["ratio"], r["algorithms"]]
        for r in result["rows"]
    ]
    rows.append(["sum", "", result["tvm_fuse_sum_ms"], result["onnxruntime_sum_ms"], None, ""])
    common.print_table(
        ["conv (k/stride Ci->Co @out)", "n", "tvm_fuse ms", "ORT ms", "fuse/ORT", "tvm_fuse runs"],
        rows,
        title=f"\n{model}: conv by conv within whole runs (medians of {result['rounds']} runs)",
    )
    common.print_table(
        ["kind", "n", "tvm_fuse ms", "ORT ms", "fuse/ORT"],
        [
            [k["kind"], k["count"], k["tvm_fuse_ms"], k["onnxruntime_ms"], k["ratio"]]
            for k in result["by_kind"]
        ],
        title=f"\n{model}: the same by kind of conv (other: ops one side runs alone)",
    )
