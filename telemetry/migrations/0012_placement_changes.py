"""Placements get a change log (issue 22).

Placement changes: one row per statement that changes ``fleet_placement`` (or renames a
GPU's NVML UUID), written by triggers in that statement's own transaction, whoever writes:
services, bulk loads, tests. No row is locked or updated, so placement changes never wait for
each other here. The window path caches placements per process with the oldest transaction
still running when it read them (its snapshot's xmin) and how many changes of that
transaction or later it saw; a change committed after that read is of such a transaction, so
the count moves exactly when placements may have (telemetry.services.processing.validation).
"""

from django.db import migrations

FORWARD = r"""
CREATE TABLE telemetry_placementchange (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    xid xid8 NOT NULL DEFAULT pg_current_xact_id(),
    changed_at timestamptz NOT NULL DEFAULT now()
);
-- A reader counts only the changes of transactions not finished before its cache was read.
CREATE INDEX telemetry_placementchange_xid ON telemetry_placementchange (xid);
CREATE FUNCTION telemetry_placement_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO telemetry_placementchange DEFAULT VALUES;
    RETURN NULL;
END $$;
CREATE TRIGGER telemetry_placement_changed
    AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON fleet_placement
    FOR EACH STATEMENT EXECUTE FUNCTION telemetry_placement_changed();
CREATE TRIGGER telemetry_gpu_renamed
    AFTER UPDATE OF nvml_uuid ON fleet_gpu
    FOR EACH ROW WHEN (OLD.nvml_uuid IS DISTINCT FROM NEW.nvml_uuid)
    EXECUTE FUNCTION telemetry_placement_changed();
"""

BACKWARD = r"""
DROP TRIGGER telemetry_gpu_renamed ON fleet_gpu;
DROP TRIGGER telemetry_placement_changed ON fleet_placement;
DROP FUNCTION telemetry_placement_changed();
DROP TABLE telemetry_placementchange;
"""


class Migration(migrations.Migration):
    dependencies = [
        ("fleet", "0004_incident_drafts"),
        ("telemetry", "0011_daily_rollups"),
    ]

    operations = [migrations.RunSQL(FORWARD, BACKWARD)]
