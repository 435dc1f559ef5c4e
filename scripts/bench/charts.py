#!/usr/bin/env python3
"""Draws docs/bench/NAME.svg from each docs/bench/NAME.json a benchmark script wrote.

A results file holds {"title": str, "note": str, "peers": [{"peer": str, "rows_per_s":
float, "peak_rss_mib": float}, ...]} (extra keys are ignored). Each chart shows two panels
of horizontal bars, throughput and peak memory, Outflow first and highlighted. Plain SVG,
no plotting library, so the charts are regenerated anywhere: python3 scripts/bench/charts.py
"""

import glob
import html
import json
import os

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUT = os.path.join(REPO, "docs", "bench")

BAR_H, GAP, LABEL_W, BAR_W, PANEL_GAP = 22, 8, 160, 300, 40


def human(value: float, unit: str) -> str:
    if unit == "rows/s":
        for size, suffix in ((1e6, "M"), (1e3, "k")):
            if value >= size:
                return f"{value / size:.2f}{suffix} rows/s"
        return f"{value:.0f} rows/s"
    if unit == "files/s":
        return f"{value:,.0f} files/s"
    return f"{value:,.0f} MiB"


def panel(x0: int, y0: int, title: str, peers, key: str, unit: str) -> list:
    values = [p.get(key) or 0 for p in peers]
    top = max(values) or 1
    parts = [f'<text x="{x0}" y="{y0}" class="h">{html.escape(title)}</text>']
    for i, (p, v) in enumerate(zip(peers, values)):
        y = y0 + 12 + i * (BAR_H + GAP)
        width = max(1, int(BAR_W * v / top))
        cls = "us" if p["peer"].startswith("outflow") else "peer"
        parts.append(f'<text x="{x0}" y="{y + BAR_H - 6}" class="l">{html.escape(p["peer"])}</text>')
        parts.append(f'<rect x="{x0 + LABEL_W}" y="{y}" width="{width}" height="{BAR_H}" class="{cls}"/>')
        parts.append(f'<text x="{x0 + LABEL_W + width + 6}" y="{y + BAR_H - 6}" class="v">{human(v, unit)}</text>')
    return parts


def chart(results: dict) -> str:
    peers = results["peers"]
    unit = results.get("unit", "rows/s")
    key = "rows_per_s" if unit == "rows/s" else "files_per_s"
    height_panel = 12 + len(peers) * (BAR_H + GAP)
    width = LABEL_W + BAR_W + 130
    with_memory = any(p.get("peak_rss_mib") for p in peers)
    height = 40 + (2 if with_memory else 1) * (height_panel + PANEL_GAP)
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" font-family="sans-serif" font-size="12">',
        "<style>.h{font-weight:bold}.us{fill:#1f6feb}.peer{fill:#9aa4ae}.l,.v{fill:#222}</style>",
        f'<text x="0" y="16" class="h" font-size="14">{html.escape(results["title"])}</text>',
    ]
    parts += panel(0, 44, f"throughput ({unit}, higher is better)", peers, key, unit)
    if with_memory:
        parts += panel(0, 44 + height_panel + PANEL_GAP, "peak memory (lower is better)", peers, "peak_rss_mib", "MiB")
    parts.append("</svg>")
    return "\n".join(parts) + "\n"


def main():
    for path in sorted(glob.glob(os.path.join(OUT, "*.json"))):
        with open(path) as f:
            results = json.load(f)
        svg = path[: -len(".json")] + ".svg"
        with open(svg, "w") as f:
            f.write(chart(results))
        print(f"wrote {os.path.relpath(svg, REPO)}")


if __name__ == "__main__":
    main()
