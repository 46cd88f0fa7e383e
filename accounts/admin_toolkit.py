"""The console's toolkit, for every app's admin: writes through services, once, in
``save_model``; one rule for actions on several objects.

**Writes.** An add form checks the shape of what is entered (its fields, the model's own
checks); ``ServiceWriteAdmin.save_model`` then calls the service, once, inside the
transaction Django's admin opens for the page. A refusal (``ValidationError``) rolls that
transaction back, and the same page is shown again with the refusal on the form, in the
service's words: nothing is written twice, and no check runs after the write (a check run
after it would find the new row itself).

**Actions on several objects.** An action on several objects (a list action, a button of a
guided page) runs its service on each object in turn, in a fixed order, all in one
transaction: all of them or none. The first refusal undoes what was done before it, and the
operator reads the refusal in the service's own words, and that nothing was changed.
Fleet's actions follow the same rule (``fleet.admin.operations``: "all or none").

**Big tables.** ``BigTableAdmin`` is the one base of every list that can grow without bound
(fleet's histories and GPUs, telemetry's batches, windows' rollups, events, transitions):
never a whole ``COUNT(*)`` to draw page links (``HonestCountPaginator``), and the count says
what it is — the planner's estimate, exact, or more than ``COUNT_CAP``
(``admin/steward/pagination.html``). ``ReadOnlyAdmin`` is the same for rows only services
write: never added, edited or deleted here.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from django import forms
from django.contrib import messages
from django.contrib.admin import ModelAdmin
from django.core.exceptions import ValidationError
from django.core.paginator import Paginator
from django.db import connections, transaction
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.utils.functional import cached_property

from accounts.admin_site import UtcColumns

# Filtered lists are counted exactly up to this many rows; an unfiltered one whose planner
# estimate is above it is shown with the estimate.
COUNT_CAP = 10_000


class HonestCountPaginator(Paginator[Any]):
    """Never ``COUNT(*)`` a big table whole to draw page links.

    An unfiltered list is counted from the planner's estimate (``count_kind`` "about") when
    that is above ``COUNT_CAP``; otherwise, and for a filtered one, exactly up to the cap
    ("exact"), else as more than the cap ("more_than").
    """

    count_kind = "exact"

    @cached_property
    def count(self) -> int:
        queryset = self.object_list
        if isinstance(queryset, QuerySet) and not queryset.query.where:
            with connections[queryset.db].cursor() as cursor:
                cursor.execute(
                    "SELECT reltuples::bigint FROM pg_class WHERE oid = %s::regclass",
                    [queryset.model._meta.db_table],
                )
                row = cursor.fetchone()
            estimate = int(row[0]) if row else -1
            if estimate > COUNT_CAP:
                self.count_kind = "about"
                return estimate
        if isinstance(queryset, QuerySet):
            counted = queryset.order_by()[: COUNT_CAP + 1].count()
        else:
            counted = len(queryset)
        if counted > COUNT_CAP:
            self.count_kind = "more_than"
            return COUNT_CAP
        return counted


class BigTableAdmin[M: Any](UtcColumns[M]):
    """A list that can grow without bound: honest counts, 100 rows a page."""

    paginator = HonestCountPaginator
    show_full_result_count = False
    list_per_page = 100


class ReadOnlyAdmin[M: Any](BigTableAdmin[M]):
    """Rows only services write (histories, telemetry): read here, never added, edited or
    deleted."""

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


# For the type checker the mixin is a form; at run time it is mixed into one.
_FormBase = forms.BaseForm if TYPE_CHECKING else object


class RefusalShown(_FormBase):  # type: ignore[misc,valid-type]
    """Shows the service's refusal of this very submission on the form, field by field
    (``ServiceWriteAdmin.get_form`` mixes it into any form on a refused submission)."""

    refusal: ValidationError | None = None

    def full_clean(self) -> None:
        super().full_clean()
        if self.refusal is None or not self.is_bound:
            return
        error = self.refusal
        if hasattr(error, "error_dict"):
            for field, errors in error.message_dict.items():
                target = field if field in self.fields else None
                for message in errors:
                    self.add_error(target, message)
        else:
            self.add_error(None, error)


class ServiceForm(RefusalShown, forms.ModelForm):  # type: ignore[type-arg]
    """An add form whose ``create`` calls the service (from ``ServiceWriteAdmin.save_model``).

    Django's own unique checks are left out: the services refuse duplicates with a message
    that says what to do, and the database refuses them whatever the path.
    """

    def create(self, data: dict[str, Any], by: Any) -> Any:
        raise NotImplementedError

    def validate_unique(self) -> None:
        return None  # the service and the database refuse duplicates (see the docstring)


class _Refused(Exception):
    def __init__(self, error: ValidationError) -> None:
        super().__init__(error_text(error))
        self.error = error


class ServiceWriteAdmin[M: Any](ModelAdmin[M]):
    """Writes through a service, called once in ``save_model`` (``write``: by default the
    add form's ``create``, a ``ServiceForm``); a refusal shows the page again with it."""

    def get_form(
        self, request: HttpRequest, obj: Any = None, change: bool = False, **kw: Any
    ) -> Any:
        form = super().get_form(request, obj, change=change, **kw)
        refusal = getattr(request, "service_refusal", None)
        if refusal is not None:  # the second pass of a refused submission: say why
            bases = (form,) if issubclass(form, RefusalShown) else (RefusalShown, form)
            form = type(form.__name__, bases, {"refusal": refusal})
        return form

    def write(self, request: HttpRequest, obj: Any, form: Any, change: bool) -> Any:
        """Calls the service; returns the row it wrote."""
        return form.create(dict(form.cleaned_data), request.user)

    def save_model(self, request: HttpRequest, obj: Any, form: Any, change: bool) -> None:
        try:
            created = self.write(request, obj, form, change)
        except ValidationError as error:
            raise _Refused(error) from error  # rolls back the page's transaction
        # The admin goes on with the form's instance (log entry, redirect): make it the row.
        obj.pk = created.pk
        obj.__dict__.update(created.__dict__)
        obj._state.adding = False

    def save_related(self, request: HttpRequest, form: Any, formsets: Any, change: bool) -> None:
        return None  # the service wrote everything

    def changeform_view(
        self,
        request: HttpRequest,
        object_id: str | None = None,
        form_url: str = "",
        extra_context: dict[str, Any] | None = None,
    ) -> HttpResponse:
        try:
            return super().changeform_view(request, object_id, form_url, extra_context)
        except _Refused as refused:
            # Nothing was written (the transaction rolled back): the page again, with why.
            request.service_refusal = refused.error  # type: ignore[attr-defined]
            return super().changeform_view(request, object_id, form_url, extra_context)


def error_text(error: ValidationError) -> str:
    """A refusal as one line for a console message: its messages, field by field."""
    if hasattr(error, "error_dict"):
        return "; ".join(m for ms in error.message_dict.values() for m in ms)
    return "; ".join(error.messages)


def all_or_none[T](objects: Iterable[T], run: Callable[[T], Any]) -> int:
    """Runs ``run`` on each object in turn, in one transaction; returns how many. The first
    refusal (``ValidationError``) rolls all of them back and is raised."""
    done = 0
    with transaction.atomic():
        for obj in objects:
            run(obj)
            done += 1
    return done


def run_each[T](
    admin_: ModelAdmin[Any], request: HttpRequest, objects: Iterable[T], run: Callable[[T], Any]
) -> int:
    """``all_or_none``, told to the operator: "3 done.", or the refusal and that nothing
    was changed. Returns how many were done (0 after a refusal)."""
    try:
        done = all_or_none(objects, run)
    except ValidationError as error:
        admin_.message_user(request, f"{error_text(error)} Nothing was changed.", messages.ERROR)
        return 0
    admin_.message_user(request, f"{done} done.", messages.SUCCESS)
    return done
