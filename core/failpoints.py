"""Named crash points for proving crash safety: `CAIRN_FAILPOINT=name` makes the process die
(SIGKILL-like, no clean-up) when it reaches `failpoint(name)`.

Owns nothing else; the code that writes durable state marks the points between its steps.
"""

from __future__ import annotations

import os

ENV = "CAIRN_FAILPOINT"


def failpoint(name: str) -> None:
    if os.environ.get(ENV) == name:
        os._exit(137)
