"""The File menu's pages about Cairn itself: Settings (defaults, engines, risk rules, the data
folder; `dialog`), Credentials (keyring secrets and grants; `credentials`), Housekeeping (disk use
and cleanup; `housekeeping`), and what they read and write (`data`, no Qt).
"""

from gui.settings.credentials import CredentialsPage, open_credentials_dialog
from gui.settings.dialog import DATA_DIR_KEY, SettingsDialog, next_data_dir
from gui.settings.housekeeping import HousekeepingDialog

__all__ = [
    "DATA_DIR_KEY",
    "CredentialsPage",
    "HousekeepingDialog",
    "SettingsDialog",
    "next_data_dir",
    "open_credentials_dialog",
]
