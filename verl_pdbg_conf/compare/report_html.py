"""One self-contained HTML report of a comparison: per pair, the relative error of every node along
execution order (forward then backward), the threshold and the first divergence marked; plots are
inline PNG (base64) drawn with matplotlib (the optional "report" extra)."""

from __future__ import annotations

import base64
import html
import io
import math


def matplotlib_missing() -> str:
    """"" when matplotlib can be imported, else what to tell the user."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return "needs matplotlib, which is not installed: pip install 'verl-pdbg-conf[report]'"
    return ""


def _plot(pair, cmp) -> str:
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    an = pair.analysis
    xs = [n.order for n in an.nodes]
    floor = cmp.threshold / 100 if cmp.threshold > 0 else 1e-9
    ys = [max(n.value, floor) if n.value is not None and not math.isnan(n.value) and not math.isinf(n.value)
          else math.nan for n in an.nodes]
    fig = Figure(figsize=(10, 3.2), dpi=100)
    ax = fig.add_subplot(1, 1, 1)
    back = next((n.order for n in an.nodes if n.direction == "backward"), None)
    if back is not None:
        ax.axvspan(back - 0.5, len(xs) - 0.5, color="#eef2fb", zorder=0, label="backward")
    colors = ["#c0392b" if n.value is not None and not math.isnan(n.value) and n.value > cmp.threshold
              else "#bbbbbb" if n.value == 0 else "#2c7fb8" for n in an.nodes]
    ax.vlines(xs, floor, ys, colors=colors, linewidth=0.8, zorder=2)
    ax.scatter(xs, ys, c=colors, s=9, zorder=3)
    ax.text(1.0, -0.28, f"grey: equal (0, drawn at {floor:g}); red: above the threshold", transform=ax.transAxes,
            ha="right", fontsize=7, color="#777777")
    ax.axhline(cmp.threshold, color="#7f8c8d", linestyle="--", linewidth=1, label=f"threshold {cmp.threshold:g}")
    ax.set_yscale("log")
    ax.set_ylim(floor / 2, max([y for y in ys if not math.isnan(y)] + [cmp.threshold * 10]) * 3)
    ax.set_xlim(-1, max(len(xs), 1))
    ax.set_xlabel("node, in execution order (forward, then backward)")
    ax.set_ylabel(cmp.metric)
    if an.first is not None:
        f = an.first
        ax.axvline(f.order, color="#c0392b", linewidth=1.2, zorder=1)
        label = f.name if len(f.name) < 60 else "..." + f.name[-57:]
        y = ys[f.order] if not math.isnan(ys[f.order]) else cmp.threshold
        left = f.order < 0.6 * len(xs)
        ax.annotate(f"first divergence: {label}\n{f.direction} {f.kind}" + (f" [{f.module}]" if f.module else ""),
                    xy=(f.order, y), xytext=(f.order + (0.03 if left else -0.03) * len(xs), 0.93),
                    textcoords=("data", "axes fraction"), va="top", fontsize=8, color="#c0392b",
                    ha="left" if left else "right", arrowprops={"arrowstyle": "->", "color": "#c0392b"},
                    bbox={"boxstyle": "round", "fc": "white", "ec": "#c0392b", "alpha": 0.9})
    if an.first is None:
        ax.text(0.5, 0.75, "no node diverges", transform=ax.transAxes, ha="center", fontsize=10, color="#1e8449")
    ax.legend(loc="lower right" if an.first is None or an.first.order < 0.6 * len(xs) else "lower left",
              fontsize=8, framealpha=0.9)
    ax.set_ylim(floor / 2, ax.get_ylim()[1] * 30)  # room for the label above the points
    ax.grid(axis="y", color="#dddddd", linewidth=0.5)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    return buf.getvalue()


def _img(png: bytes, alt: str) -> str:
    return f"<img alt='{html.escape(alt)}' src='data:image/png;base64,{base64.b64encode(png).decode()}'>"


def _pct(v) -> str:
    if v is None:
        return "n/a"
    if isinstance(v, float) and math.isinf(v):
        return "inf"
    return f"{100 * v:.4g}%"


def _row(n) -> str:
    place = n.module if n.module is not None else (n.where or "")
    dtype = f"{n.target_dtype} / {n.golden_dtype}" if n.target_dtype != n.golden_dtype else n.target_dtype
    return (f"<tr><td>{n.order}</td><td><code>{html.escape(n.name)}</code></td><td>{html.escape(place)}</td>"
            f"<td>{n.direction}</td><td>{n.kind}</td><td>{html.escape(dtype)}</td><td>{_pct(n.value)}</td></tr>")


def render(cmp) -> str:
    out = [f"""<!DOCTYPE html><html><head><meta charset="utf-8"><title>verl-pdbg-compare</title>
<style>body{{font-family:system-ui,sans-serif;margin:2em;max-width:1100px}} table{{border-collapse:collapse;
font-size:13px}} td,th{{border:1px solid #ddd;padding:3px 6px;text-align:left}} .diverged{{color:#c0392b}}
.same{{color:#1e8449}} .error{{color:#b9770e}} code{{font-size:12px}} section{{margin-top:2em}}</style></head><body>
<h1>verl-pdbg-compare</h1>
<p>target <code>{html.escape(cmp.target)}</code><br>golden <code>{html.escape(cmp.golden)}</code><br>
metric {cmp.metric}, threshold {_pct(cmp.threshold)}; msprobe results in <code>{html.escape(cmp.out_dir)}</code></p>
<table><tr><th>step</th><th>stage</th><th>rank</th><th>status</th><th>first divergence</th></tr>"""]
    for i, p in enumerate(cmp.pairs):
        first = p.analysis.first.name if p.analysis and p.analysis.first else \
            "; ".join(f.message for f in p.findings) or "-"
        out.append(f"<tr><td>{p.step if p.step is not None else '-'}</td><td>{html.escape(p.stage or '-')}</td>"
                   f"<td>{html.escape(p.rank_label)}</td><td class='{p.status}'>{p.status}</td>"
                   f"<td><a href='#pair{i}'>{html.escape(first)}</a></td></tr>")
    out.append("</table>")
    only = [("target", s) for s in cmp.only_in_target] + [("golden", s) for s in cmp.only_in_golden]
    if only:
        out.append("<p>" + "<br>".join(f"only in {w}: <code>{html.escape(s.label)}</code>" for w, s in only) + "</p>")
    for i, p in enumerate(cmp.pairs):
        out.append(f"<section id='pair{i}'><h2>step {p.step if p.step is not None else '-'} · "
                   f"{html.escape(p.stage or '-')} · {html.escape(p.rank_label)} "
                   f"<span class='{p.status}'>{p.status}</span></h2>")
        for f in p.findings:
            out.append(f"<p class='error'>{f.rule}: {html.escape(f.message)}</p>")
        if p.analysis:
            out.append(_img(_plot(p, cmp), f"{cmp.metric} along execution order") if p.analysis.nodes
                       else "<p>no nodes</p>")
            rows = ([p.analysis.first] if p.analysis.first else []) + \
                [n for n in p.analysis.top if n is not p.analysis.first]
            if rows:
                out.append("<table><tr><th>#</th><th>node</th><th>module / where</th><th>direction</th>"
                           "<th>kind</th><th>dtype</th><th>" + cmp.metric + "</th></tr>")
                out += [_row(n) for n in rows]
                out.append("</table>")
            out.append(f"<p>msprobe result: <code>{html.escape(p.result_file or '')}</code></p>")
        out.append("</section>")
    out.append("</body></html>\n")
    return "\n".join(out)


def write_html(cmp, path: str) -> None:
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(render(cmp))
