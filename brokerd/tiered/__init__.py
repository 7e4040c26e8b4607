"""Tiered storage under HA (docs/tiered.md): closed commit-log chunks copied to a tier backend by the master only,
never past the confirm offset, fenced by the master epoch; reads below local retention served from the tier."""
