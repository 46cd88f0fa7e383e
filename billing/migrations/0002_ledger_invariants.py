"""Ledger invariants enforced by PostgreSQL, whatever path writes the rows.

1. A published statement is immutable: UPDATE and DELETE of it, and INSERT, UPDATE or
   DELETE of its lines, are rejected — from the ORM, bulk paths and raw SQL alike.
2. Adjustments and payouts are append-only: a mistake is corrected by a new row.
3. Rate cards of one cluster and currency never overlap in time.
"""

from django.db import migrations

FORWARD = r"""
CREATE FUNCTION billing_statement_immutable() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF OLD.status = 'published' THEN
        RAISE EXCEPTION USING
            ERRCODE = 'integrity_constraint_violation',
            CONSTRAINT = 'billing_statement_immutable',
            MESSAGE = format('Statement %s is published and cannot be changed or deleted; '
                             'correct it with an adjustment in an open period.', OLD.id);
    END IF;
    IF TG_OP = 'DELETE' THEN
        RETURN OLD;
    END IF;
    RETURN NEW;
END
$$;

CREATE TRIGGER billing_statement_immutable
    BEFORE UPDATE OR DELETE ON billing_statement
    FOR EACH ROW EXECUTE FUNCTION billing_statement_immutable();

CREATE FUNCTION billing_statementline_immutable() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    target uuid;
BEGIN
    target := CASE WHEN TG_OP = 'INSERT' THEN NEW.statement_id ELSE OLD.statement_id END;
    IF EXISTS (SELECT 1 FROM billing_statement WHERE id = target AND status = 'published')
       OR (TG_OP = 'UPDATE' AND EXISTS (SELECT 1 FROM billing_statement
                                         WHERE id = NEW.statement_id AND status = 'published'))
    THEN
        RAISE EXCEPTION USING
            ERRCODE = 'integrity_constraint_violation',
            CONSTRAINT = 'billing_statement_immutable',
            MESSAGE = format('Statement %s is published; its lines cannot be added, changed '
                             'or deleted.', target);
    END IF;
    IF TG_OP = 'DELETE' THEN
        RETURN OLD;
    END IF;
    RETURN NEW;
END
$$;

CREATE TRIGGER billing_statementline_immutable
    BEFORE INSERT OR UPDATE OR DELETE ON billing_statementline
    FOR EACH ROW EXECUTE FUNCTION billing_statementline_immutable();

CREATE FUNCTION billing_append_only() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION USING
        ERRCODE = 'integrity_constraint_violation',
        CONSTRAINT = TG_TABLE_NAME || '_append_only',
        MESSAGE = format('%s rows are append-only; record a correcting row instead.',
                         TG_TABLE_NAME);
END
$$;

CREATE TRIGGER billing_adjustment_append_only
    BEFORE UPDATE OR DELETE ON billing_adjustment
    FOR EACH ROW EXECUTE FUNCTION billing_append_only();

CREATE TRIGGER billing_payout_append_only
    BEFORE UPDATE OR DELETE ON billing_payout
    FOR EACH ROW EXECUTE FUNCTION billing_append_only();

CREATE FUNCTION billing_ratecard_no_overlap() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE other bigint;
BEGIN
    PERFORM pg_advisory_xact_lock(
        hashtextextended('billing_ratecard:' || NEW.cluster_id::text || ':' || NEW.currency, 0));
    SELECT id INTO other FROM billing_ratecard
     WHERE cluster_id = NEW.cluster_id AND currency = NEW.currency AND id <> NEW.id
       AND tstzrange(effective_from, effective_to, '[)')
           && tstzrange(NEW.effective_from, NEW.effective_to, '[)')
     LIMIT 1;
    IF other IS NOT NULL THEN
        RAISE EXCEPTION USING
            ERRCODE = 'exclusion_violation',
            CONSTRAINT = 'billing_ratecard_no_overlap',
            MESSAGE = format('Rate card %s overlaps rate card %s of the same cluster and '
                             'currency.', NEW.id, other);
    END IF;
    RETURN NULL;
END
$$;

CREATE CONSTRAINT TRIGGER billing_ratecard_no_overlap
    AFTER INSERT OR UPDATE ON billing_ratecard
    DEFERRABLE INITIALLY IMMEDIATE
    FOR EACH ROW EXECUTE FUNCTION billing_ratecard_no_overlap();
"""

BACKWARD = r"""
DROP TRIGGER billing_ratecard_no_overlap ON billing_ratecard;
DROP FUNCTION billing_ratecard_no_overlap();
DROP TRIGGER billing_payout_append_only ON billing_payout;
DROP TRIGGER billing_adjustment_append_only ON billing_adjustment;
DROP FUNCTION billing_append_only();
DROP TRIGGER billing_statementline_immutable ON billing_statementline;
DROP FUNCTION billing_statementline_immutable();
DROP TRIGGER billing_statement_immutable ON billing_statement;
DROP FUNCTION billing_statement_immutable();
"""


class Migration(migrations.Migration):
    dependencies = [("billing", "0001_initial")]

    operations = [migrations.RunSQL(FORWARD, BACKWARD)]
