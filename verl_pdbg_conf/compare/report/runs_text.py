"""The run compare's document (report/document.py) as text: one line per pair with its first divergence,
the top nodes of the first diverged pairs, the error per model layer, what was left out, the findings and
a count of the pairs by status."""

from __future__ import annotations

from verl_pdbg_conf.compare.pipeline.coverage import short

TOP_SHOWN = 3  # pairs whose top list the text output prints


def pct(v) -> str:
    """A fraction as the reports print it (both pages' and the text's)."""
    if v is None:
        return "n/a"
    if v == "inf":
        return "inf"
    return f"{100 * v:.4g}%"


_SAY = {"nan": "first NaN", "inf": "first Inf", "unmatched": "no golden counterpart", "shape": "shape differs"}


def _node(n: dict, minibatches: int | None = None) -> str:
    where = n.get("module")
    place = f" [{where}]" if where else (f" [{n['where']}]" if n.get("where") else "")
    extra = ""
    dtype = n.get("dtype")
    if dtype and dtype["target"] != dtype["golden"]:
        extra += f" dtype {dtype['target']} vs {dtype['golden']}"
    if minibatches and minibatches > 1 and n.get("minibatch") is not None:
        extra += f" (mini-batch {n['minibatch'] + 1} of {minibatches})"
    reason = n.get("reason")
    if reason in ("nan", "inf"):
        g = n.get("golden_nonfinite")
        both = f"; golden is {'NaN' if g == 'nan' else 'Inf'} there too" if g and g != reason else (
            "; golden is finite there" if not g else "")
        return f"{_SAY[reason]}: {n['name']}{place} {n['direction']} {n['kind']}{extra}{both}"
    if reason == "exact":
        why = f": {n['note']}" if n.get("note") else ""
        return f"{n['name']}{place} {n['direction']} {n['kind']}" + \
            f"{extra} (integer/bool values differ{why})"
    if reason in _SAY:
        extra += f" ({_SAY[reason]})"
    if n.get("layer") is not None and f"layer {n['layer']}" not in place and f".{n['layer']}." not in f".{where}.":
        extra += f" layer {n['layer']}"
    if n.get("expert") is not None:  # an MoE expert's module: its global index (an expert-parallel rank's local one differs)
        extra += f" expert {n['expert']}"
    if n.get("received") is not None:
        extra += f", its inputs carried {pct(n['received'])}"
    return f"{n['name']}{place} {n['direction']} {n['kind']} {n['metric']}={pct(n['value'])}{extra}"


def layer_line(p: dict) -> str:
    """The worst error per model layer of a pair, so that growth is visible: 0 1e-05% | 1 ... | 3 1% <-."""
    lays = p.get("layer_errors") or []
    if len(lays) < 2:
        return ""
    parts = [f"{lay['layer']} {pct(lay['worst']) if lay['worst'] is not None else '-'}"
             + (" <- introduced" if lay["introduced"] else "") for lay in lays]
    return f"error per layer, forward (step {p['step']} {p['stage']}): " + " | ".join(parts)


def render_text(doc: dict) -> str:
    """The run compare's document (document.as_dict) as text for the terminal."""
    if doc["output_dir"]:
        kept = f"; {'msprobe results' if doc.get('msprobe_csv') else 'summaries'} in {doc['output_dir']}"
    else:
        kept = "; msprobe's result files removed (-o DIR keeps them)" if doc.get("msprobe_csv") else ""
    ref = doc["reference_rank"]
    runs = [f"run {doc['target']}", f"reference rank{ref}: every other rank's dumps against it"] if ref is not None \
        else [f"target {doc['target']}", f"golden {doc['golden']}"]
    L = [*runs, f"metric {doc['metric']} > {pct(doc['threshold'])}{kept}", ""]
    said = "first divergence" if any(p["first_divergence"] for p in doc["pairs"]) else "finding"
    head = f"{'step':>4}  {'stage':24} {'rank':8} {'status':9} {'compared':15} {said}"
    L += [head, "-" * len(head)]
    for p in doc["pairs"]:
        rd = p["rank_dir"]
        rank = rd["target"] if rd["target"] == rd["golden"] else f"{rd['target']}~{rd['golden']}"
        first = p["first_divergence"]
        text = _node(first, p.get("minibatches")) if first else (
            "-" if p["status"] == "same" else
            "; ".join(f["message"] for f in p["findings"] if f["severity"] != "info") or "-")
        step = "-" if p["step"] is None else p["step"]
        L.append(f"{step:>4}  {(p['stage'] or '-'):24} {rank or '-':8} {p['status']:9} "
                 f"{short(p.get('coverage')):15} {text}")
        if first and first.get("note") and first.get("reason") != "exact":  # exact says its note in the line
            L.append(f"{'':>4}  note: {first['note']}")
    shown = 0
    for p in doc["pairs"]:
        if p["top"] and p["first_divergence"]:
            shown += 1
            if shown > TOP_SHOWN:
                continue
            L.append("")
            csv = f" ({p['result_file']})" if p.get("result_file") else ""
            L.append(f"top {len(p['top'])} of step {p['step']} {p['stage']} {p['rank_dir']['target']}{csv}:")
            L += [f"  {_node(n, p.get('minibatches'))}" for n in p["top"]]
            if layer_line(p):
                L.append(layer_line(p))
    if shown > TOP_SHOWN:
        L.append(f"(top lists of {shown - TOP_SHOWN} more diverged pair(s): --format json or --html)")
    left_out = [i for i in doc["ignored"] if i["records"] or not i["default"]]
    if left_out:
        L.append("")
    for i in left_out:
        kind = "default" if i["default"] else "--ignore"
        L.append(f"left out ({kind}): {i['records']} record(s) in {i['pairs']} pair(s) matching {i['pattern']}"
                 + (f"\n    {i['why']}" if i["why"] else ""))
    notes = doc["diagnostics"] + [f for p in doc["pairs"] for f in p["findings"]]
    if notes:
        L.append("")
    for f in notes:
        L.append(f"{f['file']}: {f['severity']} {f['rule']} {f['message']}")
        if f.get("hint"):
            L.append(f"    hint: {f['hint']}")
    both = [(p, p["both_nonfinite"]) for p in doc["pairs"] if p.get("both_nonfinite") and not p["first_divergence"]]
    if both:
        L.append("")
        for p, b in both[:TOP_SHOWN]:
            L.append(f"step {p['step']} {p['stage']}: target and golden are both {'NaN' if b['reason'] == 'nan' else 'Inf'}"
                     f" from {b['name']} on: the golden run is non-finite there too")
    n, count = len(doc["pairs"]), doc["statuses"]
    failed = count["failed"]
    L.append("")
    parts = [f"{count['diverged']} diverged" if count["diverged"] else "",
             f"{count['same']} same",
             f"{count['partial']} partly compared" if count["partial"] else "",
             f"{count['mismatch']} collected differently (not compared)" if count["mismatch"] else "",
             f"{count['error'] - failed} not compared" if count["error"] > failed else "",
             f"{failed} failed (an error of the compare itself, exit code 4)" if failed else ""]
    L.append("compared: the share of target/golden records compared; \"same\" needs "
             f"{100 * doc['min_coverage']:.3g}% of each and every module")
    L.append(f"{n} pair(s): {', '.join(x for x in parts if x)}; "
             f"{len(doc['only_in_target'])} only in target, {len(doc['only_in_golden'])} only in golden")
    return "\n".join(L) + "\n"
