"""The bundle's `cairnctl` executable: the command line, or one of Cairn's helper processes when the
command line starts with core.launch.MODULE_SWITCH (the bundle has no `python -m`)."""

from core.launch import bundle_entry

if __name__ == "__main__":
    bundle_entry("core.cli")
