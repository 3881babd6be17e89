"""The selected task: its facts, its run's output (live while the run goes on) and its actions.

`view` (the widget and its actions), `output_view` (a run's output drawn as blocks), `actions`
(which action is possible and why not, no Qt), `output` (engines' output protocols cut into blocks,
no Qt), `follow` (one observing job per run in flight) and `data` (the reads, no Qt).
"""

from gui.task_view.view import EMPTY_STATE_TEXT, TaskView, output_placeholder

__all__ = ["EMPTY_STATE_TEXT", "TaskView", "output_placeholder"]
