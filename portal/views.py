from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from accounts.models import User
from accounts.selectors import owners_for_user


@login_required(login_url="portal:login")
def home(request: HttpRequest) -> HttpResponse:
    assert isinstance(request.user, User)
    owners = owners_for_user(user=request.user).order_by("legal_name")
    return render(request, "portal/home.html", {"owners": owners})
