"""Ownership invariants enforced by PostgreSQL itself, whatever path writes the rows.

1. At every instant the shares of a GPU add up to at most 10,000 bps. A deferred constraint
   trigger checks it at commit, so a transfer may close one row and open another in the same
   transaction. A per-GPU advisory lock serialises the check, so two concurrent sales of the
   same GPU cannot both pass on snapshots that do not see each other.
2. Rows are never edited in place: the only update allowed is closing an open row (setting
   ``valid_to`` once, later than ``valid_from``).
3. No overlapping intervals: one owner holds one ownership row of a GPU at a time; a GPU has
   one placement at a time; a node's slot holds one GPU at a time. (The embedded PostgreSQL
   has no btree_gist, so these are triggers rather than exclusion constraints.)
"""

from django.db import migrations

FORWARD = r"""
CREATE FUNCTION fleet_ownership_check_shares() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    worst_total bigint;
    worst_instant timestamptz;
BEGIN
    PERFORM pg_advisory_xact_lock(hashtextextended('fleet_ownership:' || NEW.gpu_id::text, 0));
    -- The total only rises where some row starts, so checking every start covers all instants.
    SELECT starts.t, SUM(o.share_bps)
      INTO worst_instant, worst_total
      FROM (SELECT DISTINCT valid_from AS t FROM fleet_ownership WHERE gpu_id = NEW.gpu_id) AS starts
      JOIN fleet_ownership AS o
        ON o.gpu_id = NEW.gpu_id
       AND o.valid_from <= starts.t
       AND (o.valid_to IS NULL OR o.valid_to > starts.t)
     GROUP BY starts.t
     ORDER BY 2 DESC, 1
     LIMIT 1;
    IF worst_total > 10000 THEN
        RAISE EXCEPTION USING
            ERRCODE = 'check_violation',
            CONSTRAINT = 'fleet_ownership_total_at_most_10000_bps',
            MESSAGE = format(
                'Ownership of GPU %s would add up to %s bps at %s; at most 10000 bps may be owned at any instant.',
                NEW.gpu_id, worst_total,
                to_char(worst_instant AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"'));
    END IF;
    RETURN NULL;
END
$$;

CREATE CONSTRAINT TRIGGER fleet_ownership_total_at_most_10000_bps
    AFTER INSERT OR UPDATE ON fleet_ownership
    DEFERRABLE INITIALLY DEFERRED
    FOR EACH ROW EXECUTE FUNCTION fleet_ownership_check_shares();

CREATE FUNCTION fleet_ownership_append_only() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.gpu_id IS DISTINCT FROM OLD.gpu_id
       OR NEW.owner_id IS DISTINCT FROM OLD.owner_id
       OR NEW.share_bps IS DISTINCT FROM OLD.share_bps
       OR NEW.valid_from IS DISTINCT FROM OLD.valid_from
       OR NEW.reason IS DISTINCT FROM OLD.reason
       OR NEW.created_by_id IS DISTINCT FROM OLD.created_by_id
       OR NEW.created_at IS DISTINCT FROM OLD.created_at
       OR (OLD.valid_to IS NOT NULL AND NEW.valid_to IS DISTINCT FROM OLD.valid_to) THEN
        RAISE EXCEPTION USING
            ERRCODE = 'integrity_constraint_violation',
            CONSTRAINT = 'fleet_ownership_append_only',
            MESSAGE = format(
                'Ownership row %s cannot be edited: only an open row may be closed (valid_to set once). '
                'Record a transfer instead.', OLD.id);
    END IF;
    RETURN NEW;
END
$$;

CREATE TRIGGER fleet_ownership_append_only
    BEFORE UPDATE ON fleet_ownership
    FOR EACH ROW EXECUTE FUNCTION fleet_ownership_append_only();
CREATE FUNCTION fleet_no_overlap_error(what text, row_id bigint, other_id bigint) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION USING
        ERRCODE = 'exclusion_violation',
        CONSTRAINT = what,
        MESSAGE = format('%s: row %s overlaps row %s in time.', what, row_id, other_id);
END
$$;

CREATE FUNCTION fleet_ownership_no_overlap() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE other bigint;
BEGIN
    PERFORM pg_advisory_xact_lock(hashtextextended('fleet_ownership:' || NEW.gpu_id::text, 0));
    SELECT id INTO other FROM fleet_ownership
     WHERE gpu_id = NEW.gpu_id AND owner_id = NEW.owner_id AND id <> NEW.id
       AND tstzrange(valid_from, valid_to, '[)') && tstzrange(NEW.valid_from, NEW.valid_to, '[)')
     LIMIT 1;
    IF other IS NOT NULL THEN
        PERFORM fleet_no_overlap_error('fleet_ownership_owner_no_overlap', NEW.id, other);
    END IF;
    RETURN NULL;
END
$$;

CREATE CONSTRAINT TRIGGER fleet_ownership_owner_no_overlap
    AFTER INSERT OR UPDATE ON fleet_ownership
    DEFERRABLE INITIALLY IMMEDIATE
    FOR EACH ROW EXECUTE FUNCTION fleet_ownership_no_overlap();

CREATE FUNCTION fleet_placement_no_overlap() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE other bigint;
BEGIN
    PERFORM pg_advisory_xact_lock(hashtextextended('fleet_placement_gpu:' || NEW.gpu_id::text, 0));
    PERFORM pg_advisory_xact_lock(
        hashtextextended('fleet_placement_slot:' || NEW.node_id::text || ':' || NEW.slot, 0));
    SELECT id INTO other FROM fleet_placement
     WHERE gpu_id = NEW.gpu_id AND id <> NEW.id
       AND tstzrange(valid_from, valid_to, '[)') && tstzrange(NEW.valid_from, NEW.valid_to, '[)')
     LIMIT 1;
    IF other IS NOT NULL THEN
        PERFORM fleet_no_overlap_error('fleet_placement_gpu_no_overlap', NEW.id, other);
    END IF;
    SELECT id INTO other FROM fleet_placement
     WHERE node_id = NEW.node_id AND slot = NEW.slot AND id <> NEW.id
       AND tstzrange(valid_from, valid_to, '[)') && tstzrange(NEW.valid_from, NEW.valid_to, '[)')
     LIMIT 1;
    IF other IS NOT NULL THEN
        PERFORM fleet_no_overlap_error('fleet_placement_slot_no_overlap', NEW.id, other);
    END IF;
    RETURN NULL;
END
$$;

CREATE CONSTRAINT TRIGGER fleet_placement_no_overlap
    AFTER INSERT OR UPDATE ON fleet_placement
    DEFERRABLE INITIALLY IMMEDIATE
    FOR EACH ROW EXECUTE FUNCTION fleet_placement_no_overlap();
"""

BACKWARD = r"""
DROP TRIGGER fleet_placement_no_overlap ON fleet_placement;
DROP FUNCTION fleet_placement_no_overlap();
DROP TRIGGER fleet_ownership_owner_no_overlap ON fleet_ownership;
DROP FUNCTION fleet_ownership_no_overlap();
DROP FUNCTION fleet_no_overlap_error(text, bigint, bigint);
DROP TRIGGER fleet_ownership_append_only ON fleet_ownership;
DROP FUNCTION fleet_ownership_append_only();
DROP TRIGGER fleet_ownership_total_at_most_10000_bps ON fleet_ownership;
DROP FUNCTION fleet_ownership_check_shares();
"""


class Migration(migrations.Migration):
    dependencies = [("fleet", "0001_initial")]

    operations = [migrations.RunSQL(FORWARD, BACKWARD)]
