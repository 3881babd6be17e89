"""The selected task: its facts, its run's output (live while the run goes on) and its actions.

`view` (the widget and its actions), `output_view` (a run's output drawn as blocks), `actions`
(which action is possible and why not, no Qt), `output` (engines' output protocols cut into blocks,
no Qt), `follow` (one observing job per run in flight), `cost` (tokens and cost of the task's runs
and its lineage) and `data` (the reads, no Qt).
"""

from gui.task_view.cost import TaskViewWithCost as TaskView
from gui.task_view.view import EMPTY_STATE_TEXT, output_placeholder

__all__ = ["EMPTY_STATE_TEXT", "TaskView", "output_placeholder"]
