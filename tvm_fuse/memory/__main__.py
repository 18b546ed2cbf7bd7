"""``python -m tvm_fuse.memory resnet-18|resnet-50 [--json]``: the memory report of a ResNet.

The model is ``tvm.relay.testing.resnet.get_workload(num_layers=..., batch_size=1)``; the report
builds it three ways (see ``tvm_fuse.memory.report``), a few minutes for ResNet-50.
"""

from __future__ import annotations

import argparse
import json

MODELS = {"resnet-18": 18, "resnet-34": 34, "resnet-50": 50}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tvm_fuse.memory", description=__doc__)
    parser.add_argument("model", choices=sorted(MODELS))
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    args = parser.parse_args(argv)

    from tvm.relay import testing  # pylint: disable=import-outside-toplevel

    from .report import report  # pylint: disable=import-outside-toplevel

    mod, params = testing.resnet.get_workload(num_layers=MODELS[args.model], batch_size=1)
    rep = report(mod, params, model=args.model)
    print(json.dumps(rep.to_dict(), indent=2) if args.json else rep)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
