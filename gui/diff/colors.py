"""Diff colours derived from the widget palette, so a light or dark theme needs no settings.

Owns the backgrounds of added/removed/emphasised lines, hunk headers and notes (blends of the
palette's base colour with green, red and its highlight colour) and the syntax colours (one set for
light palettes, one for dark ones).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from gui.diff.decorate import CATEGORIES
from gui.qt import QColor, QFont, QPalette, QTextCharFormat

GREEN = QColor(46, 160, 67)
RED = QColor(218, 54, 51)

_LIGHT_SYNTAX = {
    "keyword": "#0033b3",
    "string": "#067d17",
    "comment": "#8c8c8c",
    "number": "#1750eb",
    "function": "#00627a",
    "type": "#000080",
    "builtin": "#0033b3",
    "decorator": "#9e880d",
    "constant": "#871094",
    "attribute": "#174ad4",
}
_DARK_SYNTAX = {
    "keyword": "#cc7832",
    "string": "#6a8759",
    "comment": "#8a8a8a",
    "number": "#6897bb",
    "function": "#ffc66d",
    "type": "#a9b7c6",
    "builtin": "#8888c6",
    "decorator": "#bbb529",
    "constant": "#9876aa",
    "attribute": "#bababa",
}


def blend(base: QColor, tint: QColor, amount: float) -> QColor:
    return QColor(
        round(base.red() + (tint.red() - base.red()) * amount),
        round(base.green() + (tint.green() - base.green()) * amount),
        round(base.blue() + (tint.blue() - base.blue()) * amount),
    )


def is_dark(palette: QPalette) -> bool:
    return palette.color(QPalette.ColorRole.Base).lightnessF() < 0.5


@dataclass
class DiffColors:
    dark: bool
    text: QColor
    added_bg: QColor
    removed_bg: QColor
    added_emph: QColor
    removed_emph: QColor
    hunk_bg: QColor
    hunk_fg: QColor
    note_bg: QColor
    note_fg: QColor
    filler_bg: QColor
    gutter_bg: QColor
    gutter_fg: QColor
    banner_bg: QColor
    syntax: dict[str, QColor] = field(default_factory=dict)


def colors_for(palette: QPalette) -> DiffColors:
    base = palette.color(QPalette.ColorRole.Base)
    text = palette.color(QPalette.ColorRole.Text)
    window = palette.color(QPalette.ColorRole.Window)
    highlight = palette.color(QPalette.ColorRole.Highlight)
    dark = is_dark(palette)
    soft, strong = (0.22, 0.45) if dark else (0.16, 0.36)
    syntax = _DARK_SYNTAX if dark else _LIGHT_SYNTAX
    return DiffColors(
        dark=dark,
        text=text,
        added_bg=blend(base, GREEN, soft),
        removed_bg=blend(base, RED, soft),
        added_emph=blend(base, GREEN, strong),
        removed_emph=blend(base, RED, strong),
        hunk_bg=blend(base, highlight, 0.12),
        hunk_fg=blend(text, highlight, 0.5),
        note_bg=blend(base, window, 0.6),
        note_fg=blend(text, base, 0.3),
        filler_bg=blend(base, text, 0.05),
        gutter_bg=blend(base, window, 0.7),
        gutter_fg=blend(text, base, 0.45),
        banner_bg=blend(base, QColor(230, 170, 30), 0.3),
        syntax={name: QColor(value) for name, value in syntax.items()},
    )


class FormatCache:
    """The character formats for (category, emphasis) pairs, made once per palette."""

    def __init__(self, colors: DiffColors):
        self.colors = colors
        self._formats: dict[tuple[str, str], QTextCharFormat] = {}
        self.hunk = QTextCharFormat()
        self.hunk.setForeground(colors.hunk_fg)
        self.note = QTextCharFormat()
        self.note.setForeground(colors.note_fg)
        self.note.setFontItalic(True)
        self.marker = QTextCharFormat()
        self.marker.setForeground(colors.gutter_fg)
        for category in ["", *CATEGORIES]:
            for emph in ("", "+", "-"):
                self._formats[(category, emph)] = self._make(category, emph)

    def _make(self, category: str, emph: str) -> QTextCharFormat:
        fmt = QTextCharFormat()
        colour = self.colors.syntax.get(category)
        if colour is not None:
            fmt.setForeground(colour)
        if category == "comment":
            fmt.setFontItalic(True)
        elif category == "keyword":
            fmt.setFontWeight(QFont.Weight.DemiBold)
        if emph == "+":
            fmt.setBackground(self.colors.added_emph)
        elif emph == "-":
            fmt.setBackground(self.colors.removed_emph)
        return fmt

    def get(self, category: str, emph: str) -> QTextCharFormat:
        fmt = self._formats.get((category, emph))
        if fmt is None:
            fmt = self._formats[(category, emph)] = self._make(category, emph)
        return fmt
