"""When a tuned configuration replaces the analytic default: the rule both backends share.

A search times many configurations once each on a shared, noisy machine; its fastest is the one
the noise flattered most. So the search's best and the default are timed ``CONFIRM_ROUNDS`` more
times each, alternately, and the best replaces the default only when its median is at least
``MIN_GAIN`` faster than the default's: a tuned build is then never slower than an untuned one
in the measurement, and a tie keeps the analytic plan. The Relay backend's AutoTVM search
(``tvm_fuse.tuning``) and the Relax backend's own search (``tvm_fuse.relax.tuning``) both apply
it. This module is plain Python.
"""

#: Alternating measurements of the default and of the search's best, after the search.
CONFIRM_ROUNDS = 3
#: How much faster (relative, by the medians) the best must be than the default to replace it.
MIN_GAIN = 0.02


def replaces_default(default_seconds: float, best_seconds: float) -> bool:
    """Whether a configuration of median time ``best_seconds`` replaces the default's."""
    return best_seconds <= default_seconds * (1 - MIN_GAIN)
