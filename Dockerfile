# Steward web, worker and beat image. Dependencies come from the hashed lock file.
FROM python:3.12-slim-bookworm

ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_DISABLE_PIP_VERSION_CHECK=1 \
    DJANGO_SETTINGS_MODULE=config.settings.production
WORKDIR /app

COPY requirements/base.txt requirements/base.txt
RUN pip install --no-cache-dir --require-hashes --no-deps -r requirements/base.txt

COPY . .
RUN useradd --system --uid 10001 --home /app steward \
 && SECRET_KEY=build-only STEWARD_NODE_KEY_SECRET=build-only STEWARD_WEBHOOK_KEY_SECRET=build-only ALLOWED_HOSTS=build DATABASE_URL=postgresql://build/build \
    STEWARD_OPERATOR_LEGAL_NAME=build STEWARD_OPERATOR_ADDRESS=build STEWARD_OPERATOR_REGISTRATION=build \
    REDIS_URL=redis://build:6379/0 STEWARD_VAR_DIR=/app/var python manage.py collectstatic --noinput \
 && chown -R steward /app/var
USER steward
EXPOSE 8000
CMD ["gunicorn", "config.wsgi", "--bind", "0.0.0.0:8000", "--workers", "3", "--access-logfile", "-"]
