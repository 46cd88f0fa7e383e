"""What part of its minute a window observed, and how its utilization was measured.

Schema-v2 agents say which seconds of the minute they actually looked at the GPU
(``[observed_from, observed_to)``, whole seconds after ``window_start``) and whether the
utilization came from the driver's sample buffer, from instantaneous reads, or from both
(a gap in the buffer). Windows from schema-v1 agents observed the whole minute as far as the
server can tell (``0``–``60``, the defaults) and always used instantaneous reads.

The columns have constant defaults, so adding them to the partitioned table rewrites nothing.
"""

from django.db import migrations

FORWARD = r"""
ALTER TABLE telemetry_window
    ADD COLUMN observed_from smallint NOT NULL DEFAULT 0,
    ADD COLUMN observed_to smallint NOT NULL DEFAULT 60,
    ADD COLUMN util_method varchar(8),
    ADD CONSTRAINT telemetry_window_observed
        CHECK (observed_from >= 0 AND observed_from < observed_to AND observed_to <= 60),
    ADD CONSTRAINT telemetry_window_util_method
        CHECK (util_method IN ('buffer', 'instant', 'mixed'));
"""

BACKWARD = r"""
ALTER TABLE telemetry_window
    DROP CONSTRAINT telemetry_window_util_method,
    DROP CONSTRAINT telemetry_window_observed,
    DROP COLUMN util_method,
    DROP COLUMN observed_to,
    DROP COLUMN observed_from;
"""


class Migration(migrations.Migration):
    dependencies = [("telemetry", "0008_batch_received_index")]

    operations = [migrations.RunSQL(FORWARD, BACKWARD)]
