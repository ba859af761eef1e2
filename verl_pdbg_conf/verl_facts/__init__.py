"""What verl does, per release: stage/role tables, config trees, composition, structured configs."""
