"""The Approvals tab: commands runs asked permission for, answered by a person.

`panel` (the cards, Approve and Deny) and `data` (the queue as plain values, no Qt).
"""

from gui.approvals.panel import ApprovalsPanel

__all__ = ["ApprovalsPanel"]
