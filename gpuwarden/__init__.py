"""gpuwarden: an event-streaming alert pipeline for GPU fleets."""

__version__ = "0.1.0"
