"""Before and after a run: plan, estimate, inspect."""
