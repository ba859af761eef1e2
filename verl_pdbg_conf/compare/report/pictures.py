"""The rollout report's pictures, as inline SVG (no plotting library): per token, in request order, the
log-prob gap and where the token parts; for an MoE model, the layers where each token was routed
differently. They read the pair's dict (token_map, routing) and nothing else."""

from __future__ import annotations

import html
import math
import re

WIDTH = 960
LEFT = 150  # room for the row labels
FLOOR = 1e-9  # the smallest |gap| drawn (an exact match sits here)
RED, GREEN, GREY = "#c0392b", "#2e8b57", "#bbb"


def _rows_of(modules: list[str]) -> list[str]:
    """Where tokens part, as picture rows: model layers by number, then anything outside them."""
    return sorted({_row_name(m) for m in modules},
                  key=lambda n: (0, int(n.split()[1]), n) if n.startswith("layer ") else (1, 0, n))


def _row_name(m: str) -> str:
    k = re.search(r"layers\.(\d+)\.", m + ".")
    return f"layer {k.group(1)}" if k else m


def _frame(height: int, body: list[str], title: str) -> str:
    return (f"<figure><figcaption>{html.escape(title)}</figcaption><svg xmlns='http://www.w3.org/2000/svg' "
            f"width='{WIDTH + LEFT + 10}' height='{height}' font-family='sans-serif' font-size='11'>"
            + "".join(body) + "</svg></figure>")


def _columns(tokens: list) -> tuple[float, dict, list[str]]:
    """Column width, each (request, position)'s x, and the lines between requests."""
    w = WIDTH / max(1, len(tokens))
    xs, marks, last = {}, [], None
    for i, (rid, pos, *_rest) in enumerate(tokens):
        x = LEFT + i * w
        xs[(rid, pos)] = x
        if rid != last:
            marks.append(f"<line x1='{x:.1f}' x2='{x:.1f}' y1='0' y2='100%' stroke='#ddd'/>")
            if len(tokens) <= 400 or i == 0:
                marks.append(f"<text x='{x + 2:.1f}' y='10' fill='#888'>r{html.escape(str(rid))}</text>")
            last = rid
    return w, xs, marks


def gap_picture(token_map: dict | None) -> str:
    """|log-prob gap| per token (log scale) over the row where it parts, one column per token."""
    tokens = (token_map or {}).get("tokens") or []
    if not tokens:
        return ""
    w, xs, marks = _columns(tokens)
    gaps = [abs(t[2]) for t in tokens if t[2] is not None]
    top = max([1e-6, *gaps])
    lo, hi = math.log10(FLOOR), math.log10(top)
    bar_h = 120
    rows = _rows_of([t[3] for t in tokens if t[3]])
    body = marks + [f"<text x='4' y='14'>|log-prob gap|</text><text x='4' y='{bar_h + 12}'>{FLOOR:g}</text>",
                    f"<text x='4' y='28'>{top:.3g}</text>"]
    for rid, pos, gap, module in tokens:
        x = xs[(rid, pos)]
        said = "no log-prob (a prompt position: nothing sampled there)" if gap is None else f"gap {gap:.3g}"
        tip = f"<title>request {html.escape(str(rid))} position {pos}: {said}" \
              f"{'' if not module else ', parts at ' + html.escape(module)}</title>"
        if gap is None:
            body.append(f"<rect x='{x:.1f}' y='{bar_h + 10}' width='{max(w - 0.5, 0.5):.1f}' height='2' fill='{GREY}'>"
                        f"{tip}</rect>")
            continue
        h = bar_h * (math.log10(max(abs(gap), FLOOR)) - lo) / max(hi - lo, 1e-9)
        body.append(f"<rect x='{x:.1f}' y='{bar_h + 12 - h:.1f}' width='{max(w - 0.5, 0.5):.1f}' height='{h:.1f}' "
                    f"fill='{RED if module else GREEN}'>{tip}</rect>")
    y0 = bar_h + 30
    for i, name in enumerate(rows):
        body.append(f"<text x='4' y='{y0 + 14 * i + 10}'>{html.escape(name)}</text>")
    for rid, pos, _gap, module in tokens:
        if module:
            i = rows.index(_row_name(module))
            body.append(f"<rect x='{xs[(rid, pos)]:.1f}' y='{y0 + 14 * i + 2}' width='{max(w - 0.5, 0.5):.1f}' "
                        f"height='10' fill='{RED}'/>")
    every = token_map.get("every", 1)
    note = f" (every {every}th of {token_map.get('of')} tokens)" if every > 1 else ""
    return _frame(y0 + 14 * len(rows) + 8, body, "Per token, request by request: the log-prob gap (green: the "
                  "token agrees at every point; red: it parts; grey: a prompt position, no log-prob sampled), and "
                  "below, where it parts" + note)


def routing_picture(routing: dict | None, token_map: dict | None) -> str:
    """Per MoE layer (rows) and token (columns, as in the gap picture): where the two sides chose other experts."""
    if not routing or not routing.get("recomputed") or not routing.get("layers"):
        return ""
    tokens = (token_map or {}).get("tokens") or []
    if not tokens:
        return ""
    w, xs, marks = _columns(tokens)
    layers = [r["layer"] for r in routing["layers"]]
    body = list(marks)
    for i, row in enumerate(routing["layers"]):
        body.append(f"<text x='4' y='{20 + 14 * i + 10}'>{html.escape(_row_name(row['layer']))} "
                    f"{100 * row['share']:.1f}%</text>")
    for rid, pos, idx in routing.get("where") or []:
        x = xs.get((rid, pos))
        if x is None:
            continue  # a token the gap picture thinned out
        for i in idx:
            body.append(f"<rect x='{x:.1f}' y='{20 + 14 * i + 2}' width='{max(w - 0.5, 0.5):.1f}' height='10' "
                        f"fill='{RED}'><title>request {html.escape(str(rid))} position {pos}: "
                        f"{html.escape(layers[i])}</title></rect>")
    return _frame(20 + 14 * len(layers) + 8, body, f"Tokens routed differently, per MoE layer: "
                  f"{routing['routed_differently']} of {routing['tokens']} tokens in at least one layer "
                  f"({100 * routing['share']:.1f}%)")
