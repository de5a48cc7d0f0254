"""A tiny SVG drawing layer for the book's architecture diagrams.

Boxes, arrows and labels written as plain SVG elements (text stays text, so the files stay
editable and searchable). Output is deterministic: no dates, no random ids.
"""

from __future__ import annotations

import re
from xml.sax.saxutils import escape

# Okabe-Ito colours (colour-blind safe) and light tints of them for box fills.
OKABE_ITO = {
    "orange": "#E69F00",
    "sky": "#56B4E9",
    "green": "#009E73",
    "yellow": "#F0E442",
    "blue": "#0072B2",
    "vermillion": "#D55E00",
    "purple": "#CC79A7",
    "black": "#000000",
}


def tint(hex_colour: str, amount: float = 0.4) -> str:
    """Mix ``hex_colour`` with white: ``amount`` of the colour, the rest white."""
    r, g, b = (int(hex_colour[i : i + 2], 16) for i in (1, 3, 5))
    mix = [round(c * amount + 255 * (1 - amount)) for c in (r, g, b)]
    return "#" + "".join(f"{c:02X}" for c in mix)


# One fill and one outline per kind of layer, the same in every diagram.
KINDS = {
    "attention": ("orange", 0.45),
    "ffn": ("sky", 0.45),
    "norm": ("yellow", 0.45),
    "embedding": ("green", 0.35),
    "linear": ("purple", 0.4),
    "softmax": ("vermillion", 0.35),
    "rnn": ("blue", 0.3),
    "token": ("black", 0.08),
    "plain": ("black", 0.0),
}

INK = "#222222"
MUTED = "#666666"
FONT = "DejaVu Sans, Helvetica, Arial, sans-serif"


def kind_colours(kind: str) -> tuple[str, str]:
    """(fill, stroke) for a kind of layer."""
    name, amount = KINDS[kind]
    base = OKABE_ITO[name]
    fill = "#FFFFFF" if amount == 0 else tint(base, amount)
    stroke = "#555555" if name == "black" else base
    return fill, stroke


def _num(v: float) -> str:
    return f"{v:.1f}".rstrip("0").rstrip(".")


SCRIPT = re.compile(r"([_^])\{([^}]*)\}")


def text_width(s: str, size: float) -> float:
    """A conservative estimate of a label's width in px (DejaVu Sans is wide)."""
    small = sum(len(m.group(2)) for m in SCRIPT.finditer(s))
    plain = len(SCRIPT.sub("", s))
    return 0.62 * size * (plain + 0.75 * small)


def _markup(s: str, size: float) -> str:
    """Escape ``s`` and turn ``_{sub}`` and ``^{sup}`` into shifted, smaller tspans."""
    out, pos, shift = [], 0, 0.0
    small = _num(0.72 * size)
    for m in SCRIPT.finditer(s):
        if m.start() > pos:
            chunk = escape(s[pos : m.start()])
            out.append(f'<tspan dy="{_num(-shift)}">{chunk}</tspan>' if shift else chunk)
            shift = 0.0
        new = (0.3 if m.group(1) == "_" else -0.4) * size
        out.append(
            f'<tspan dy="{_num(new - shift)}" font-size="{small}">{escape(m.group(2))}</tspan>'
        )
        shift, pos = new, m.end()
    if pos < len(s):
        chunk = escape(s[pos:])
        out.append(f'<tspan dy="{_num(-shift)}">{chunk}</tspan>' if shift else chunk)
    return "".join(out)


