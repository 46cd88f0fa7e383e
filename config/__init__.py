"""The Django project: settings, URLs, the Celery app and the process entry points."""

from config.celery import app as celery_app

__all__ = ["celery_app"]
