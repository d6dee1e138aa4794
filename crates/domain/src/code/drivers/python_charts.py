# Chart extraction of agent-sandbox-server Python contexts (embedded in the binary).
#
# Describes a drawn matplotlib figure in the code-interpreter protocol's chart
# schema, so an agent can read the numbers it plotted: one axes gives a
# `line`, `scatter`, `bar`, `pie` or `box_and_whisker` chart (or `unknown`
# with no elements when its artists are of another kind), several give a
# `superchart` of them. Every value is a JSON number or string. Compiled by
# the display module the first time a figure is shown; the figure has been
# drawn by then, so tick labels are set.
import math
import re

_UNIT = re.compile(r"[\(\[]([^\(\)\[\]]+)[\)\]]")


def _round(value):
    """A float with arithmetic noise removed (12 significant digits)."""
    value = float(value)
    if not math.isfinite(value):
        return None
    return float("%.12g" % value)


def _point(value):
    import datetime

    if isinstance(value, (datetime.date, datetime.datetime)):
        return value.isoformat()
    kind = getattr(getattr(value, "dtype", None), "kind", None)
    if kind == "M":
        return str(value.astype("datetime64[s]"))
    if isinstance(value, str):
        return value
    try:
        return _round(value)
    except (TypeError, ValueError):
        return str(value)


def _label(text):
    return text if text else None


def _unit(label):
    if not label:
        return None
    found = _UNIT.findall(label)
    return found[-1].strip() if found else None


def _converter(axis):
    getter = getattr(axis, "get_converter", None)
    return getter() if callable(getter) else getattr(axis, "converter", None)


def _scale(ax, which):
    axis = ax.xaxis if which == "x" else ax.yaxis
    module = type(_converter(axis)).__module__
    if module == "matplotlib.dates":
        return "datetime"
    if module == "matplotlib.category":
        return "categorical"
    return ax.get_xscale() if which == "x" else ax.get_yscale()


def _ticks(ax, which):
    axis = ax.xaxis if which == "x" else ax.yaxis
    locations = list(axis.get_ticklocs())
    labels = [t.get_text() for t in axis.get_ticklabels()]
    if type(_converter(axis)).__module__ == "matplotlib.dates":
        from matplotlib.dates import num2date

        return [num2date(t).isoformat() for t in locations], labels
    return [_round(t) for t in locations], labels


def _axes_2d(ax, kind, swap=False):
    x_label, y_label = _label(ax.get_xlabel()), _label(ax.get_ylabel())
    if swap:
        x_label, y_label = y_label, x_label
    return {
        "type": kind,
        "title": _label(ax.get_title()),
        "x_label": x_label,
        "y_label": y_label,
        "x_unit": _unit(x_label),
        "y_unit": _unit(y_label),
        "elements": [],
    }


def _points(ax, kind, elements):
    chart = _axes_2d(ax, kind)
    for which in ("x", "y"):
        ticks, labels = _ticks(ax, which)
        chart[which + "_ticks"] = ticks
        chart[which + "_tick_labels"] = labels
        chart[which + "_scale"] = _scale(ax, which)
    chart["elements"] = elements
    return chart


def _is_guide(line):
    """A two-point horizontal or vertical line (axhline, axvline)."""
    xs, ys = line.get_xdata(), line.get_ydata()
    return len(xs) == 2 and len(ys) == 2 and (xs[0] == xs[1] or ys[0] == ys[1])


def _values(data):
    """Coordinates as JSON values: numbers at once when they are numbers (NaN and infinities as null)."""
    import numpy

    array = numpy.asarray(data)
    if array.dtype.kind not in "iuf":
        return [_point(v) for v in data]
    values = array.astype(float).tolist()
    if numpy.isfinite(array).all():
        return values
    return [v if math.isfinite(v) else None for v in values]


def _series_chart(ax, kind, series, unnamed):
    """A line or scatter chart; series are (label, xs, ys)."""
    elements = []
    for index, (label, xs, ys) in enumerate(series):
        if label.startswith("_"):
            label = "%s %d" % (unnamed, index)
        elements.append({"label": label, "points": [list(p) for p in zip(_values(xs), _values(ys))]})
    return _points(ax, kind, elements)


def _category(axis, position):
    """The tick label at a bar's position, else the position itself."""
    for location, text in zip(axis.get_ticklocs(), axis.get_ticklabels()):
        if abs(location - position) < 1e-9 and text.get_text():
            return text.get_text()
    return "%g" % position


def _bar_chart(ax, containers):
    horizontal = all(getattr(c, "orientation", None) == "horizontal" for c in containers)
    chart = _axes_2d(ax, "bar", swap=horizontal)
    for index, container in enumerate(containers):
        group = container.get_label() or ""
        if group.startswith("_"):
            group = "Group %d" % index
        for rect in container.patches:
            if horizontal:
                label = _category(ax.yaxis, rect.get_y() + rect.get_height() / 2)
                value = rect.get_width()
            else:
                label = _category(ax.xaxis, rect.get_x() + rect.get_width() / 2)
                value = rect.get_height()
            chart["elements"].append({"label": label, "group": group, "value": _round(value)})
    return chart


