"""Icons from resources/icons, drawn in the palette's colours so they follow light and dark, and the
desktop's colour scheme followed while the app runs.

Owns turning an SVG name into a QIcon and keeping drawn icons in step with the palette. Icons
draw with `currentColor`, replaced here per state: the window-text colour when enabled (and when
hovered or pressed), a colour half-way to the window's background when disabled, so a disabled
action reads as disabled in light and dark alike (Qt's own disabled rendering of a white icon
stays nearly white), and the highlighted-text colour in a selected row. Semantic icons (approve,
deny, warning) keep their own colours, chosen to read on light and dark backgrounds alike, and
fade when disabled.
Resources are small files bundled with the app and read once.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache

from gui.qt import (
    QApplication,
    QByteArray,
    QColor,
    QIcon,
    QPainter,
    QPalette,
    QPixmap,
    QSvgRenderer,
    Qt,
)
from gui.resources import icon_path

SIZES = (16, 20, 24, 32, 48)
# How far a disabled icon's colour moves from the text colour towards the background.
DISABLED_TOWARDS_BACKGROUND = 0.55
SEMANTIC_DISABLED_OPACITY = 0.4


@dataclass(frozen=True)
class IconColours:
    """The colours one palette gives an icon, as #rrggbb: per QIcon mode."""

    normal: str
    disabled: str
    selected: str


def _mix(a: QColor, b: QColor, towards_b: float) -> QColor:
    return QColor(
        round(a.red() + (b.red() - a.red()) * towards_b),
        round(a.green() + (b.green() - a.green()) * towards_b),
        round(a.blue() + (b.blue() - a.blue()) * towards_b),
    )


def colours_of(palette: QPalette) -> IconColours:
    text = palette.color(QPalette.ColorGroup.Active, QPalette.ColorRole.WindowText)
    window = palette.color(QPalette.ColorGroup.Active, QPalette.ColorRole.Window)
    selected = palette.color(QPalette.ColorGroup.Active, QPalette.ColorRole.HighlightedText)
    return IconColours(
        text.name(), _mix(text, window, DISABLED_TOWARDS_BACKGROUND).name(), selected.name()
    )


def _colours() -> IconColours:
    app = QApplication.instance()
    if not isinstance(app, QApplication):  # no widgets (yet): greys that read on both
        return IconColours("#808080", "#b0b0b0", "#ffffff")
    return colours_of(app.palette())


def icon(name: str) -> QIcon:
    """The named icon in the current palette's colours (enabled, disabled, selected); a null
    icon if the file is missing."""
    return _icon(name, _colours())


def _render(renderer: QSvgRenderer, size: int, opacity: float = 1.0) -> QPixmap:
    pixmap = QPixmap(size, size)
    pixmap.fill(Qt.GlobalColor.transparent)
    painter = QPainter(pixmap)
    painter.setOpacity(opacity)
    renderer.render(painter)
    painter.end()
    return pixmap


@lru_cache(maxsize=256)
def _icon(name: str, colours: IconColours) -> QIcon:
    path = icon_path(name)
    try:
        svg = path.read_text(encoding="utf-8")
    except OSError:
        return QIcon()
    # An icon in colours of its own (approve, deny) fades when disabled instead.
    faded = SEMANTIC_DISABLED_OPACITY if "currentColor" not in svg else 1.0
    result = QIcon()
    for mode, colour in (
        (QIcon.Mode.Normal, colours.normal),
        (QIcon.Mode.Active, colours.normal),
        (QIcon.Mode.Disabled, colours.disabled),
        (QIcon.Mode.Selected, colours.selected),
    ):
        renderer = QSvgRenderer(QByteArray(svg.replace("currentColor", colour).encode("utf-8")))
        if not renderer.isValid():
            return QIcon()
        opacity = faded if mode == QIcon.Mode.Disabled else 1.0
        for size in SIZES:
            result.addPixmap(_render(renderer, size, opacity), mode)
    return result


def clear_cache() -> None:
    """Forget drawn icons (after a palette change they are drawn again in the new colours)."""
    _icon.cache_clear()


def follow_colour_scheme(app: QApplication, on_change: Callable[[], None] | None = None) -> None:
    """Follow the desktop's light or dark scheme while the app runs: when it changes, Qt gives
    the application the scheme's palette (and every widget a palette-change event, on which the
    window draws its icons again); here the drawn icons are forgotten, a palette the app set by
    hand is replaced by the style's for the new scheme, and `on_change` runs."""

    def changed(_scheme: object = None) -> None:
        clear_cache()
        if app.testAttribute(Qt.ApplicationAttribute.AA_SetPalette):
            style = app.style()
            if style is not None:
                app.setPalette(style.standardPalette())
        if on_change is not None:
            on_change()

    hints = app.styleHints()
    if hints is not None:
        hints.colorSchemeChanged.connect(changed)
