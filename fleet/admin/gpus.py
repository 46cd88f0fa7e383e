"""The GPU pages: a fast searchable list, each GPU's history, and the actions operators use to
sell, transfer and buy back shares, move GPUs, change their state, import and export."""

from __future__ import annotations

import csv
from collections.abc import Callable, Iterator
from typing import Any

from django import forms
from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied, ValidationError
from django.db.models import Exists, OuterRef, Q, QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect, StreamingHttpResponse
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils import timezone

from accounts.models import Owner
from fleet import selectors
from fleet.admin import forms as console
from fleet.admin.base import AuditedAdmin, _user
from fleet.models import Cluster, Gpu, Ownership, Placement, Site
from fleet.services import importing, lifecycle, ownership, placement
from fleet.services.inventory import gpu_register

MAX_UPLOAD_BYTES = 5 * 1024 * 1024


def _placed_now(**where: Any) -> Exists:
    now = timezone.now()
    return Exists(
        Placement.objects.filter(gpu=OuterRef("pk"), valid_from__lte=now, **where).filter(
            Q(valid_to__isnull=True) | Q(valid_to__gt=now)
        )
    )


class SiteFilter(admin.SimpleListFilter):
    title = "site"
    parameter_name = "site"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [(str(s.pk), s.code) for s in Site.objects.order_by("code")]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        if self.value():
            return queryset.filter(_placed_now(node__cluster__site_id=self.value()))
        return queryset


class ClusterFilter(admin.SimpleListFilter):
    title = "cluster"
    parameter_name = "cluster"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [(str(c.pk), str(c)) for c in Cluster.objects.select_related("site")]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        if self.value():
            return queryset.filter(_placed_now(node__cluster_id=self.value()))
        return queryset


class OwnerFilter(admin.SimpleListFilter):
    title = "current owner"
    parameter_name = "owner"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [(str(o.pk), o.legal_name) for o in Owner.objects.order_by("legal_name")[:200]]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        if self.value():
            now = timezone.now()
            held = Ownership.objects.filter(
                gpu=OuterRef("pk"), owner_id=str(self.value()), valid_from__lte=now
            ).filter(Q(valid_to__isnull=True) | Q(valid_to__gt=now))
            return queryset.filter(Exists(held))
        return queryset


class GpuForm(forms.ModelForm[Gpu]):
    class Meta:
        model = Gpu
        fields = ("serial", "nvml_uuid", "model")


