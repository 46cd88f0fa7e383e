"""Writes of the billing domain; each validates what it is given and changes all or nothing."""
