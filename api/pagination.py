"""Cursor pagination: stable under inserts, opaque ``next``/``previous`` links."""

from __future__ import annotations

from rest_framework.pagination import CursorPagination


class ApiCursorPagination(CursorPagination):
    page_size = 100
    page_size_query_param = "limit"
    max_page_size = 500
    ordering = "pk"
