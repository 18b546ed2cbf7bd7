"""``python -m tvm_fuse.memory resnet-18|resnet-34|resnet-50 [--json] [--rss]``: the memory report.

The model is ``tvm.relay.testing.resnet.get_workload(num_layers=..., batch_size=1)``. The report
builds it twice (stock TVM, tvm_fuse; a line on stderr per build, a minute or more each) and ends
with what tvm_fuse saves. ``--rss`` also runs the tvm_fuse build in fresh processes, with TVM's
storage plan and with tvm_fuse's, and prints their peak resident memory.
"""

from __future__ import annotations

import argparse
import json

MODELS = {"resnet-18": 18, "resnet-34": 34, "resnet-50": 50}


def _rss_lines(mod, params, progress) -> list[str]:
    from ..api import build  # pylint: disable=import-outside-toplevel
    from .apply import plan_storage  # pylint: disable=import-outside-toplevel
    from .rss import peak_rss  # pylint: disable=import-outside-toplevel

    with progress.stage("building with tvm_fuse for the run"):
        lib = build(mod, params, memory="tvm")
    graphs = {"TVM's plan": lib.get_graph_json()}
    graphs["tvm_fuse's plan"] = plan_storage(graphs["TVM's plan"]).graph_json
    with progress.stage("running each plan in fresh processes (3 rounds)"):
        rss = peak_rss(lib, graphs)
    lines = ["", "resident memory of a process running the tvm_fuse build (median of 3 processes):"]
    for label, r in rss.items():
        lines.append(
            f"  {label:<16} the first run adds {r.run_rise / 2**20:6.2f} MiB; the process "
            f"peaks at {r.peak / 2**20:.1f} MiB (while loading the library and params)"
        )
    return lines


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tvm_fuse.memory", description=__doc__)
    parser.add_argument("model", choices=sorted(MODELS))
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.add_argument("--rss", action="store_true", help="also measure peak resident memory")
    args = parser.parse_args(argv)

    from tvm.relay import testing  # pylint: disable=import-outside-toplevel

    from ..package import quiet_tvm_loggers  # pylint: disable=import-outside-toplevel
    from ..progress import Progress  # pylint: disable=import-outside-toplevel
    from .report import report  # pylint: disable=import-outside-toplevel

    quiet_tvm_loggers()  # TVM's "not tuned" warnings would break the progress lines
    progress = Progress()
    mod, params = testing.resnet.get_workload(num_layers=MODELS[args.model], batch_size=1)
    rep = report(mod, params, model=args.model, progress=progress)
    lines = [json.dumps(rep.to_dict(), indent=2) if args.json else str(rep)]
    if args.rss:
        lines += _rss_lines(mod, params, progress)
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
