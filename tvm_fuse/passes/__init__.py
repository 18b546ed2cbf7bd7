"""Relay passes of the graph half, one per module."""
