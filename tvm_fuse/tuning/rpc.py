"""Measurement on remote devices through TVM's RPC tracker (``python -m tvm.exec.rpc_tracker``).

``rpc_runner(key, host, port)`` returns an ``autotvm.RPCRunner`` after a pre-flight check:
``autotvm``'s own check blocks for a minute on an unreachable tracker and forever on a key no
server has registered, so :func:`check_tracker` asks the tracker's summary within a timeout
first and raises :class:`TrackerError` naming the address, the key and the keys it does have.
"""

from __future__ import annotations

import logging
import socket
import threading

from tvm import autotvm, rpc

logger = logging.getLogger("tvm_fuse.tuning")

#: Seconds the pre-flight check waits for the tracker.
CHECK_TIMEOUT = 10.0


class TrackerError(RuntimeError):
    """The tracker cannot be reached or has no server for the key; ``str()`` says which."""


def parse_tracker(text: str) -> tuple[str, int]:
    """``"host:port"`` as ``(host, port)``; a ValueError for anything else."""
    host, sep, port = str(text).strip().rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"tracker address {text!r} is not host:port (e.g. 127.0.0.1:9190)")
    return host, int(port)


def _summary(host, port, timeout) -> dict:
    """The tracker's summary, asked on a thread so that a silent peer cannot block us."""
    try:
        socket.create_connection((host, port), timeout=timeout).close()
    except OSError as err:
        raise TrackerError(
            f"RPC tracker {host}:{port} is unreachable ({err.strerror or err}); start it with "
            f"'python -m tvm.exec.rpc_tracker --host {host} --port {port}' (an address of a "
            "trusted network only: TVM's RPC has no authentication)"
        ) from None
    answer: dict = {}

    def ask():
        try:
            answer["summary"] = rpc.connect_tracker(host, port).summary()
        except Exception as err:  # noqa: BLE001  (reported below as the tracker's failure)
            answer["error"] = err

    thread = threading.Thread(target=ask, daemon=True)
    thread.start()
    thread.join(timeout)
    if "summary" not in answer:
        reason = answer.get("error", f"no answer within {timeout:g} s")
        raise TrackerError(f"{host}:{port} does not answer as an RPC tracker ({reason})")
    return answer["summary"]


def check_tracker(host: str, port: int, key: str, timeout: float = CHECK_TIMEOUT) -> int:
    """The number of free servers under ``key`` at the tracker; a TrackerError if it has no
    queue for ``key`` (no server ever registered it)."""
    queues = _summary(host, port, timeout).get("queue_info", {})
    if key not in queues:
        have = ", ".join(sorted(queues)) or "none"
        raise TrackerError(
            f"RPC tracker {host}:{port} has no server with key {key!r} (keys registered: {have}); "
            f"start one with 'python -m tvm.exec.rpc_server --tracker {host}:{port} --key {key}'"
        )
    free = int(queues[key].get("free", 0))
    if not free:
        logger.warning(
            "RPC tracker %s:%d: every server with key %r is busy; waiting", host, port, key
        )
    return free


def rpc_runner(
    key: str,
    host: str,
    port: int,
    *,
    number: int = 5,
    repeat: int = 3,
    timeout: float = 10.0,
    check_timeout: float = CHECK_TIMEOUT,
    min_repeat_ms: int = 0,
) -> autotvm.RPCRunner:
    """An ``autotvm.RPCRunner`` measuring on the devices registered under ``key``."""
    servers = check_tracker(host, port, key, check_timeout)
    return autotvm.RPCRunner(
        key,
        host,
        port,
        number=number,
        repeat=repeat,
        timeout=timeout,
        min_repeat_ms=min_repeat_ms,
        n_parallel=max(1, servers),
        enable_cpu_cache_flush=True,
    )
