"""Kernel half: TE compute and hand-written schedules of the fused NHWC kernel."""
