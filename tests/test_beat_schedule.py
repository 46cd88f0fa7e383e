"""Every beat entry names a task the workers know, so a typo cannot silently stop a sweep."""

from django.conf import settings

from config.celery import app


def test_every_beat_entry_names_a_registered_task():
    app.loader.import_default_modules()
    names = {entry["task"] for entry in settings.CELERY_BEAT_SCHEDULE.values()}
    assert "webhooks.events_prune" in names
    assert names - set(app.tasks) == set()
