"""What every app shares and no app owns: instants as Steward writes them, and row locks.

Not a Django app (no models): the bottom layer, imported by every app and importing none.
"""
