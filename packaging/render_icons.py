"""Render the app icon as the hicolor theme's PNG sizes, plus the scalable SVG itself.

    python packaging/render_icons.py SVG ICONS_DIR [--name io.cairn.Cairn]

writes ICONS_DIR/hicolor/<n>x<n>/apps/<name>.png for each size and
ICONS_DIR/hicolor/scalable/apps/<name>.svg. Qt renders them (offscreen), so no other tool is needed.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from pathlib import Path

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")  # renders without a display

from PySide6.QtCore import Qt
from PySide6.QtGui import QGuiApplication, QImage, QPainter
from PySide6.QtSvg import QSvgRenderer

SIZES = (16, 24, 32, 48, 64, 128, 256, 512)
APP_ID = "io.cairn.Cairn"


def render(svg: Path, icons_dir: Path, name: str = APP_ID) -> list[Path]:
    renderer = QSvgRenderer(str(svg))
    if not renderer.isValid():
        raise SystemExit(f"render_icons: {svg} is not an SVG Qt can draw")
    written = []
    for size in SIZES:
        image = QImage(size, size, QImage.Format.Format_ARGB32_Premultiplied)
        image.fill(Qt.GlobalColor.transparent)
        painter = QPainter(image)
        painter.setRenderHint(QPainter.RenderHint.Antialiasing)
        painter.setRenderHint(QPainter.RenderHint.SmoothPixmapTransform)
        renderer.render(painter)
        painter.end()
        target = icons_dir / "hicolor" / f"{size}x{size}" / "apps" / f"{name}.png"
        target.parent.mkdir(parents=True, exist_ok=True)
        if not image.save(str(target), "PNG"):
            raise SystemExit(f"render_icons: could not write {target}")
        written.append(target)
    scalable = icons_dir / "hicolor" / "scalable" / "apps" / f"{name}.svg"
    scalable.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(svg, scalable)
    written.append(scalable)
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Render the app icon for the hicolor theme.")
    parser.add_argument("svg", type=Path)
    parser.add_argument("icons_dir", type=Path)
    parser.add_argument("--name", default=APP_ID)
    args = parser.parse_args(argv)
    app = QGuiApplication.instance() or QGuiApplication([sys.argv[0]])  # noqa: F841 (QPainter needs one)
    for path in render(args.svg, args.icons_dir, args.name):
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
