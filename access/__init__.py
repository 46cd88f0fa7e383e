"""What the people of owner accounts may see: one rule for the portal and the partner API."""
