"""Checks: each module takes loaded Documents and returns Findings."""
