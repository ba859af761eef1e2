"""The rollout comparison's reports: text for the terminal, one self-contained HTML page (no plotting
library needed); both read the rollout compare's document (document.token_dict) and nothing else."""

from __future__ import annotations

import html

from verl_pdbg_conf.compare.report.pictures import gap_picture, routing_picture


def render_text(doc: dict) -> str:
    lines = []
    for p in doc["pairs"]:
        cov = p.get("coverage") or {}
        head = f"step {p['step']}: {p['stage']}: {p['status']}"
        if cov:
            head += (f" (tokens compared {cov['tokens_compared']} of {cov['rollout_tokens']} rollout rows, "
                     f"{100 * cov['target']:.1f}% / {100 * cov['golden']:.1f}% of the actor's; "
                     f"{cov['requests_aligned']} of {cov['rollout_requests']} requests aligned, "
                     f"{cov['engine_steps'] if 'engine_steps' in cov else p.get('engine_steps')} engine steps)")
        lines.append(head)
        if p.get("max_logprob_gap") is not None:
            lines.append(f"  max |log-prob gap| (engine's returned vs the actor's, from the dumps): "
                         f"{p['max_logprob_gap']:.3g}")
        fd = p.get("first_divergence")
        if fd:
            where = f" {fd['kind']}"
            if fd["kind"] == "logprob" and fd["module"] != "sampler":
                where = (f": the log-softmax of the engine's logits is {fd['value']:.3g} off the actor's (no dumped "
                         "logits on both sides; from the token records)")
            elif fd["kind"] == "logprob":
                where = (f": the engine's returned log-prob is {fd['value']:.3g} off the log-softmax of its own logits "
                         "(which agree with the actor's): taken after temperature or top-k/top-p (logprobs_mode)")
            elif fd.get("span"):
                where = (f": {', '.join(m.rpartition('.')[2] for m in fd['span'])}, no trainer module; compared at "
                         f"{fd['compared_at']}")
            elif fd["kind"] == "routing":
                r = fd["routing"]
                where = (f": routed differently, engine experts {r['engine']} (margin {_g(r['engine_margin'])}), "
                         f"actor {r['trainer']} (margin {_g(r['trainer_margin'])}), the router's logits agreeing: "
                         + ("the actor's router replayed experts its own logits rank lower, and not the engine's: "
                            "a routing-replay bug, not a near-tie" if r.get("replayed") else
                            "a near-tie, not a module"))
            elif fd.get("experts"):
                which = (f"expert {fd['expert']}" if "expert" in fd else
                         f"one of experts {fd['experts']}" if fd["experts"] else "no single expert")
                where = f" {fd['kind']}: {which} (the tokens routed to it part, the others agree)"
            carried = f" (carried in {100 * fd['carried']:.3g}%)"
            size = "" if fd["kind"] == "logprob" else f", {_nonfinite(fd['nonfinite'])}{carried}" \
                if fd.get("nonfinite") else f", error {100 * fd['value']:.4g}%{carried}"
            lines.append(f"  first divergence: {fd['module']}{where}{size} at request {fd['request']} position "
                         f"{fd['position']}")
            for t in p.get("top") or []:
                lines.append(f"    {t['module']}: {t['tokens']} token(s) part here")
        lines += _routing_lines(p.get("routing"))
        for r in p.get("requests") or []:
            g = f", max |log-prob gap| {r['max_logprob_gap']:.3g}" if r["max_logprob_gap"] is not None else ""
            d = f", parts at {r['first_divergence']['module']}" if r["first_divergence"] else ""
            lines.append(f"  request {r['request']}: {r['compared']}/{r['tokens']} tokens compared{g}{d}")
        for f in p.get("findings") or []:
            lines.append(f"  {f['severity']} {f['rule']}: {f['message']}" + (f"\n    hint: {f['hint']}" if f.get("hint") else ""))
    for f in doc.get("diagnostics") or []:
        lines.append(f"{f['severity']} {f['rule']}: {f['message']}")
    return "\n".join(lines) + "\n"


def _nonfinite(sides: dict) -> str:
    """Which side holds NaN or Inf where the other does not (or another one)."""
    said = [f"the {'actor' if side == 'trainer' else side}'s row holds {'NaN' if kind == 'nan' else 'Inf'}"
            for side, kind in sides.items() if kind]
    return " and ".join(said) + (", the other's is finite" if len(said) == 1 else "")


def _num(x, fmt: str) -> str:
    """A number as a reader sees it in a table: a dash where there is none (a prompt position has no
    log-prob), never "None"."""
    return "-" if x is None else format(x, fmt)


def _g(x: float | None) -> str:
    return "none" if x is None else f"{x:.3g}"