def _pie_chart(ax, wedges):
    elements = []
    for wedge in wedges:
        elements.append({"label": wedge.get_label(), "angle": abs(_round(wedge.theta2 - wedge.theta1)), "radius": _round(wedge.r)})
    return {"type": "pie", "title": _label(ax.get_title()), "elements": elements}


def _box_chart(ax, boxes, lines):
    extents = []
    for patch in boxes:
        vertices = patch.get_path().vertices
        xs, ys = vertices[:, 0], vertices[:, 1]
        extents.append((_round(xs.min()), _round(xs.max()), _round(ys.min()), _round(ys.max())))
    widths = set(round(e[1] - e[0], 9) for e in extents)
    heights = set(round(e[3] - e[2], 9) for e in extents)
    vertical = not (len(heights) == 1 and len(widths) != 1)
    chart = _axes_2d(ax, "box_and_whisker", swap=not vertical)
    category_axis = ax.xaxis if vertical else ax.yaxis
    for lo_c, hi_c, lo_v, hi_v in [(e[0], e[1], e[2], e[3]) if vertical else (e[2], e[3], e[0], e[1]) for e in extents]:
        box = {
            "label": _category(category_axis, (lo_c + hi_c) / 2),
            "min": lo_v,
            "first_quartile": lo_v,
            "median": None,
            "third_quartile": hi_v,
            "max": hi_v,
            "outliers": [],
        }
        for line in lines:
            cs, vs = (line.get_xdata(), line.get_ydata()) if vertical else (line.get_ydata(), line.get_xdata())
            cs = [_round(c) for c in cs]
            vs = [_round(v) for v in vs]
            if not cs or not all(lo_c - 1e-9 <= c <= hi_c + 1e-9 for c in cs):
                continue
            if line.get_linestyle() in ("None", "", " ") and line.get_marker() not in (None, "None", ""):
                box["outliers"] = sorted(vs)
            elif len(vs) == 2 and vs[0] == vs[1] and lo_v <= vs[0] <= hi_v and cs[0] != cs[1]:
                box["median"] = vs[0]
            elif len(vs) == 2 and cs[0] == cs[1]:
                low, high = min(vs), max(vs)
                if high == lo_v:
                    box["min"] = low
                elif low == hi_v:
                    box["max"] = high
        if box["median"] is None:
            box["median"] = (lo_v + hi_v) / 2
        chart["elements"].append(box)
    return chart


def axes_chart(ax):
    """The chart of one axes."""
    from matplotlib.collections import PathCollection
    from matplotlib.container import BarContainer
    from matplotlib.lines import Line2D
    from matplotlib.patches import PathPatch, Rectangle, Wedge
    from matplotlib.text import Text

    artists = [a for a in getattr(ax, "_children", ax.get_children()) if not isinstance(a, Text)]
    lines = [a for a in artists if isinstance(a, Line2D)]
    data_lines = [line for line in lines if not _is_guide(line)] or lines
    others = [a for a in artists if not isinstance(a, Line2D)]
    if others and all(isinstance(a, PathPatch) for a in others) and lines:
        return _box_chart(ax, others, lines)
    if not others and data_lines:
        series = [(line.get_label(), line.get_xdata(), line.get_ydata()) for line in data_lines]
        return _series_chart(ax, "line", series, "Line")
    if others and all(isinstance(a, PathCollection) for a in others):
        series = [(c.get_label(), c.get_offsets()[:, 0], c.get_offsets()[:, 1]) for c in others]
        return _series_chart(ax, "scatter", series, "Series")
    if others and all(isinstance(a, Wedge) for a in others):
        return _pie_chart(ax, others)
    bars = [c for c in ax.containers if isinstance(c, BarContainer)]
    if bars and all(isinstance(a, Rectangle) for a in others):
        return _bar_chart(ax, bars)
    return {"type": "unknown", "title": _label(ax.get_title()), "elements": []}


def figure_chart(fig):
    """The chart of a drawn figure, or None for a figure without data."""
    axes = [ax for ax in fig.get_axes() if ax.get_visible()]
    if not axes or not any(ax.has_data() for ax in axes):
        return None
    if len(axes) == 1:
        return axes_chart(axes[0])
    getter = getattr(fig, "get_suptitle", None)
    title = getter() if callable(getter) else (fig._suptitle.get_text() if getattr(fig, "_suptitle", None) else "")
    return {"type": "superchart", "title": _label(title), "elements": [axes_chart(ax) for ax in axes]}
