"""Reads of the billing domain: availability and usage from the database, engine inputs."""
