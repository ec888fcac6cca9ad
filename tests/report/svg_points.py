"""Reads a plot's data back from its SVG, as any SVG reader sees the file: each panel's series markers, mapped
to data coordinates through the panel's own tick marks.

What this relies on (matplotlib 3.11, ``matplotlib/backends/backend_svg.py``):

* ``RendererSVG.open_group`` writes ``<g id="...">`` per artist: ``axes_<n>`` per panel, ``xtick_<n>`` /
  ``ytick_<n>`` per tick, and the artist's gid when it has one; ``sparsectx.report.plots`` gives every series
  segment the gid ``plots.series_gid`` (``series-<panel>-<label as UTF-8 hex>-<segment>``).
* ``RendererSVG.draw_markers`` writes one ``<use x= y=>`` per marker, at its display position (y pointing down),
  inside the group of its line; a tick mark is such a marker, inside its tick's group.
* ``RendererSVG._draw_text_as_path`` (``svg.fonttype: path``, the default) writes each text as glyph paths
  preceded by a comment holding the text: a tick label is read from that comment.

The map from data to display is fitted on the first and last tick and checked on every other tick, so a
misread axis fails here instead of shifting every point.
"""

from __future__ import annotations

import math
import xml.etree.ElementTree as ET
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

SVG = "{http://www.w3.org/2000/svg}"
SERIES_PREFIX = "series-"
TICK_TOLERANCE = 0.05
"""Display units (points) a middle tick may sit off the fitted map: SVG coordinates carry six decimals."""


@dataclass(frozen=True)
class Panel:
    """One axes of a plot: its series' points in data coordinates, in drawing order."""

    series: dict[str, list[tuple[float, float]]]


def parse(path: Path) -> ET.Element:
    """Returns the root of the SVG at ``path``, comments kept (tick labels), after checking it is an SVG."""
    parser = ET.XMLParser(target=ET.TreeBuilder(insert_comments=True))
    root = ET.parse(path, parser=parser).getroot()
    assert root.tag == f"{SVG}svg", f"{path}: root element {root.tag} is not an SVG"
    return root


def _tick_label(tick: ET.Element) -> float:
    (comment,) = [e for e in tick.iter() if e.tag is ET.Comment]
    return float(comment.text.strip().rstrip("%").replace("\u2212", "-"))


def _ticks(axes: ET.Element, kind: str) -> list[tuple[float, float]]:
    """Returns (value, display position) of every labelled ``kind`` ("x" or "y") tick of ``axes``."""
    found = []
    for group in axes.iter(f"{SVG}g"):
        if group.get("id", "").startswith(f"{kind}tick_"):
            mark = next(group.iter(f"{SVG}use"))
            found.append((_tick_label(group), float(mark.get(kind))))
    return found


def _inverse(ticks: list[tuple[float, float]], log: bool) -> Callable[[float], float]:
    """Returns display -> data for one axis, fitted on its outer ticks and checked on the others."""
    scale = (lambda v: math.log(v)) if log else (lambda v: v)
    (v0, p0), (v1, p1) = ticks[0], ticks[-1]
    slope = (p1 - p0) / (scale(v1) - scale(v0))
    for value, position in ticks:
        assert abs(p0 + slope * (scale(value) - scale(v0)) - position) < TICK_TOLERANCE, (value, position)
    unscale = (lambda s: math.exp(s)) if log else (lambda s: s)
    return lambda position: unscale(scale(v0) + (position - p0) / slope)


def panels(path: Path, log_x: bool = False) -> list[Panel]:
    """Returns every panel of the SVG at ``path`` with its series' markers in data coordinates (``log_x``: the
    x axes are logarithmic)."""
    found = []
    for axes in parse(path).iter(f"{SVG}g"):
        if not axes.get("id", "").startswith("axes_"):
            continue
        to_x, to_y = _inverse(_ticks(axes, "x"), log_x), _inverse(_ticks(axes, "y"), False)
        series: dict[str, list[tuple[float, float]]] = {}
        for group in axes.iter(f"{SVG}g"):
            gid = group.get("id", "")
            if gid.startswith(SERIES_PREFIX):
                label = bytes.fromhex(gid.split("-")[2]).decode()
                marks = [(to_x(float(u.get("x"))), to_y(float(u.get("y")))) for u in group.iter(f"{SVG}use")]
                series.setdefault(label, []).extend(marks)
        found.append(Panel(series))
    return found
