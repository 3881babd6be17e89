"""The lineage tree: tasks grouped under the folder they grew from, children under their parents.

`panel` (the tree with its filter), `model` (the nodes and the thin Qt model over them) and
`data` (the reads behind the rows, no Qt).
"""

from gui.lineage.panel import LineagePanel

__all__ = ["LineagePanel"]
