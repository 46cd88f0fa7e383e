"""Sites, clusters, nodes and the GPU model catalog: edited here, saved and audited by
``record_save``."""

from __future__ import annotations

from django.contrib import admin

from fleet.admin.base import AuditedAdmin
from fleet.models import Cluster, GpuModel, Node, Site


@admin.register(Site)
class SiteAdmin(AuditedAdmin[Site]):
    list_display = ("code", "name", "country", "time_zone")
    search_fields = ("code", "name")


@admin.register(Cluster)
class ClusterAdmin(AuditedAdmin[Cluster]):
    list_display = ("code", "name", "site")
    list_select_related = ("site",)
    list_filter = ("site",)
    search_fields = ("code", "name")


@admin.register(Node)
class NodeAdmin(AuditedAdmin[Node]):
    list_display = ("hostname", "cluster", "gpu_slots", "created_at", "decommissioned_at")
    list_select_related = ("cluster__site",)
    list_filter = ("cluster__site", "cluster")
    search_fields = ("hostname",)
    readonly_fields = ("created_at",)


@admin.register(GpuModel)
class GpuModelAdmin(AuditedAdmin[GpuModel]):
    list_display = ("name", "memory_mib", "tdp_w")
    search_fields = ("name",)
