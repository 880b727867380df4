"""Feature parts of the public Fleet service API, one mixin per feature area."""
