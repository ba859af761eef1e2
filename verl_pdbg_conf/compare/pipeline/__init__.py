"""The engine's pipeline, one unit per step: reading (records of a dump, with their scope and layer),
pairing (what corresponds between two implementations), splits (micro-batches combined), judging (each
paired row by compare/judge.py, the rules the rollout compare shares), attribution (where an error is
introduced), locating (where a node ran, where in the tensor the error sits) and collecting (the analysis
a report is made of). engine.compare_pair runs it."""
