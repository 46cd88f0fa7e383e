import pytest
from django.core.exceptions import ValidationError
from django.db import IntegrityError, connection, transaction

from accounts import services
from accounts.models import Owner, User
from accounts.selectors import owners_for_user
from portal.demo import seed_demo


@pytest.mark.django_db
def test_email_is_the_login_and_is_case_insensitive():
    user = services.user_create(email="Dana@Example.COM", password="a-long-password-1")
    assert user.email == "dana@example.com"
    assert user.check_password("a-long-password-1")
    with pytest.raises(ValidationError, match="already exists"):
        services.user_create(email="DANA@example.com", password="x")


@pytest.mark.django_db
def test_database_refuses_case_variants_of_an_email_even_from_raw_sql(alice):
    with pytest.raises(IntegrityError), transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO accounts_user (email, password, full_name, is_active, is_staff,"
            " is_superuser, date_joined) VALUES ('ALICE@owner.example', '', '', true, false,"
            " false, now())"
        )


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("billing_currency", "eur", "not an ISO 4217 currency code"),
        ("time_zone", "Mars/Olympus", "not an IANA time zone"),
    ],
)
def test_owner_validation_names_the_field(field, value, message):
    kwargs = {
        "kind": Owner.Kind.PERSON,
        "legal_name": "X",
        "contact_email": "x@example.com",
        field: value,
    }
    with pytest.raises(ValidationError, match=message) as caught:
        services.owner_create(**kwargs)
    assert field in caught.value.message_dict
    assert Owner.objects.count() == 0


@pytest.mark.django_db
def test_owners_for_user_is_filtered_by_who_asks(alice, bob, oscar, alice_owner, bob_owner):
    assert list(owners_for_user(user=alice)) == [alice_owner]
    assert list(owners_for_user(user=bob)) == [bob_owner]
    assert set(owners_for_user(user=oscar)) == {alice_owner, bob_owner}


@pytest.mark.django_db
def test_membership_role_is_validated(alice, bob_owner):
    with pytest.raises(ValidationError, match="Unknown role 'root'"):
        services.membership_grant(user=alice, owner=bob_owner, role="root")


@pytest.mark.django_db
def test_demo_seed_is_idempotent():
    first = seed_demo(password="demo-password-123")
    second = seed_demo(password="demo-password-123")
    assert first["operator"] == second["operator"]
    assert User.objects.count() == 5  # oscar, olga, alice, bob, carol
    assert Owner.objects.count() == 2
    assert User.objects.get(email="oscar@steward.example").is_staff is True
    assert User.objects.get(email="olga@steward.example").is_staff is True
