"""The bundle's `cairnctl` executable: the command line, or one of Cairn's helper processes when
the command line starts with core.launch.MODULE_SWITCH (the bundle has no `python -m`)."""

import sys

from core.launch import restore_library_path, run_module_switch

if __name__ == "__main__":
    restore_library_path()
    code = run_module_switch(sys.argv[1:])
    if code is None:
        from core.cli import main

        code = main()
    sys.exit(code)
