"""The names a suite's command line chooses from its table (layers, models): plain Python, so
that the Relay suites (through ``common``) and the Relax bench, which cannot import ``common``,
read ``--models``/``--layers`` alike."""

from __future__ import annotations


def select(parser, text: str, known) -> list[str]:
    """Comma-separated ``text`` as a list of names of ``known``; a parser error otherwise."""
    names = text.split(",")
    unknown = [name for name in names if name not in known]
    if unknown:
        parser.error(f"unknown names {unknown}; choose from {', '.join(known)}")
    return names
