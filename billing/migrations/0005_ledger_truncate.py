"""TRUNCATE is refused on the ledger's tables too, not only UPDATE and DELETE.

Row triggers do not fire on TRUNCATE, so migration 0002's immutability of published
statements and the append-only adjustments and payouts could be emptied in one statement.
A statement-level trigger now refuses TRUNCATE of ``billing_statement`` and
``billing_statementline`` while a published statement exists, and of ``billing_adjustment``
and ``billing_payout`` while they hold any row. A session that sets
``steward.allow_truncate = on`` may (the test suite, which empties every table between
tests; never set in production).
"""

from django.db import migrations

FORWARD = r"""
CREATE FUNCTION billing_refuse_truncate() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    kept boolean;
BEGIN
    IF coalesce(current_setting('steward.allow_truncate', true), '') = 'on' THEN
        RETURN NULL;
    END IF;
    IF TG_TABLE_NAME IN ('billing_statement', 'billing_statementline') THEN
        kept := EXISTS (SELECT 1 FROM billing_statement WHERE status = 'published');
    ELSE
        EXECUTE format('SELECT EXISTS (SELECT 1 FROM %I)', TG_TABLE_NAME) INTO kept;
    END IF;
    IF kept THEN
        RAISE EXCEPTION USING
            ERRCODE = 'integrity_constraint_violation',
            CONSTRAINT = TG_TABLE_NAME || '_no_truncate',
            MESSAGE = format('%s cannot be truncated: it holds published statements or '
                             'append-only rows.', TG_TABLE_NAME);
    END IF;
    RETURN NULL;
END
$$;

CREATE TRIGGER billing_statement_no_truncate BEFORE TRUNCATE ON billing_statement
    FOR EACH STATEMENT EXECUTE FUNCTION billing_refuse_truncate();
CREATE TRIGGER billing_statementline_no_truncate BEFORE TRUNCATE ON billing_statementline
    FOR EACH STATEMENT EXECUTE FUNCTION billing_refuse_truncate();
CREATE TRIGGER billing_adjustment_no_truncate BEFORE TRUNCATE ON billing_adjustment
    FOR EACH STATEMENT EXECUTE FUNCTION billing_refuse_truncate();
CREATE TRIGGER billing_payout_no_truncate BEFORE TRUNCATE ON billing_payout
    FOR EACH STATEMENT EXECUTE FUNCTION billing_refuse_truncate();
"""

BACKWARD = r"""
DROP TRIGGER billing_statement_no_truncate ON billing_statement;
DROP TRIGGER billing_statementline_no_truncate ON billing_statementline;
DROP TRIGGER billing_adjustment_no_truncate ON billing_adjustment;
DROP TRIGGER billing_payout_no_truncate ON billing_payout;
DROP FUNCTION billing_refuse_truncate();
"""


class Migration(migrations.Migration):
    dependencies = [("billing", "0004_published_needs_a_requester")]

    operations = [migrations.RunSQL(FORWARD, BACKWARD)]
