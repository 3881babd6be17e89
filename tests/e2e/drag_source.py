"""A separate X client that drags local folders onto whatever is under the pointer, the way a
file manager does: pressing the mouse in its window starts a real drag (XDND) whose data carries
the folders as file URLs. The end-to-end test moves the pointer with xdotool.

    python -m tests.e2e.drag_source X Y FOLDER... prints "ready" once its window is shown.
"""

from __future__ import annotations

import sys
from pathlib import Path

from PySide6.QtCore import QMimeData, Qt, QTimer, QUrl
from PySide6.QtGui import QDrag
from PySide6.QtWidgets import QApplication, QLabel


class DragSource(QLabel):
    def __init__(self, folders: list[Path]):
        super().__init__("\n".join(f.name for f in folders))
        self.folders = folders
        self.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.setWindowTitle("drag source")
        self.setStyleSheet("background: #dde; border: 2px dashed #557; font-size: 14px;")

    def mousePressEvent(self, event) -> None:
        mime = QMimeData()
        mime.setUrls([QUrl.fromLocalFile(str(f)) for f in self.folders])
        drag = QDrag(self)
        drag.setMimeData(mime)
        result = drag.exec(Qt.DropAction.CopyAction)
        print(f"dropped {result.name}", flush=True)
        QTimer.singleShot(200, QApplication.quit)


def main(argv: list[str]) -> int:
    x, y, *folders = argv
    app = QApplication([sys.argv[0]])
    source = DragSource([Path(f) for f in folders])
    source.setGeometry(int(x), int(y), 220, 120)
    source.show()
    QTimer.singleShot(300, lambda: print("ready", flush=True))
    QTimer.singleShot(120_000, app.quit)  # never outlive a failed test
    return app.exec()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
