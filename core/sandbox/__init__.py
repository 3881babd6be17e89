"""Sandboxes: where an engine's commands run, and how Cairn finds that place again after a
restart.

Owns the backend interface (base), the Docker backend (docker) and the unsafe host backend (host);
leaves run bookkeeping, credentials, egress policy and the resume decisions to
runs/resume/credentials.
"""
