"""The container's web dashboard (docs/dashboard.md), served on the metrics port next to `/metrics`:
`server.py` (aiohttp routes, sampler, admin actions) over pure `figures.py`, `history.py`, `auth.py`, `errors.py`;
`context.py` holds the Protocols of what it reads of the container and of a credentials source."""
