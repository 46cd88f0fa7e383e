"""The portal's pages: thin views over ``portal.access``, ``portal.selectors`` and services."""
