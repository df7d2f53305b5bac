"""Test helpers and the conformance pytest plugin."""
