"""The run compare's document (report/document.py as_dict) as one self-contained HTML page, bounded at any
run size: an overview of the run (steps x stages as rows, ranks as columns, each cell coloured by status and
saying where that pair first diverged), then one line per pair, and for each diverged pair whose layers the
document holds (its first document.MAX_PLOTS) a plot of its layers along execution order (at most
MAX_LAYERS bars, whatever the number of nodes) with the first divergence and NaN/Inf marked. It renders
the document only. Plots are inline PNG drawn with matplotlib (the optional "report" extra); no script."""

from __future__ import annotations

import base64
import html
import io
import math

from verl_pdbg_conf.compare.pipeline.coverage import coverage_text, short
from verl_pdbg_conf.compare.report import document
from verl_pdbg_conf.compare.report.runs_text import pct
from verl_pdbg_conf.compare.pairs import rank_number

COMPACT_RANKS = 16  # above this many ranks, overview cells are colour only (details on hover)
COLOURS = {"same": "#cfe8d5", "diverged": "#f1b0a8", "partial": "#fbeeb5", "error": "#f6d7a7", "mismatch": "#d9cdee",
           "pending": "#eeeeee", "only": "#dddddd"}  # by Pair.status; "only": in one run only


def matplotlib_missing() -> str:
    """"" when matplotlib can be imported, else what to tell the user."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        from verl_pdbg_conf.install_hints import MATPLOTLIB

        return f"needs matplotlib, which is not installed: {MATPLOTLIB}"
    return ""


def _num(v):
    """A number of the document as a float: "inf" (json_number's) back to inf; None stays None."""
    return math.inf if v == "inf" else v


def plot_layers(p: dict, metric: str, threshold: float, title: str = "") -> bytes:
    """PNG of a pair of the document (with its layers): one bar per layer (x: from its first node to the
    next layer's, in execution order; y: its worst metric, log scale), red above the threshold; the
    first divergence a red line with its node named; NaN and Inf layers marked along the top."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    layers = [dict(lay, worst=_num(lay["worst"])) for lay in p["layers"]]
    total = max(p["nodes"], sum(lay["nodes"] for lay in layers), 1)
    floor = threshold / 100 if threshold > 0 else 1e-9
    by_layer = [lay for lay in p.get("layer_errors") or [] if lay.get("worst") is not None]
    fig = Figure(figsize=(11, 3.6), dpi=100)
    ax = fig.add_subplot(1, 4, (1, 3)) if len(by_layer) > 1 else fig.add_subplot(1, 1, 1)
    if len(by_layer) > 1:
        _plot_by_layer(fig.add_subplot(1, 4, 4), by_layer, threshold, floor)
    xs = [lay["first_order"] for lay in layers]
    widths = [max(nxt - x, 1) for x, nxt in zip(xs, xs[1:] + [total])]
    # a worst of inf (a golden norm of 0) has no place on a log axis: its bar is drawn full height; NaN
    # stays at the floor (both are marked along the top)
    finite = [lay["worst"] is not None and math.isfinite(lay["worst"]) for lay in layers]
    ys = [max(lay["worst"], floor) if ok else floor for lay, ok in zip(layers, finite)]
    top = max(ys + [threshold * 10]) * 300
    ys = [top / 3 if lay["worst"] == math.inf else y for y, lay in zip(ys, layers)]
    colours = ["#c0392b" if lay["worst"] is not None and lay["worst"] > threshold else
               "#bbbbbb" if not lay["worst"] else "#2c7fb8" for lay in layers]
    ax.bar(xs, [y - floor / 2 for y in ys], width=widths, bottom=floor / 2, align="edge", color=colours,
           edgecolor="white", linewidth=0.3 if len(layers) > 100 else 0.8, zorder=2)
    ax.axhline(threshold, color="#7f8c8d", linestyle="--", linewidth=1, label=f"threshold {threshold:g}")
    ax.set_yscale("log")
    ax.set_ylim(floor / 2, top)
    ax.set_xlim(0, total)
    for flag, colour, mark in (("nan", "#8e44ad", "NaN"), ("inf", "#e67e22", "Inf")):
        hit = [x + w / 2 for x, w, lay in zip(xs, widths, layers)
               if lay[flag] or (flag == "inf" and lay["worst"] == math.inf)]
        if hit:
            ax.scatter(hit, [top / 3] * len(hit), marker="v", s=40, color=colour, zorder=4,
                       label=f"{mark} in a layer ({len(hit)})")
    first = p["first_divergence"]
    if first is not None:
        where, order = p["first_layer"], first["order"]
        ax.axvline(order, color="#c0392b", linewidth=1.4, zorder=3)
        name = first["name"] if len(first["name"]) < 64 else "..." + first["name"][-61:]
        left = order < 0.6 * total
        ax.annotate(f"first divergence (node {order:,} of {total:,}): {name}\n"
                    f"{first['direction']} {first['kind']}" + (f" in {where}" if where else "")
                    + (f" ({first['reason']})" if first.get("reason") else ""),
                    xy=(order, top / 30), xytext=(order + (0.02 if left else -0.02) * total, top / 8),
                    va="top", fontsize=8, color="#c0392b", ha="left" if left else "right",
                    arrowprops={"arrowstyle": "->", "color": "#c0392b"},
                    bbox={"boxstyle": "round", "fc": "white", "ec": "#c0392b", "alpha": 0.9}, zorder=5)
    else:
        ax.text(0.5, 0.75, "no node diverges", transform=ax.transAxes, ha="center", fontsize=10, color="#1e8449")
    ticks = _ticks(layers, total, 8)
    ax.set_xticks([lay["first_order"] for lay in ticks])
    ax.set_xticklabels([_short(lay["label"].split(" .. ")[0]) for lay in ticks], rotation=30, ha="right", fontsize=7)
    ax.set_xlabel(f"layers in execution order ({len(layers)} bars over {total:,} nodes; a bar spans from the "
                  "layer's first node to the next layer's)", fontsize=8)
    ax.set_ylabel(f"worst {metric}", fontsize=8)
    if title:
        ax.set_title(title, fontsize=9)
    ax.legend(loc="upper right" if first is None or first["order"] < 0.6 * total else "upper left", fontsize=7,
              framealpha=0.9)
    ax.grid(axis="y", color="#dddddd", linewidth=0.5)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    return buf.getvalue()


def _plot_by_layer(ax, by_layer: list, threshold: float, floor: float) -> None:
    """The worst error per model layer (model.layers.K), so that growth is visible: accumulated rounding
    rises evenly, a change jumps at the layer that introduces it (marked)."""
    xs = [lay["layer"] for lay in by_layer]
    ys = [max(min(_num(lay["worst"]), 1e30), floor) for lay in by_layer]
    ax.plot(xs, ys, marker="o", markersize=3, color="#2c7fb8", linewidth=1, label="forward")
    back = [(lay["layer"], max(min(_num(lay["worst_backward"]), 1e30), floor)) for lay in by_layer
            if lay.get("worst_backward") is not None]
    if back:
        ax.plot(*zip(*back), marker=".", markersize=3, color="#95a5a6", linewidth=1, label="backward")
    hit = [(x, y) for x, y, lay in zip(xs, ys, by_layer) if lay.get("introduced")]
    if hit:
        ax.scatter(*zip(*hit), color="#c0392b", zorder=3, s=30, label="introduced")
    ax.legend(fontsize=7)
    ax.axhline(threshold, color="#7f8c8d", linestyle="--", linewidth=1)
    ax.set_yscale("log")
    ax.set_xlabel("model layer", fontsize=8)
    from matplotlib.ticker import MaxNLocator

    ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # a layer index, never 0.5
    ax.set_title("worst error per layer", fontsize=8)
    ax.tick_params(labelsize=7)
    ax.grid(color="#dddddd", linewidth=0.5)


def _ticks(layers: list[dict], total: int, n: int) -> list[dict]:
    """At most n layers to label, at least total/n nodes apart on the x axis (labels of layers that are
    close in execution order would overlap), the first divergence's layer always among them."""
    gap = total / n
    kept: list = []
    for lay in sorted(layers, key=lambda lay: (not lay["diverged"], lay["first_order"])):
        if all(abs(lay["first_order"] - k["first_order"]) >= gap for k in kept):
            kept.append(lay)
    return sorted(kept, key=lambda lay: lay["first_order"])


def left_of_first(p: dict) -> str:
    """The pair's left_of_first (document.py) said as a reader needs it beside the plot; "" without it."""
    left = p.get("left_of_first")
    if not left:
        return ""
    after, before, order = left["after"], left["before"], p["first_divergence"]["order"]
    said = []
    if after:
        said.append(f"{_names(after)}: the worst node ran after the first divergence (node {order:,}), in "
                    "the backward pass or a later mini-batch, so it carries the divergence (a bar spans its "
                    "layer's nodes from the first one on, backward too)")
    if before:
        said.append(f"{_names(before)}: ran before it with its inputs already as far off (rounding carried in, "
                    "each earlier node under the threshold); the first divergence is the first node that "
                    "passes the threshold while its inputs agree")
    return ("Red bars left of the first divergence are not its cause: " + "; ".join(said) + ". The panel "
            "on the right takes each model layer's worst over every mini-batch.")


def _names(labels: list[str], n: int = 4) -> str:
    shown = ", ".join(labels[:n])
    return shown + (f" and {len(labels) - n} more" if len(labels) > n else "")


def _short(label: str, n: int = 28) -> str:
    return label if len(label) <= n else "..." + label[-(n - 3):]


def _img(png: bytes, alt: str) -> str:
    return f"<img alt='{html.escape(alt)}' src='data:image/png;base64,{base64.b64encode(png).decode()}'>"


def _value(n: dict) -> str:
    """A node's metric for the table: NaN where the node is (the document's null), else as a percentage."""
    return "NaN" if n["value"] is None and n.get("reason") == "nan" else pct(n["value"])


def _row(n: dict) -> str:
    place = n["module"] if n["module"] is not None else n.get("where", "")
    d = n.get("dtype") or {"target": "", "golden": ""}
    dtype = f"{d['target']} / {d['golden']}" if d["target"] != d["golden"] else d["target"]
    return (f"<tr><td>{n['order']}</td><td><code>{html.escape(n['name'])}</code></td><td>{html.escape(place)}</td>"
            f"<td>{n['direction']}</td><td>{n['kind']}</td><td>{html.escape(dtype)}</td><td>{_value(n)}</td></tr>")


def _label(p: dict) -> str:
    """The pair's name as the run compare's findings have it (pairs.Pair.label)."""
    return "/".join(x for x in (p["key"], p["rank_label"]) if x)


def _group(p: dict) -> str:
    """The overview row a pair or a side belongs to beside its step: its stage, else its path."""
    return p["stage"] or p["key"] or "-"


def where_first(p: dict) -> str:
    """Where a pair first diverged, short: its layer (or call site) and its place in execution order."""
    f = p["first_divergence"]
    if not f:
        return ""
    place = p["first_layer"] or f["node"]
    return f"{place} @{100 * f['order'] / p['nodes']:.0f}%" if p["nodes"] else place


def _cell_text(p: dict) -> tuple[str, str]:
    """(short text, hover text) for an overview cell."""
    if p["status"] == "diverged":
        f = p["first_divergence"]
        return where_first(p), f"{_label(p)}: first divergence {f['name']} ({f['direction']} {f['kind']}, node {f['order']})"
    if p["status"] in ("error", "mismatch"):
        return p["status"], f"{_label(p)}: " + "; ".join(f["message"] for f in p["findings"])
    cov = p["coverage"]
    if cov:
        return f"{p['status']} {short(cov)}", f"{_label(p)}: {p['status']}; {coverage_text(cov)}"
    return p["status"], f"{_label(p)}: {p['status']}"


def overview(doc: dict) -> str:
    """Steps x stages (rows, in run order) by ranks (columns): one cell per pair, coloured by status."""
    rows: dict[tuple, dict[str, tuple[str, str, str]]] = {}
    ranks: list[str] = []
    for i, p in enumerate(doc["pairs"]):
        text, hover = _cell_text(p)
        rows.setdefault((p["step"], _group(p)), {})[p["rank_label"]] = (p["status"], text, hover, f"#pair{i}")
        if p["rank_label"] not in ranks:
            ranks.append(p["rank_label"])
    for which in ("target", "golden"):
        for s in doc[f"only_in_{which}"]:
            label = s["rank_dir"] or "dump"
            rows.setdefault((s["step"], _group(s)), {}).setdefault(
                label, ("only", f"only in {which}", f"{s['label']}: only in the {which} run", ""))
            if label not in ranks:
                ranks.append(label)
    ranks.sort(key=lambda r: (rank_number(r) is None, rank_number(r) or 0, r))
    compact = len(ranks) > COMPACT_RANKS
    out = ["<table class='overview'><tr><th>step</th><th>stage</th>"
           + "".join(f"<th>{html.escape(r) if not compact else ''}</th>" for r in ranks) + "</tr>"]
    for (step, stage), cells in rows.items():
        tds = []
        for r in ranks:
            if r not in cells:
                tds.append("<td></td>")
                continue
            status, text, hover, link = cells[r]
            status = status if status in COLOURS else "pending"
            inner = "" if compact else html.escape(text)
            if link:
                inner = f"<a href='{link}'>{inner or '&nbsp;'}</a>"
            tds.append(f"<td class='cell' style='background:{COLOURS[status]}' title='{html.escape(hover)}'>"
                       f"{inner}</td>")
        out.append(f"<tr><td>{'-' if step is None else step}</td><td>{html.escape(stage)}</td>{''.join(tds)}</tr>")
    out.append("</table>")
    legend = " ".join(f"<span class='cell' style='background:{COLOURS[s]}'>{s if s != 'only' else 'in one run only'}"
                      "</span>" for s in ("same", "diverged", "partial", "error", "mismatch", "only"))
    note = "diverged cells: the layer of the first divergence @ its place in execution order; others: the " \
        "share of target/golden records compared (partial: no divergence in what was compared, not all was)" + \
        ("; hover a cell for details" if compact else "")
    return f"<p>{legend}<br><small>{note}</small></p>" + "\n".join(out)


def _runs_said(doc: dict) -> str:
    """The header's first lines: the two runs (or the run and its reference rank), and where files are."""
    if doc["reference_rank"] is not None:
        said = (f"run <code>{html.escape(doc['target'])}</code><br>reference rank{doc['reference_rank']}: every "
                "other rank's dumps against it")
    else:
        said = f"target <code>{html.escape(doc['target'])}</code><br>golden <code>{html.escape(doc['golden'])}</code>"
    kept = f"; results in <code>{html.escape(doc['output_dir'])}</code>" if doc["output_dir"] else ""
    return f"{said}<br>metric {doc['metric']}, threshold {pct(doc['threshold'])}{kept}"


def _left_out(doc: dict) -> str:
    """What the ignore patterns left out, per pattern (the default's with why)."""
    lines = []
    for i in doc["ignored"]:
        if not i["records"] and i["default"]:
            continue
        kind = "default" if i["default"] else "--ignore"
        why = f"<br><small>{html.escape(i['why'])}</small>" if i["why"] else ""
        lines.append(f"<p class='line'>left out ({kind}): {i['records']} record(s) in {i['pairs']} pair(s) matching "
                     f"<code>{html.escape(i['pattern'])}</code>{why}</p>")
    return "\n".join(lines)


def _first_said(p: dict) -> str:
    """A diverged pair's first node, with its mini-batch when the stage ran several."""
    f, n = p["first_divergence"], p["minibatches"]
    mb = f" (mini-batch {f['minibatch'] + 1} of {n})" if n and n > 1 and f.get("minibatch") is not None else ""
    return f"first divergence <code>{html.escape(f['name'])}</code>{mb} in {html.escape(where_first(p))}"


def render(doc: dict) -> str:
    """The run compare's document (document.as_dict) as the page."""
    count, metric = doc["statuses"], doc["metric"]
    out = [f"""<!DOCTYPE html><html><head><meta charset="utf-8"><title>verl-pdbg-compare</title>
<style>body{{font-family:system-ui,sans-serif;margin:2em;max-width:1200px}} table{{border-collapse:collapse;
font-size:13px}} td,th{{border:1px solid #ddd;padding:3px 6px;text-align:left}} .diverged{{color:#c0392b}}
.same{{color:#1e8449}} .error{{color:#b9770e}} code{{font-size:12px}} section{{margin-top:1.5em}}
table.overview td.cell{{font-size:11px;min-width:10px;white-space:nowrap}} span.cell{{padding:1px 6px}}
p.line{{margin:2px 0;font-size:13px}}</style></head><body>
<h1>verl-pdbg-compare</h1>
<p>{_runs_said(doc)}<br>
{len(doc["pairs"])} pair(s): {count['diverged']} diverged, {count['same']} same,
{count['partial']} partly compared,
{count['mismatch']} collected differently,
{count['error']} not compared</p>
<h2>Overview: steps x stages x ranks</h2>""", overview(doc), _left_out(doc), "<h2>Pairs</h2>"]
    for i, p in enumerate(doc["pairs"]):
        status = p["status"]
        head = (f"step {p['step'] if p['step'] is not None else '-'} · {html.escape(_group(p))}"
                f" · {html.escape(p['rank_label'])} <span class='{status}'>{status}</span>")
        if status != "diverged" or p.get("layers") is None:
            said = "; ".join(f"{f['rule']}: {f['message']}" for f in p["findings"])
            if status == "diverged":
                said = f"{_first_said(p)} (plotted: the first {document.MAX_PLOTS} diverged pairs)"
            elif p["task"] is not None:  # compared: an analysis
                said = f"{p['nodes']:,} nodes, none diverges"
                if p["coverage"]:
                    said += f"; {html.escape(coverage_text(p['coverage']))}"
                b = p["both_nonfinite"]
                if b is not None:
                    said += (f"; target and golden both {'NaN' if b.get('reason') == 'nan' else 'Inf'} from "
                             f"<code>{html.escape(b['name'])}</code> on")
            out.append(f"<p class='line' id='pair{i}'>{head}: {said or html.escape(status)}</p>")
            continue
        cov = f"<br><small>{html.escape(coverage_text(p['coverage']))}</small>" if p["coverage"] else ""
        out.append(f"<section id='pair{i}'><h3>{head}</h3><p>{_first_said(p)}{cov}</p>")
        out.append(_img(plot_layers(p, metric, doc["threshold"]), f"worst {metric} per layer along execution order"))
        why = left_of_first(p)
        if why:
            out.append(f"<p class='why'>{html.escape(why)}</p>")
        first = p["first_divergence"]
        rows = [first] + [n for n in p["top"] if (n["order"], n["name"]) != (first["order"], first["name"])]
        out.append("<table><tr><th>#</th><th>node</th><th>module / where</th><th>direction</th>"
                   "<th>kind</th><th>dtype</th><th>" + metric + "</th></tr>")
        out += [_row(n) for n in rows]
        out.append("</table>")
        if p["result_file"]:
            out.append(f"<p>msprobe result: <code>{html.escape(p['result_file'])}</code></p>")
        out.append("</section>")
    out.append("</body></html>\n")
    return "\n".join(out)