@admin.register(Gpu)
class GpuAdmin(AuditedAdmin[Gpu]):
    form = GpuForm
    list_display = (
        "serial",
        "nvml_uuid",
        "model",
        "lifecycle_state",
        "where",
        "owners",
    )
    list_select_related = ("model",)
    list_filter = (SiteFilter, ClusterFilter, "lifecycle_state", OwnerFilter, "model")
    search_fields = ("serial", "nvml_uuid")
    search_help_text = "Serial, NVML UUID (or part of one), or an owner's legal name."
    readonly_fields = ("lifecycle_state", "created_at")
    change_list_template = "admin/fleet/gpu/change_list.html"
    change_form_template = "admin/fleet/gpu/change_form.html"
    actions = ("sell_share", "transfer_share", "buy_back_share", "change_state")

    def get_queryset(self, request: HttpRequest) -> QuerySet[Gpu]:
        return selectors.gpus_with_whereabouts(at=timezone.now(), percent=True)

    def get_search_results(
        self, request: HttpRequest, queryset: QuerySet[Gpu], search_term: str
    ) -> tuple[QuerySet[Gpu], bool]:
        term = search_term.strip()
        if not term:
            return queryset, False
        held = Ownership.objects.filter(gpu=OuterRef("pk"), owner__legal_name__icontains=term)
        matches = Q(serial__icontains=term) | Q(nvml_uuid__icontains=term) | Exists(held)
        return queryset.filter(matches), False

    @admin.display(description="where (now)")
    def where(self, gpu: Gpu) -> str:
        hostname = getattr(gpu, "hostname", None)
        if hostname is None:
            return "—"
        return f"{gpu.site_code}/{gpu.cluster_code} {hostname}[{gpu.slot}]"  # type: ignore[attr-defined]

    @admin.display(description="owners (now)")
    def owners(self, gpu: Gpu) -> str:
        return getattr(gpu, "owners", None) or "operator"

    # Permissions the actions and pages check (named by the `permissions=` of actions).
    def has_transfer_ownership_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm("fleet.transfer_ownership")

    def has_move_gpu_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm("fleet.move_gpu")

    def has_import_gpus_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm("fleet.import_gpus")

    def write(self, request: HttpRequest, obj: Any, form: Any, change: bool) -> Any:
        if change:
            return super().write(request, obj, form, change)
        return gpu_register(
            serial=obj.serial,
            nvml_uuid=obj.nvml_uuid,
            model=obj.model,
            by=_user(request),
            reason="Registered in the console.",
        )

    def page_context(self, request: HttpRequest, obj: Any) -> dict[str, Any]:
        return {
            **super().page_context(request, obj),
            "gpu_history": selectors.gpu_history(gpu=obj),
            "can_move": self.has_move_gpu_permission(request),
            "can_transfer": self.has_transfer_ownership_permission(request),
        }

    def get_urls(self) -> list[URLPattern]:
        wrap = self.admin_site.admin_view
        own = [
            path("import/", wrap(self.import_view), name="fleet_gpu_import"),
            path("export/", wrap(self.export_view), name="fleet_gpu_export"),
            path("<path:object_id>/move/", wrap(self.move_view), name="fleet_gpu_move"),
            path(
                "<path:object_id>/ownership/<str:operation>/",
                wrap(self.ownership_view),
                name="fleet_gpu_ownership",
            ),
        ]
        return [*own, *super().get_urls()]

    # ---- ownership ------------------------------------------------------------------------

    @admin.action(
        description="Sell a share of the selected GPUs…", permissions=["transfer_ownership"]
    )
    def sell_share(self, request: HttpRequest, queryset: QuerySet[Gpu]) -> HttpResponse | None:
        return self._ownership(request, list(queryset), "sell", action="sell_share")

    @admin.action(
        description="Transfer a share of the selected GPUs…", permissions=["transfer_ownership"]
    )
    def transfer_share(self, request: HttpRequest, queryset: QuerySet[Gpu]) -> HttpResponse | None:
        return self._ownership(request, list(queryset), "transfer", action="transfer_share")

    @admin.action(
        description="Buy back a share of the selected GPUs…", permissions=["transfer_ownership"]
    )
    def buy_back_share(self, request: HttpRequest, queryset: QuerySet[Gpu]) -> HttpResponse | None:
        return self._ownership(request, list(queryset), "buy_back", action="buy_back_share")

    def ownership_view(self, request: HttpRequest, object_id: str, operation: str) -> HttpResponse:
        gpu = self.get_object(request, object_id)
        if gpu is None:
            raise PermissionDenied("No such GPU.")
        response = self._ownership(request, [gpu], operation, action=None)
        return response or HttpResponseRedirect(
            reverse("admin:fleet_gpu_change", args=[gpu.pk], current_app=self.admin_site.name)
        )

    def _ownership(
        self, request: HttpRequest, gpus: list[Gpu], operation: str, *, action: str | None
    ) -> HttpResponse | None:
        if not self.has_transfer_ownership_permission(request):
            raise PermissionDenied("You may not change ownership.")
        by = _user(request)
        apply: dict[str, tuple[type[forms.Form], Callable[[Any], object], str]] = {
            "sell": (
                console.SellForm,
                lambda f: ownership.ownership_sell(
                    gpus=gpus,
                    by=by,
                    reason=f.cleaned_data["reason"],
                    at=f.cleaned_data["at"],
                    owner=f.cleaned_data["owner"],
                    share_bps=f.cleaned_data["share_bps"],
                ),
                "Sell a share",
            ),
            "transfer": (
                console.TransferForm,
                lambda f: ownership.ownership_transfer(
                    gpus=gpus,
                    by=by,
                    reason=f.cleaned_data["reason"],
                    at=f.cleaned_data["at"],
                    from_owner=f.cleaned_data["from_owner"],
                    to=[ownership.ShareTo(owner=o, share_bps=s) for o, s in f.recipients()],
                ),
                "Transfer a share",
            ),
            "buy_back": (
                console.BuyBackForm,
                lambda f: ownership.ownership_buy_back(
                    gpus=gpus,
                    by=by,
                    reason=f.cleaned_data["reason"],
                    at=f.cleaned_data["at"],
                    owner=f.cleaned_data["owner"],
                    share_bps=f.cleaned_data["share_bps"],
                ),
                "Buy back a share",
            ),
        }
        if operation not in apply:
            raise PermissionDenied(f"Unknown ownership operation {operation!r}.")
        form_class, run, title = apply[operation]
        return self._form_page(request, gpus, form_class, run, title, action=action)

    # ---- placement and lifecycle ----------------------------------------------------------

    @admin.action(
        description="Change the lifecycle state of the selected GPUs…", permissions=["move_gpu"]
    )
    def change_state(self, request: HttpRequest, queryset: QuerySet[Gpu]) -> HttpResponse | None:
        gpus = list(queryset)

        def run(form: Any) -> object:
            return lifecycle.gpus_transition(
                gpus=gpus,
                state=form.cleaned_data["state"],
                at=form.cleaned_data["at"],
                reason=form.cleaned_data["reason"],
                by=_user(request),
            )

        return self._form_page(
            request,
            gpus,
            console.LifecycleForm,
            run,
            "Change lifecycle state",
            action="change_state",
        )

    def move_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        if not self.has_move_gpu_permission(request):
            raise PermissionDenied("You may not move GPUs.")
        gpu = self.get_object(request, object_id)
        if gpu is None:
            raise PermissionDenied("No such GPU.")

        def run(form: Any) -> object:
            data = form.cleaned_data
            if data["node"] is None:
                return placement.gpu_unplace(
                    gpu=gpu, at=data["at"], reason=data["reason"], by=_user(request)
                )
            return placement.gpu_move(
                gpu=gpu,
                node=data["node"],
                slot=data["slot"],
                at=data["at"],
                reason=data["reason"],
                by=_user(request),
            )

        response = self._form_page(request, [gpu], console.MoveForm, run, "Move GPU", action=None)
        return response or HttpResponseRedirect(
            reverse("admin:fleet_gpu_change", args=[gpu.pk], current_app=self.admin_site.name)
        )

    def _form_page(
        self,
        request: HttpRequest,
        gpus: list[Gpu],
        form_class: type[forms.Form],
        run: Callable[[Any], object],
        title: str,
        *,
        action: str | None,
    ) -> HttpResponse | None:
        """Shows ``form_class`` for the GPUs; on a valid submit runs the service once for all.

        Returns None when done (the caller redirects), or the page to show.
        """
        submitted = request.method == "POST" and "apply" in request.POST
        form = form_class(request.POST if submitted else None)
        if submitted and form.is_valid():
            try:
                run(form)
            except ValidationError as error:
                _attach(form, error)
            else:
                self.message_user(
                    request, f"{title}: done for {len(gpus)} GPU(s).", messages.SUCCESS
                )
                return None
        context = {
            **self.admin_site.each_context(request),
            "title": title,
            "opts": self.opts,
            "form": form,
            "gpus": gpus,
            "action": action,
        }
        return TemplateResponse(request, "admin/fleet/gpu/action_form.html", context)

    # ---- import and export ----------------------------------------------------------------

    def import_view(self, request: HttpRequest) -> HttpResponse:
        if not self.has_import_gpus_permission(request):
            raise PermissionDenied("You may not import GPUs.")
        context: dict[str, Any] = {
            **self.admin_site.each_context(request),
            "title": "Import GPUs from CSV",
            "opts": self.opts,
            "columns": importing.REQUIRED_COLUMNS + importing.OPTIONAL_COLUMNS,
        }
        upload = console.ImportUploadForm()
        if request.method == "POST" and "confirm" in request.POST:
            confirm = console.ImportConfirmForm(request.POST)
            if confirm.is_valid():
                text = confirm.cleaned_data["csv_text"]
                try:
                    gpus = importing.gpu_import_commit(
                        text=text, by=_user(request), reason=confirm.cleaned_data["reason"]
                    )
                except ValidationError as error:
                    context["commit_errors"] = error.messages
                    context["preview"] = importing.gpu_import_preview(text=text)
                    context["confirm"] = confirm
                else:
                    self.message_user(request, f"Imported {len(gpus)} GPU(s).", messages.SUCCESS)
                    return HttpResponseRedirect(
                        reverse("admin:fleet_gpu_changelist", current_app=self.admin_site.name)
                    )
        elif request.method == "POST":
            upload = console.ImportUploadForm(request.POST, request.FILES)
            if upload.is_valid():
                text = _read_upload(upload)
                if text is not None:
                    preview = importing.gpu_import_preview(text=text)
                    context["preview"] = preview
                    context["confirm"] = console.ImportConfirmForm(initial={"csv_text": text})
        context["upload"] = upload
        return TemplateResponse(request, "admin/fleet/gpu/import.html", context)

    def export_view(self, request: HttpRequest) -> StreamingHttpResponse:
        if not self.has_view_permission(request):
            raise PermissionDenied
        at = timezone.now().replace(microsecond=0)
        echo = _Echo()
        writer = csv.writer(echo)
        rows: Iterator[str] = (
            writer.writerow(row) for row in selectors.inventory_export_rows(at=at)
        )
        response = StreamingHttpResponse(rows, content_type="text/csv; charset=utf-8")
        stamp = at.strftime("%Y%m%dT%H%M%SZ")
        response["Content-Disposition"] = f'attachment; filename="steward-inventory-{stamp}.csv"'
        return response


class _Echo:
    """A file-like object whose write returns the line, for csv.writer over a stream."""

    def write(self, value: str) -> str:
        return value


def _read_upload(form: console.ImportUploadForm) -> str | None:
    upload = form.cleaned_data["file"]
    if upload.size > MAX_UPLOAD_BYTES:
        form.add_error("file", f"The file is larger than {MAX_UPLOAD_BYTES // (1024 * 1024)} MiB.")
        return None
    try:
        text: str = upload.read().decode("utf-8-sig")
    except UnicodeDecodeError:
        form.add_error("file", "The file is not UTF-8 text; save it as CSV (UTF-8).")
        return None
    return text


def _attach(form: forms.Form, error: ValidationError) -> None:
    """Puts a service's ValidationError on the form, on the field it names if the form has it."""
    if not hasattr(error, "error_dict"):
        form.add_error(None, error)
        return
    for field, errors in error.message_dict.items():
        target = field if field in form.fields else None
        for message in errors:
            form.add_error(target, message if target else f"{field}: {message}")
