"""Labels beside the points of a matplotlib axes that cover neither points nor each other.

Each label tries positions around its point, nearest first (right-above, right-below,
left-above, left-below, above, below, then the same farther out with a thin leader line),
and takes the first whose text box stays inside the axes and clear of every point's
marker and of the labels already placed; with none clear, the one overlapping least.
Boxes are measured in display pixels by the figure's renderer, once its layout is final.
"""

from __future__ import annotations

from dataclasses import dataclass

from matplotlib.text import Text

_DIRECTIONS = ((1, 1, "left", "bottom"), (1, -1, "left", "top"), (-1, 1, "right", "bottom"),
               (-1, -1, "right", "top"), (0, 1, "center", "bottom"), (0, -1, "center", "top"))
_DISTANCES_PT = (5, 14, 26, 40)
_PAD_PX = 2.0


@dataclass
class Box:
    x0: float
    y0: float
    x1: float
    y1: float

    def overlap(self, other: Box) -> float:
        w = min(self.x1, other.x1) - max(self.x0, other.x0)
        h = min(self.y1, other.y1) - max(self.y0, other.y0)
        return w * h if w > 0 and h > 0 else 0.0

    def inside(self, other: Box) -> bool:
        return self.x0 >= other.x0 and self.y0 >= other.y0 and self.x1 <= other.x1 and self.y1 <= other.y1


def _box(extent, pad: float = 0.0) -> Box:
    return Box(extent.x0 - pad, extent.y0 - pad, extent.x1 + pad, extent.y1 + pad)


def marker_boxes(ax, xs, ys, radius_px: float) -> list[Box]:
    """The display-pixel square each point's marker (of `radius_px`) covers."""
    out = []
    for x, y in zip(xs, ys):
        px, py = ax.transData.transform((x, y))
        out.append(Box(px - radius_px, py - radius_px, px + radius_px, py + radius_px))
    return out


def place_labels(ax, targets: list[tuple[float, float, str]], obstacles: list[Box],
                 fontsize: float = 7.5, color: str = "#333333") -> list[tuple[str, Box]]:
    """Annotate each (x, y, text) of `targets`; return each label's text and pixel box.

    The figure must have been drawn once (its layout final) so positions are measured
    where they will be saved.
    """
    fig = ax.figure
    renderer = fig.canvas.get_renderer()
    frame = _box(ax.get_window_extent(renderer))
    placed: list[tuple[str, Box]] = []
    for x, y, text in targets:
        best = None
        for distance in _DISTANCES_PT:
            for sx, sy, ha, va in _DIRECTIONS:
                far = distance > _DISTANCES_PT[0]   # a thin line back to its point
                annotation = ax.annotate(
                    text, (x, y), xytext=(sx * distance, sy * distance), textcoords="offset points",
                    ha=ha, va=va, fontsize=fontsize, color=color, zorder=7,
                    arrowprops={"arrowstyle": "-", "color": "#888888", "linewidth": 0.6, "shrinkA": 0,
                                "shrinkB": 4} if far else None)
                annotation.update_positions(renderer)
                box = _box(Text.get_window_extent(annotation, renderer), _PAD_PX)   # the text, not its leader
                cost = (0.0 if box.inside(frame) else 1e9) + sum(box.overlap(o) for o in obstacles) \
                    + sum(box.overlap(b) for _, b in placed)
                if best is None or cost < best[0]:
                    if best is not None:
                        best[1].remove()
                    best = (cost, annotation, box)
                else:
                    annotation.remove()
                if cost == 0.0:
                    break
            if best[0] == 0.0:
                break
        placed.append((text, best[2]))
    return placed
