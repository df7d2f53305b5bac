"""pytest plugin: perdure fixtures (filled in by the conformance harness)."""
