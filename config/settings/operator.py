"""Who the operator is, as printed on every statement (the PDF's letterhead).

Required, like the secrets: production refuses to start without them, so no statement is ever
issued in an example company's name. Development and the tests set an example company
(config/settings/dev.py, test.py).
"""

from config.env import env_str

_HOW = "set it to what statements must print (docs/operations.md, The operator on statements)"

STEWARD_OPERATOR = {
    # The operator's legal name, as registered.
    "legal_name": env_str(
        "STEWARD_OPERATOR_LEGAL_NAME", hint=f"STEWARD_OPERATOR_LEGAL_NAME: {_HOW}"
    ),
    # The postal address; "|" separates its lines (one line each on the statement).
    "address": [
        line.strip()
        for line in env_str(
            "STEWARD_OPERATOR_ADDRESS", hint=f"STEWARD_OPERATOR_ADDRESS: {_HOW}"
        ).split("|")
        if line.strip()
    ],
    # The company registration, as it must appear, e.g. "Registered in England and Wales
    # No. 01234567".
    "registration": env_str(
        "STEWARD_OPERATOR_REGISTRATION", hint=f"STEWARD_OPERATOR_REGISTRATION: {_HOW}"
    ),
}
