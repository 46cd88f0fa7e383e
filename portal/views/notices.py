"""The user's notices in the portal: the list, and marking them read."""

from __future__ import annotations

from django.contrib import messages
from django.core.paginator import Paginator
from django.http import Http404, HttpRequest, HttpResponseBase
from django.shortcuts import redirect, render

from portal.access import notices_for_user
from portal.services.notices import notice_mark_read, notices_mark_all_read
from portal.views.common import now, owner_view, the_user

PAGE_SIZE = 25


@owner_view
def notices(request: HttpRequest) -> HttpResponseBase:
    """GET lists the user's notices, newest first; POST marks one (``notice``) or all
    (``all``) read and comes back to the same page."""
    user, at = the_user(request), now()
    if request.method == "POST":
        if request.POST.get("all"):
            count = notices_mark_all_read(user=user, now=at)
            messages.success(request, f"{count} notice{'s' if count != 1 else ''} marked as read.")
        else:
            raw = request.POST.get("notice", "")
            if not raw.isdigit():
                raise Http404("No such notice.")
            notice_mark_read(user=user, notice_id=int(raw), now=at)
        back = request.POST.get("page", "")
        return redirect(f"{request.path}?page={back}" if back.isdigit() else request.path)
    listed = notices_for_user(user=user, now=at).order_by("-shown_from", "-pk")
    page = Paginator(listed, PAGE_SIZE).get_page(request.GET.get("page"))
    unread = listed.filter(read_at__isnull=True).count()
    return render(request, "portal/notices.html", {"page": page, "unread": unread})
