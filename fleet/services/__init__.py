"""Writes to the fleet. Every function takes keyword arguments only, checks the domain rules,
writes in bulk where it can, and records an audit entry for every object it changes.

* ``inventory`` — sites, clusters, nodes, GPU models, GPUs (register, edit)
* ``placement`` — move a GPU to a node slot, take it out
* ``lifecycle`` — dated lifecycle transitions
* ``ownership`` — sell, transfer, buy back (dated, fractional, audited with a reason)
* ``operations`` — maintenance windows and incidents
* ``importing`` — CSV import of GPUs (preview, then all-or-nothing commit)
* ``access`` — the operator groups and their permissions
"""
