"""Settings, one module per concern, composed by ``base`` and specialised per environment.

Pick one with DJANGO_SETTINGS_MODULE: ``config.settings.dev`` (default of manage.py),
``config.settings.test`` or ``config.settings.production``.
"""
