"""The bundle's `cairn` executable: the desktop app, or one of Cairn's helper processes when the
command line starts with core.launch.MODULE_SWITCH (the bundle has no `python -m`)."""

import sys

from core.launch import restore_library_path, run_module_switch

if __name__ == "__main__":
    restore_library_path()
    code = run_module_switch(sys.argv[1:])
    if code is None:
        # Imported only now, so a helper process never loads Qt.
        from gui.main import main

        code = main()
    sys.exit(code)
