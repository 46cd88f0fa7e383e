"""A GPU is in one rental at a time, whatever path writes the rows.

Two rentals of one GPU over overlapping intervals would pay its up seconds twice. A
constraint trigger on ``billing_rentalgpu`` (a GPU joining a rental) and on ``billing_rental``
(a rental's interval changing) refuses the overlap; a per-GPU advisory lock makes two
concurrent writers take turns, so the second sees the first.
"""

from django.db import migrations

FORWARD = r"""
CREATE FUNCTION billing_rental_clash(rental bigint, gpu uuid) RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
    other bigint;
BEGIN
    PERFORM pg_advisory_xact_lock(hashtextextended('billing_rentalgpu:' || gpu::text, 0));
    SELECT theirs.id INTO other
      FROM billing_rental mine, billing_rentalgpu rg
      JOIN billing_rental theirs ON theirs.id = rg.rental_id
     WHERE mine.id = rental AND rg.gpu_id = gpu AND rg.rental_id <> rental
       AND tstzrange(theirs.starts_at, theirs.ends_at, '[)')
           && tstzrange(mine.starts_at, mine.ends_at, '[)')
     LIMIT 1;
    RETURN other;
END
$$;

CREATE FUNCTION billing_rentalgpu_no_overlap() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    other bigint;
BEGIN
    other := billing_rental_clash(NEW.rental_id, NEW.gpu_id);
    IF other IS NOT NULL THEN
        RAISE EXCEPTION USING
            ERRCODE = 'exclusion_violation',
            CONSTRAINT = 'billing_rental_no_overlap',
            MESSAGE = format('GPU %s of rental %s is already in rental %s over an overlapping '
                             'interval.', NEW.gpu_id, NEW.rental_id, other);
    END IF;
    RETURN NULL;
END
$$;

CREATE CONSTRAINT TRIGGER billing_rental_no_overlap
    AFTER INSERT OR UPDATE ON billing_rentalgpu
    DEFERRABLE INITIALLY IMMEDIATE
    FOR EACH ROW EXECUTE FUNCTION billing_rentalgpu_no_overlap();

CREATE FUNCTION billing_rental_interval_no_overlap() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    gpu uuid;
    other bigint;
BEGIN
    FOR gpu IN SELECT gpu_id FROM billing_rentalgpu WHERE rental_id = NEW.id ORDER BY gpu_id LOOP
        other := billing_rental_clash(NEW.id, gpu);
        IF other IS NOT NULL THEN
            RAISE EXCEPTION USING
                ERRCODE = 'exclusion_violation',
                CONSTRAINT = 'billing_rental_no_overlap',
                MESSAGE = format('GPU %s of rental %s is already in rental %s over an '
                                 'overlapping interval.', gpu, NEW.id, other);
        END IF;
    END LOOP;
    RETURN NULL;
END
$$;

CREATE CONSTRAINT TRIGGER billing_rental_interval_no_overlap
    AFTER UPDATE OF starts_at, ends_at ON billing_rental
    DEFERRABLE INITIALLY IMMEDIATE
    FOR EACH ROW EXECUTE FUNCTION billing_rental_interval_no_overlap();
"""

BACKWARD = r"""
DROP TRIGGER billing_rental_interval_no_overlap ON billing_rental;
DROP FUNCTION billing_rental_interval_no_overlap();
DROP TRIGGER billing_rental_no_overlap ON billing_rentalgpu;
DROP FUNCTION billing_rentalgpu_no_overlap();
DROP FUNCTION billing_rental_clash(bigint, uuid);
"""


class Migration(migrations.Migration):
    dependencies = [("billing", "0005_ledger_truncate")]

    operations = [migrations.RunSQL(FORWARD, BACKWARD)]
