"""Icons from resources/icons, drawn in the palette's text colour so they follow light and dark.

Owns turning an SVG name into a QIcon. Icons draw with `currentColor`, replaced here by the
palette's window-text colour; semantic icons (approve, deny, warning) keep their own colours,
chosen to read on light and dark backgrounds alike. Resources are small files bundled with the
app and read once.
"""

from __future__ import annotations

from functools import lru_cache

from gui.qt import QApplication, QByteArray, QIcon, QPainter, QPalette, QPixmap, QSvgRenderer, Qt
from gui.resources import icon_path

SIZES = (16, 20, 24, 32, 48)


def _text_colour() -> str:
    app = QApplication.instance()
    if not isinstance(app, QApplication):  # no widgets (yet): a grey that reads on both
        return "#808080"
    return app.palette().color(QPalette.ColorRole.WindowText).name()


def icon(name: str) -> QIcon:
    """The named icon in the current palette's text colour; a null icon if the file is missing."""
    return _icon(name, _text_colour())


@lru_cache(maxsize=128)
def _icon(name: str, colour: str) -> QIcon:
    path = icon_path(name)
    try:
        svg = path.read_text(encoding="utf-8")
    except OSError:
        return QIcon()
    renderer = QSvgRenderer(QByteArray(svg.replace("currentColor", colour).encode("utf-8")))
    if not renderer.isValid():
        return QIcon()
    result = QIcon()
    for size in SIZES:
        pixmap = QPixmap(size, size)
        pixmap.fill(Qt.GlobalColor.transparent)
        painter = QPainter(pixmap)
        renderer.render(painter)
        painter.end()
        result.addPixmap(pixmap)
    return result


def clear_cache() -> None:
    """Forget drawn icons (after a palette change they are drawn again in the new colour)."""
    _icon.cache_clear()
