"""A published statement's lines are guarded once per statement, not once per row (issue 22,
goal 4a).

Migration 0002's trigger ran a query per line inserted, updated or deleted: of the ~240 ms of
database time a close's 10,500 lines took to insert, ~180 ms was that trigger. The same rule
is now checked once per SQL statement, over the rows it touched (transition tables), and
refuses the same changes with the same error: adding, changing or deleting a line of a
published statement (for an UPDATE, one moved from or to such a statement). The check runs
after the statement's rows are written and before it returns, so a refused statement still
leaves nothing behind.
"""

from django.db import migrations

CHECK = r"""
CREATE FUNCTION billing_statementline_published_check() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    target uuid;
BEGIN
    IF TG_OP = 'INSERT' THEN
        SELECT s.id INTO target FROM billing_statement s
         WHERE s.status = 'published' AND s.id IN (SELECT statement_id FROM added) LIMIT 1;
    ELSIF TG_OP = 'DELETE' THEN
        SELECT s.id INTO target FROM billing_statement s
         WHERE s.status = 'published' AND s.id IN (SELECT statement_id FROM removed) LIMIT 1;
    ELSE
        SELECT s.id INTO target FROM billing_statement s
         WHERE s.status = 'published'
           AND s.id IN (SELECT statement_id FROM removed
                        UNION ALL SELECT statement_id FROM added)
         LIMIT 1;
    END IF;
    IF target IS NOT NULL THEN
        RAISE EXCEPTION USING
            ERRCODE = 'integrity_constraint_violation',
            CONSTRAINT = 'billing_statement_immutable',
            MESSAGE = format('Statement %s is published; its lines cannot be added, changed '
                             'or deleted.', target);
    END IF;
    RETURN NULL;
END
$$;
"""

FORWARD = (
    CHECK
    + r"""
DROP TRIGGER billing_statementline_immutable ON billing_statementline;
DROP FUNCTION billing_statementline_immutable();

CREATE TRIGGER billing_statementline_immutable_insert
    AFTER INSERT ON billing_statementline REFERENCING NEW TABLE AS added
    FOR EACH STATEMENT EXECUTE FUNCTION billing_statementline_published_check();
CREATE TRIGGER billing_statementline_immutable_update
    AFTER UPDATE ON billing_statementline REFERENCING OLD TABLE AS removed NEW TABLE AS added
    FOR EACH STATEMENT EXECUTE FUNCTION billing_statementline_published_check();
CREATE TRIGGER billing_statementline_immutable_delete
    AFTER DELETE ON billing_statementline REFERENCING OLD TABLE AS removed
    FOR EACH STATEMENT EXECUTE FUNCTION billing_statementline_published_check();
"""
)

BACKWARD = r"""
DROP TRIGGER billing_statementline_immutable_insert ON billing_statementline;
DROP TRIGGER billing_statementline_immutable_update ON billing_statementline;
DROP TRIGGER billing_statementline_immutable_delete ON billing_statementline;
DROP FUNCTION billing_statementline_published_check();

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
"""


class Migration(migrations.Migration):
    dependencies = [("billing", "0011_frozen_inputs_json")]

    operations = [migrations.RunSQL(FORWARD, BACKWARD)]
