"""Writes for telemetry. Views, tasks, admin and commands call these and nothing deeper."""
