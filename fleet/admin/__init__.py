"""The operator console for the fleet. Changes go through ``fleet.services``; ownership,
placement and lifecycle rows are never edited here, only created by the services' actions."""

from fleet.admin import dashboard, gpus, history, inventory, operations

__all__ = ["dashboard", "gpus", "history", "inventory", "operations"]
