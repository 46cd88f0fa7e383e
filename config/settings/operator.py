"""Who the operator is, as printed on every statement (the PDF's letterhead).

The defaults name an example company, for development and the demo; a deployment sets its own
legal name, address and registration through the environment.
"""

from config.env import env_str

STEWARD_OPERATOR = {
    # The operator's legal name, as registered.
    "legal_name": env_str("STEWARD_OPERATOR_LEGAL_NAME", "Example GPU Hosting Ltd"),
    # The postal address; "|" separates its lines (one line each on the statement).
    "address": [
        line.strip()
        for line in env_str(
            "STEWARD_OPERATOR_ADDRESS", "1 Example Street|Example City EX1 2MP|United Kingdom"
        ).split("|")
        if line.strip()
    ],
    # The company registration, as it must appear, e.g. "Registered in England and Wales
    # No. 01234567".
    "registration": env_str(
        "STEWARD_OPERATOR_REGISTRATION", "Registered in England and Wales No. 00000000"
    ),
}
