"""Trace-driven simulation of the controller: trace adapters and, later, the simulator."""
