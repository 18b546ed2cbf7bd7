"""``python -m tvm_fuse ...`` is the ``tvm-fuse`` command."""

import sys

from .cli import main

sys.exit(main())
