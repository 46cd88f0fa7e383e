"""Owners get an account number and a postal address, both printed on statements.

Existing owners are numbered in the order they were created (then by id), from 100001; the
sequence then continues from the highest number, and the database numbers every new owner.
"""

from django.db import migrations, models

SEQUENCE = "accounts_owner_account_number_seq"


class Migration(migrations.Migration):
    dependencies = [
        ("accounts", "0005_partner_handle"),
    ]

    operations = [
        migrations.AddField(
            model_name="owner",
            name="postal_address",
            field=models.TextField(
                blank=True,
                help_text="As printed on statements: one line per line of the address.",
            ),
        ),
        migrations.AddField(
            model_name="owner",
            name="account_number",
            field=models.BigIntegerField(null=True, editable=False),
        ),
        migrations.RunSQL(
            sql=[
                f"CREATE SEQUENCE {SEQUENCE} START 100001 OWNED BY accounts_owner.account_number",
                """
                UPDATE accounts_owner AS o SET account_number = n.number
                FROM (
                    SELECT id, 100000 + row_number() OVER (ORDER BY created_at, id) AS number
                    FROM accounts_owner
                ) AS n
                WHERE o.id = n.id
                """,
                f"SELECT setval('{SEQUENCE}', max(account_number)) "  # noqa: S608 (constants)
                "FROM accounts_owner HAVING count(*) > 0",
                # Unique here, not in the model: see Owner.account_number.
                "CREATE UNIQUE INDEX accounts_owner_account_number_unique "
                "ON accounts_owner (account_number)",
            ],
            reverse_sql=[
                "DROP INDEX accounts_owner_account_number_unique",
                f"DROP SEQUENCE {SEQUENCE}",
            ],
        ),
        migrations.AlterField(
            model_name="owner",
            name="account_number",
            field=models.BigIntegerField(
                editable=False,
                db_default=models.Func(models.Value(SEQUENCE), function="nextval"),
                help_text="Assigned by the database; printed on statements.",
            ),
        ),
    ]
