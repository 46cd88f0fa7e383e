"""Permissions that split operators, and history the database will not let anyone erase.

* ``fleet.transfer_ownership`` (sell, transfer, buy back) and ``fleet.import_gpus`` /
  ``fleet.move_gpu`` distinguish operators who may change things from read-only ones.
* Ownership rows may not be deleted (0002 already refuses edits other than closing once).
* Placements follow the same rule as ownership: only an open row may be closed, once;
  nothing else is edited and nothing is deleted.
* Lifecycle transitions are immutable once written.
"""

from django.db import migrations

FORWARD = r"""
CREATE FUNCTION fleet_refuse_delete() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION USING
        ERRCODE = 'integrity_constraint_violation',
        CONSTRAINT = TG_TABLE_NAME || '_append_only',
        MESSAGE = format('%s row %s cannot be deleted: this history is append-only.',
                         TG_TABLE_NAME, OLD.id);
END
$$;

CREATE TRIGGER fleet_ownership_no_delete
    BEFORE DELETE ON fleet_ownership
    FOR EACH ROW EXECUTE FUNCTION fleet_refuse_delete();

CREATE FUNCTION fleet_placement_append_only() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.gpu_id IS DISTINCT FROM OLD.gpu_id
       OR NEW.node_id IS DISTINCT FROM OLD.node_id
       OR NEW.slot IS DISTINCT FROM OLD.slot
       OR NEW.valid_from IS DISTINCT FROM OLD.valid_from
       OR NEW.created_by_id IS DISTINCT FROM OLD.created_by_id
       OR NEW.created_at IS DISTINCT FROM OLD.created_at
       OR (OLD.valid_to IS NOT NULL AND NEW.valid_to IS DISTINCT FROM OLD.valid_to) THEN
        RAISE EXCEPTION USING
            ERRCODE = 'integrity_constraint_violation',
            CONSTRAINT = 'fleet_placement_append_only',
            MESSAGE = format(
                'Placement row %s cannot be edited: only an open placement may be closed '
                '(valid_to set once). Record a move instead.', OLD.id);
    END IF;
    RETURN NEW;
END
$$;

CREATE TRIGGER fleet_placement_append_only
    BEFORE UPDATE ON fleet_placement
    FOR EACH ROW EXECUTE FUNCTION fleet_placement_append_only();

CREATE TRIGGER fleet_placement_no_delete
    BEFORE DELETE ON fleet_placement
    FOR EACH ROW EXECUTE FUNCTION fleet_refuse_delete();

CREATE FUNCTION fleet_lifecycle_immutable() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION USING
        ERRCODE = 'integrity_constraint_violation',
        CONSTRAINT = 'fleet_lifecycletransition_append_only',
        MESSAGE = format('Lifecycle transition %s cannot be %s: record a new transition instead.',
                         OLD.id, CASE TG_OP WHEN 'DELETE' THEN 'deleted' ELSE 'changed' END);
END
$$;

CREATE TRIGGER fleet_lifecycle_immutable
    BEFORE UPDATE OR DELETE ON fleet_lifecycletransition
    FOR EACH ROW EXECUTE FUNCTION fleet_lifecycle_immutable();
"""

BACKWARD = r"""
DROP TRIGGER fleet_lifecycle_immutable ON fleet_lifecycletransition;
DROP FUNCTION fleet_lifecycle_immutable();
DROP TRIGGER fleet_placement_no_delete ON fleet_placement;
DROP TRIGGER fleet_placement_append_only ON fleet_placement;
DROP FUNCTION fleet_placement_append_only();
DROP TRIGGER fleet_ownership_no_delete ON fleet_ownership;
DROP FUNCTION fleet_refuse_delete();
"""


class Migration(migrations.Migration):
    dependencies = [("fleet", "0002_ownership_invariants")]

    operations = [
        migrations.AlterModelOptions(
            name="gpu",
            options={
                "ordering": ["serial"],
                "permissions": [
                    ("import_gpus", "Can import GPUs from CSV"),
                    ("move_gpu", "Can move GPUs between nodes and change their lifecycle state"),
                ],
            },
        ),
        migrations.AlterModelOptions(
            name="ownership",
            options={
                "ordering": ["gpu", "valid_from", "owner"],
                "permissions": [
                    ("transfer_ownership", "Can sell, transfer and buy back GPU ownership"),
                ],
            },
        ),
        migrations.RunSQL(FORWARD, BACKWARD),
    ]
