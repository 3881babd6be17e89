"""The dialogs around making tasks: New Task, Continue and Fork (`task`), the questions an
action asks on its way, a resume's choice, the host to resume on and the keyring prompt
(`prompts`), and what they work from: dropped paths sorted into folders, the engines to offer,
revisions in words (`data`, no Qt).
"""

from gui.dialogs.data import NewTaskRequest, engine_choices
from gui.dialogs.prompts import KeyringDialog, ResumeOnHostDialog, ask_resume_choice
from gui.dialogs.task import ContinueDialog, ForkDialog, NewTaskDialog

__all__ = [
    "ContinueDialog",
    "ForkDialog",
    "KeyringDialog",
    "NewTaskDialog",
    "NewTaskRequest",
    "ResumeOnHostDialog",
    "ask_resume_choice",
    "engine_choices",
]
