"""Gleaner's node agent: runs foreground and volunteer VMs on one hypervisor host."""

__version__ = "0.1.0"
