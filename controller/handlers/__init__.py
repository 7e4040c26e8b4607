"""Wire handlers for the controller's request codes, one module per request family."""
