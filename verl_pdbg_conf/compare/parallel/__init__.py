"""A run divided among ranks put back together as one model: replica.py (what a pair's job is told: a
replica's dumps and its levels), kinds.py (one class per kind of parallelism: tensor, context, expert,
data, pipeline; its size from verl's config or the dumps, and how its groups merge), probe.py (what the
ranks' first records say), merge.py (the record merges' rules), layout.py (each run's layout decided and
its ranks grouped into replicas)."""
