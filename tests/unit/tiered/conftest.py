from tests.unit.store.conftest import make_store  # noqa: F401  (real stores under tmp_path)
