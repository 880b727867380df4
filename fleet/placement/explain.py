"""Placement's explanations, rendered by `fleet.render.explain` (text tables and JSON)."""

from fleet.render.explain import explain_to_json, factor_names, render_explain

__all__ = ["explain_to_json", "factor_names", "render_explain"]
