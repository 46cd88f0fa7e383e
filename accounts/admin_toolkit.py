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
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from django import forms
from django.contrib import messages
from django.contrib.admin import ModelAdmin
from django.core.exceptions import ValidationError
from django.db import transaction
from django.http import HttpRequest, HttpResponse


class ServiceForm(forms.ModelForm):  # type: ignore[type-arg]
    """An add form whose ``create`` calls the service (from ``ServiceWriteAdmin.save_model``).

    Django's own unique checks are left out: the services refuse duplicates with a message
    that says what to do, and the database refuses them whatever the path.
    """

    # The service's refusal of this very submission, shown on the form (set by the admin).
    refusal: ValidationError | None = None

    def create(self, data: dict[str, Any], by: Any) -> Any:
        raise NotImplementedError

    def validate_unique(self) -> None:
        return None  # the service and the database refuse duplicates (see the docstring)

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


class _Refused(Exception):
    def __init__(self, error: ValidationError) -> None:
        super().__init__(error_text(error))
        self.error = error


class ServiceWriteAdmin[M: Any](ModelAdmin[M]):
    """Adds rows through ``form.create`` (a ``ServiceForm``), called once in ``save_model``."""

    def get_form(
        self, request: HttpRequest, obj: Any = None, change: bool = False, **kw: Any
    ) -> Any:
        form = super().get_form(request, obj, change=change, **kw)
        refusal = getattr(request, "service_refusal", None)
        if refusal is not None:  # the second pass of a refused submission: say why
            form = type(form.__name__, (form,), {"refusal": refusal})
        return form

    def save_model(self, request: HttpRequest, obj: Any, form: Any, change: bool) -> None:
        try:
            created = form.create(dict(form.cleaned_data), request.user)
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
