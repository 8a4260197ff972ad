"""What a reader of a drawn figure would find wrong with its layout, for the figure tests: a
legend over the data area of some axes (its own or a neighbour's), and drawn text or artists that
reach outside the figure (cut when it is shown or saved without a tight box)."""

from __future__ import annotations

from matplotlib.backends.backend_agg import FigureCanvasAgg

SLACK = 1.0  # pixels: rounding of extents at the figure's edge


def layout_problems(fig) -> list[str]:
    """Each legend whose box overlaps the data area (the axes box) of any axes, and anything drawn
    outside the figure, one line each (empty: none)."""
    canvas = fig.canvas if hasattr(fig.canvas, "get_renderer") else FigureCanvasAgg(fig)
    canvas.draw()
    renderer = canvas.get_renderer()
    problems = []
    legends = [(f"axes {i}", ax.get_legend()) for i, ax in enumerate(fig.axes) if ax.get_legend()]
    legends += [("figure", lg) for lg in fig.legends]
    for who, lg in legends:
        box = lg.get_window_extent(renderer)
        for j, ax in enumerate(fig.axes):
            if box.overlaps(ax.bbox):
                problems.append(f"the legend of {who} ({', '.join(t.get_text() for t in lg.get_texts()[:2])}, …) "
                                f"lies over the data area of axes {j}")
    drawn, whole = fig.get_tightbbox(renderer), fig.bbox_inches
    slack = SLACK / fig.dpi
    if drawn.x0 < whole.x0 - slack or drawn.y0 < whole.y0 - slack or drawn.x1 > whole.x1 + slack or drawn.y1 > whole.y1 + slack:
        problems.append(f"drawn outside the figure: {drawn.bounds} against {whole.bounds} (inches)")
    return problems
