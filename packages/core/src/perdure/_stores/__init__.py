"""Stores of the embedded engine: SQLite (default), PostgreSQL, and memory (core tests)."""
