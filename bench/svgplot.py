"""A dependency-free SVG line chart (the README's cost curve)."""

from __future__ import annotations

from html import escape

COLORS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b")


def line_chart(series: dict[str, list[tuple[float, float]]], x_label: str, y_label: str, title: str,
               width: int = 640, height: int = 360) -> str:
    """One polyline per series, linear axes from 0, with ticks and a legend."""
    left, right, top, bottom = 60, 150, 40, 50
    points = [p for values in series.values() for p in values]
    x_max = max((x for x, _ in points), default=1) or 1
    y_max = (max((y for _, y in points), default=1) or 1) * 1.1
    plot_w, plot_h = width - left - right, height - top - bottom

    def sx(x: float) -> float:
        return left + plot_w * x / x_max

    def sy(y: float) -> float:
        return top + plot_h * (1 - y / y_max)

    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" font-family="sans-serif" '
             f'font-size="12"><rect width="100%" height="100%" fill="white"/>',
             f'<text x="{width / 2}" y="20" text-anchor="middle" font-size="14">{escape(title)}</text>',
             f'<line x1="{left}" y1="{top + plot_h}" x2="{left + plot_w}" y2="{top + plot_h}" stroke="black"/>',
             f'<line x1="{left}" y1="{top}" x2="{left}" y2="{top + plot_h}" stroke="black"/>',
             f'<text x="{left + plot_w / 2}" y="{height - 10}" text-anchor="middle">{escape(x_label)}</text>',
             f'<text x="15" y="{top + plot_h / 2}" text-anchor="middle" '
             f'transform="rotate(-90 15 {top + plot_h / 2})">{escape(y_label)}</text>']
    for i in range(6):
        y = y_max * i / 5
        parts.append(f'<text x="{left - 6}" y="{sy(y) + 4}" text-anchor="end">{y:.0f}</text>')
        parts.append(f'<line x1="{left}" y1="{sy(y)}" x2="{left + plot_w}" y2="{sy(y)}" stroke="#ddd"/>')
    for x in sorted({x for x, _ in points}):
        parts.append(f'<text x="{sx(x)}" y="{top + plot_h + 16}" text-anchor="middle">{x:g}</text>')
    for index, (name, values) in enumerate(series.items()):
        color = COLORS[index % len(COLORS)]
        coords = " ".join(f"{sx(x):.1f},{sy(y):.1f}" for x, y in sorted(values))
        parts.append(f'<polyline fill="none" stroke="{color}" stroke-width="2" points="{coords}"/>')
        for x, y in values:
            parts.append(f'<circle cx="{sx(x):.1f}" cy="{sy(y):.1f}" r="3" fill="{color}"/>')
        ly = top + 10 + 18 * index
        parts.append(f'<line x1="{left + plot_w + 15}" y1="{ly}" x2="{left + plot_w + 35}" y2="{ly}" '
                     f'stroke="{color}" stroke-width="2"/>')
        parts.append(f'<text x="{left + plot_w + 40}" y="{ly + 4}">{escape(name)}</text>')
    parts.append("</svg>")
    return "\n".join(parts)
