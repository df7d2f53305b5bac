"""The embedded engine: drives runs by replaying their history from a ``Store``."""