class Figure:
    """An SVG canvas of ``width`` x ``height`` px with a title and a description."""

    def __init__(self, width: int, height: int, title: str, desc: str) -> None:
        self.width, self.height = width, height
        self.title, self.desc = title, desc
        self.body: list[str] = []
        self.markers: dict[str, str] = {}

    # -- primitives -------------------------------------------------------------------------
    def rect(self, x, y, w, h, fill="#FFFFFF", stroke=INK, sw=1.2, rx=5, dash=None, opacity=None):
        extra = f' stroke-dasharray="{dash}"' if dash else ""
        if opacity is not None:
            extra += f' fill-opacity="{opacity}"'
        self.body.append(
            f'<rect x="{_num(x)}" y="{_num(y)}" width="{_num(w)}" height="{_num(h)}" '
            f'rx="{_num(rx)}" fill="{fill}" stroke="{stroke}" stroke-width="{_num(sw)}"{extra}/>'
        )

    def circle(self, cx, cy, r, fill="#FFFFFF", stroke=INK, sw=1.2):
        self.body.append(
            f'<circle cx="{_num(cx)}" cy="{_num(cy)}" r="{_num(r)}" fill="{fill}" '
            f'stroke="{stroke}" stroke-width="{_num(sw)}"/>'
        )

    def text(self, x, y, s, size=13, anchor="middle", weight=None, colour=INK, italic=False):
        """A single line of text; ``y`` is the vertical centre of the line."""
        attrs = f'x="{_num(x)}" y="{_num(y + 0.35 * size)}" font-size="{_num(size)}"'
        if anchor != "start":
            attrs += f' text-anchor="{anchor}"'
        if weight:
            attrs += f' font-weight="{weight}"'
        if italic:
            attrs += ' font-style="italic"'
        if colour != INK:
            attrs += f' fill="{colour}"'
        self.body.append(f"<text {attrs}>{_markup(s, size)}</text>")

    def lines(self, x, y, rows, size=13, gap=1.25, **kw):
        """Several lines of text centred vertically on ``y``."""
        n = len(rows)
        for i, row in enumerate(rows):
            self.text(x, y + (i - (n - 1) / 2) * size * gap, row, size=size, **kw)

    def _marker(self, colour: str) -> str:
        if colour not in self.markers:
            mid = f"arrow{len(self.markers)}"
            self.markers[colour] = (
                f'<marker id="{mid}" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="8" '
                f'markerHeight="8" markerUnits="userSpaceOnUse" orient="auto">'
                f'<path d="M0,0 L10,5 L0,10 z" fill="{colour}"/></marker>'
            )
        return self.markers[colour].split('"')[1]

    def arrow(self, pts, colour=INK, sw=1.4, dash=None, head=True, halo=False):
        """A polyline through ``pts`` with an arrowhead at the last point."""
        d = "M" + " L".join(f"{_num(x)},{_num(y)}" for x, y in pts)
        if halo:  # a white underlay, so the line visibly passes over the ones it crosses
            self.body.append(
                f'<path d="{d}" fill="none" stroke="#FFFFFF" stroke-width="{_num(sw + 5)}"/>'
            )
        extra = f' stroke-dasharray="{dash}"' if dash else ""
        if head:
            extra += f' marker-end="url(#{self._marker(colour)})"'
        self.body.append(
            f'<path d="{d}" fill="none" stroke="{colour}" stroke-width="{_num(sw)}"'
            f' stroke-linejoin="round"{extra}/>'
        )

    def line(self, pts, colour=INK, sw=1.4, dash=None):
        self.arrow(pts, colour=colour, sw=sw, dash=dash, head=False)

    # -- composites ---------------------------------------------------------------------------
    def box(self, x, y, w, h, label, kind="plain", size=13, sub=None, bold=False, rx=6):
        """A rounded box of a layer kind with a centred label (``\\n`` splits lines)."""
        fill, stroke = kind_colours(kind)
        self.rect(x, y, w, h, fill=fill, stroke=stroke, sw=1.5, rx=rx)
        rows = label.split("\n")
        for row in rows:
            if text_width(row, size) > w - 6:
                raise ValueError(f"label {row!r} does not fit in a {w}px box")
        if sub:
            self.lines(
                x + w / 2, y + h / 2 - 0.45 * size, rows, size=size, weight="bold" if bold else None
            )
            self.text(x + w / 2, y + h / 2 + 0.55 * size + 2, sub, size=size - 2, colour=MUTED)
        else:
            self.lines(x + w / 2, y + h / 2, rows, size=size, weight="bold" if bold else None)

    def plus(self, cx, cy, r=9):
        """The ⊕ node of a residual connection or of an added encoding."""
        self.circle(cx, cy, r, fill="#FFFFFF", stroke=INK, sw=1.3)
        self.line([(cx - r + 3, cy), (cx + r - 3, cy)], sw=1.3)
        self.line([(cx, cy - r + 3), (cx, cy + r - 3)], sw=1.3)

    def legend(self, x, y, kinds, size=12, step=None):
        """Swatches for the layer kinds used, in a row from (x, y); ``step``: fixed spacing."""
        names = {
            "attention": "attention",
            "ffn": "feed-forward / MLP",
            "norm": "normalisation",
            "embedding": "embedding / position",
            "linear": "linear",
            "softmax": "softmax",
            "rnn": "recurrent state",
        }
        for kind in kinds:
            fill, stroke = kind_colours(kind)
            self.rect(x, y - 7, 14, 14, fill=fill, stroke=stroke, sw=1.3, rx=3)
            self.text(x + 19, y, names[kind], size=size, anchor="start", colour=MUTED)
            x += step or 19 + text_width(names[kind], size) * 0.92 + 18

    # -- output -------------------------------------------------------------------------------
    def svg(self) -> str:
        w, h = self.width, self.height
        head = (
            f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" '
            f'viewBox="0 0 {w} {h}" role="img" aria-labelledby="title desc" '
            f'font-family="{FONT}" fill="{INK}">\n'
            f'<title id="title">{escape(self.title)}</title>\n'
            f'<desc id="desc">{escape(self.desc)}</desc>\n'
        )
        defs = "<defs>" + "".join(self.markers.values()) + "</defs>\n"
        background = f'<rect width="{w}" height="{h}" fill="#FFFFFF"/>\n'
        return head + defs + background + "\n".join(self.body) + "\n</svg>\n"
