"""perdure's benchmarks: each figure measured side by side with its anchor, in one run."""
