"""The API fuzzed against its own OpenAPI document with schemathesis: whatever arrives, no
5xx, and every response (status, content type, body) is one the document describes. Half the
cases aim at real approvals, so approving, denying and editing run, not only "not found"."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import schemathesis
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from tests.web.inbox_app import approver, propose
from tether import SQLiteStore
from tether.web.app import WebConfig, create_app

EXAMPLES_PER_OPERATION = 60  # five operations: a few hundred requests in all
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
]


def test_the_api_matches_its_openapi_document_under_fuzzing(tmp_path: Path) -> None:
    store = SQLiteStore(f"sqlite:///{tmp_path}/t.db")
    try:
        token = approver(store, "alice", "acme")
        ids = [propose(store, amount=n + 1) for n in range(40)]
        ids.append(propose(store, tenant="globex"))
        # schemathesis calls the app as "testserver": a name it must be told it answers to.
        config = WebConfig(store, app_ref="tests.web.inbox_app:app", allowed_hosts=("testserver",))
        app = create_app(config)
        schema = schemathesis.openapi.from_asgi("/api/openapi.json", app)
        operations = [result.ok() for result in schema.get_all_operations()]  # type: ignore[union-attr]
        assert len(operations) == 5
        headers = {"Authorization": f"Bearer {token}"}
        seen: dict[int, int] = {}
        with TestClient(app):
            for operation in operations:
                fuzz(operation, ids, headers, seen)
        assert not any(code >= 500 for code in seen)
        # The fuzzing reached past authentication and the lookup: decisions were made.
        assert seen.get(200, 0) > 0 and seen.get(404, 0) > 0
    finally:
        store.close()


def fuzz(operation: Any, ids: list[str], headers: dict[str, str], seen: dict[int, int]) -> None:
    has_id = "{approval_id}" in operation.path

    @given(case=operation.as_strategy(), real=st.sampled_from([*ids, None]))
    @settings(
        max_examples=EXAMPLES_PER_OPERATION,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    def run(case: Any, real: str | None) -> None:
        if has_id and real is not None:
            case.path_parameters = {**(case.path_parameters or {}), "approval_id": real}
        response = case.call_and_validate(headers=headers, checks=CHECKS)
        seen[response.status_code] = seen.get(response.status_code, 0) + 1

    run()
