"""Gleaner's gRPC API: the .proto files and the Python code generated from them.

Regenerate with ``python -m protos``; ``python -m protos --check`` fails when the
committed code is stale.
"""
