"""What the controller, the node agent and gleanctl all use: identities and roles, TLS and the
PKI, gRPC channel and server set-up with authorization, configuration parsing, logging, and the
rules for ids and names. It imports neither libvirt nor pyroute2, so the controller and gleanctl
never load them."""

from importlib import metadata as _metadata

try:
    __version__ = _metadata.version("gleaner")
except _metadata.PackageNotFoundError:  # run from a source tree that was never installed
    __version__ = "0.0.0+source"
