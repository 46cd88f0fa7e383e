"""steward-verify: an owner's own check of a Steward statement.

Pure Python, standard library only: no Django, no database, nothing of Steward's server
code. It reads a statement's JSON export, recomputes every line, term and total from the
frozen inputs in it by the rules of docs/accounting.md (written from those rules, not from
the billing code, so it checks both), and checks the SHA-256 of the statement's canonical
content. See docs/accounting.md, "Checking a statement yourself".
"""

__version__ = "0.1.0"
