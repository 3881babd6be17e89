"""Cairn's desktop GUI: PySide6 widgets over the domain in `core`.

Qt is imported through `gui.qt` only; core/ never imports anything from here.
"""