def _routing_lines(routing: dict | None) -> list[str]:
    """The MoE layers' routing, side by side: the share routed differently, per layer the tokens and margins."""
    if not routing:
        return []
    if not routing.get("recomputed"):
        return [f"  routing: not compared ({routing.get('why')})"]
    k = f"top-{routing['top_k']}" if routing.get("top_k") else "top-k"
    how = (f"{k}; the engine's choice: {routing['engine_choice']} ({routing['captured']} token-layers captured)"
           if routing.get("captured") else f"{k} of {routing.get('score') or 'the router logits'}, the engine's "
           "recomputed as its router chooses") + (f"; bias: {routing['bias']}" if routing.get("bias") else "")
    out = [f"  routing ({how}): "
           f"{routing['routed_differently']} of {routing['tokens']} tokens routed differently in at least one "
           f"layer ({100 * routing['share']:.1f}%)"]
    rep = routing.get("replay")
    if rep:
        out.append(f"  routing replay: the actor's routers returned experts their own logits rank below ones they "
                   f"dropped at {rep['imposed']} token-layer(s), so they replayed a record; "
                   + ("tokens routed differently under it are a replay bug, not near-ties" if rep["bug"] else
                      "every replayed token got the engine's experts"))
        for l in rep["layers"]:
            if l["follows"] is not None:
                out.append(f"    {l['layer']} replays the engine's {l['follows']} ({l['follows_tokens']} of the "
                           f"{l['follows_of']} tokens routed differently get that layer's experts): the replay is "
                           "attached to the wrong layer")
    for layer in routing.get("layers") or []:
        out.append(f"    {layer['layer']}: {layer['routed_differently']} of {layer['tokens']} tokens "
                   f"({100 * layer['share']:.1f}%)")
        for t in layer.get("differing") or []:
            out.append(f"      request {t['request']} position {t['position']}: engine {t['engine']} (margin "
                       f"{_g(t['engine_margin'])}), actor {t['trainer']} (margin {_g(t['trainer_margin'])})")
    return out


def render_html(doc: dict) -> str:
    e = html.escape
    out = ["<!doctype html><html><head><meta charset='utf-8'><title>rollout vs actor</title><style>"
           "body{font-family:sans-serif;margin:2em}table{border-collapse:collapse;margin:1em 0}"
           "td,th{border:1px solid #ccc;padding:.2em .6em;text-align:left}.diverged{color:#b00}"
           ".same{color:#070}.partial,.mismatch,.error{color:#a60}</style></head><body>",
           f"<h1>Rollout against the actor</h1><p>rollout: {e(doc['target'])}<br>actor: {e(doc['golden'])}<br>"
           f"threshold {doc['threshold']:g} ({e(doc['metric'])}){' , dtype-aware' if doc.get('dtype_aware') else ''}</p>"]
    for p in doc["pairs"]:
        cov = p.get("coverage") or {}
        out.append(f"<h2>step {e(str(p['step']))}: <span class='{e(p['status'])}'>{e(p['status'])}</span></h2>")
        if cov:
            out.append(f"<p>{cov['tokens_compared']} of {cov['rollout_tokens']} rollout rows compared "
                       f"({100 * cov['target']:.1f}% / {100 * cov['golden']:.1f}% of the actor's), "
                       f"{cov['requests_aligned']} of {cov['rollout_requests']} requests aligned, "
                       f"{p.get('engine_steps')} engine steps</p>")
        fd = p.get("first_divergence")
        if fd:
            span = f" (engine modules: {e(', '.join(fd['span']))})" if fd.get("span") else ""
            span += f", expert {fd['expert']}" if "expert" in fd else ""
            size = e(_nonfinite(fd["nonfinite"])) if fd.get("nonfinite") else (
                f"error {100 * fd['value']:.4g}%" if fd["value"] is not None else "")
            out.append(f"<p>first divergence: <b>{e(fd['module'])}</b> {e(fd['kind'])}, {size} with "
                       f"{100 * fd['carried']:.3g}% carried in, request "
                       f"{e(fd['request'])} position {fd['position']}{span}</p>")
        out += [f"<p>{e(line.strip())}</p>" for line in _routing_lines(p.get("routing"))[:1]]
        out.append(gap_picture(p.get("token_map")))
        out.append(routing_picture(p.get("routing"), p.get("token_map")))
        out.append("<table><tr><th>request</th><th>tokens compared</th><th>diverged tokens</th>"
                   "<th>max |log-prob gap|</th><th>parts at</th></tr>")
        for r in p.get("requests") or []:
            gap = _num(r["max_logprob_gap"], ".3g")
            at = e(r["first_divergence"]["module"]) if r["first_divergence"] else "-"
            out.append(f"<tr><td>{e(r['request'])}</td><td>{r['compared']}/{r['tokens']}</td>"
                       f"<td>{r['diverged_tokens']}</td><td>{gap}</td><td>{at}</td></tr>")
        out.append("</table><table><tr><th>request</th><th>position</th><th>token</th><th>log-prob engine</th>"
                   "<th>log-prob actor</th><th>gap</th><th>parts at</th></tr>")
        for t in p.get("tokens") or []:
            at = e(t["first_divergence"]["module"]) if t["first_divergence"] else "-"
            out.append(f"<tr><td>{e(t['request'])}</td><td>{t['position']}</td><td>{t['token_id']}</td>"
                       f"<td>{_num(t['logprob_engine'], '.6g')}</td><td>{_num(t['logprob_trainer'], '.6g')}</td>"
                       f"<td>{_num(t['logprob_gap'], '.3g')}</td><td>{at}</td></tr>")
        out.append("</table>")
        for f in p.get("findings") or []:
            out.append(f"<p class='partial'>{e(f['severity'])} {e(f['rule'])}: {e(f['message'])}</p>")
    out.append("</body></html>")
    return "\n".join(out) + "\n"
