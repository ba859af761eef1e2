"""Reading files with positions, findings, rules, schema findings, interpolation, did-you-mean."""
