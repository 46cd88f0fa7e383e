import pytest

from tests.conftest import PASSWORD

pytestmark = pytest.mark.django_db


def test_home_requires_login(client):
    response = client.get("/")
    assert response.status_code == 302
    assert response.headers["Location"] == "/login/?next=/"


def test_login_then_home_shows_only_own_accounts(client, alice, bob):
    response = client.post("/login/", {"username": "alice@owner.example", "password": PASSWORD})
    assert response.status_code == 302
    page = client.get("/").content.decode()
    assert "Alice Compute Ltd" in page
    assert "Bob Chen" not in page


def test_wrong_password_is_refused_with_a_message(client, alice):
    response = client.post("/login/", {"username": "alice@owner.example", "password": "nope"})
    assert response.status_code == 200
    assert "Please enter a correct email address and password" in response.content.decode()


def test_admin_login_page_answers(client):
    assert client.get("/admin/login/").status_code == 200
    assert client.get("/admin/").status_code == 302
