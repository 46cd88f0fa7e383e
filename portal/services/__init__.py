"""Writes of the portal: login throttling, sessions, second factor, password reset, notices."""
