"""verl-pdbg-compare: pair two runs' dumps and find the first node where they part."""
