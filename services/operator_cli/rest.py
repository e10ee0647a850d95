"""Calls to the kafkron REST API (``services/ingest/api.py``) that turn every failure into a
:class:`RefusedError` whose message says what happened and what to do next."""

from __future__ import annotations

from types import TracebackType
from typing import Any

import httpx

from services.operator_cli.config import Setting
from services.operator_cli.exceptions import RefusedError

TIMEOUT_S = 30.0


class ApiClient:
    """A blocking client of one kafkron API; use it as a context manager."""

    def __init__(
        self, api_url: Setting, timeout_s: float = TIMEOUT_S, *, token: Setting | None = None
    ) -> None:
        self.api_url, self.token = api_url, token
        headers = {} if token is None else {"Authorization": f"Bearer {token.value}"}
        self._http = httpx.Client(base_url=api_url.value, timeout=timeout_s, headers=headers)

    def __enter__(self) -> ApiClient:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self._http.close()

    def get(self, path: str, params: dict[str, Any] | None = None) -> Any:
        """GET ``path``; the decoded JSON body of a 2xx answer."""
        return self.request("GET", path, params=params)

    def post(self, path: str, body: Any = None, headers: dict[str, str] | None = None) -> Any:
        """POST ``body`` as JSON to ``path``; the decoded JSON body of a 2xx answer."""
        return self.request("POST", path, json=body, headers=headers)

    def delete(self, path: str) -> Any:
        """DELETE ``path``; the decoded JSON body of a 2xx answer."""
        return self.request("DELETE", path)

    def request(self, method: str, path: str, **kwargs: Any) -> Any:
        """One call; the decoded JSON body of a 2xx answer."""
        return self.send(method, path, **kwargs).json()

    def send(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        """One call; a refusal, a failure to connect or a timeout raise RefusedError."""
        if "params" in kwargs and kwargs["params"] is not None:
            kwargs["params"] = {k: v for k, v in kwargs["params"].items() if v is not None}
        try:
            response = self._http.request(method, path, **kwargs)
        except httpx.TransportError as exc:
            raise RefusedError(
                f"cannot reach the kafkron API at {self.api_url} ({type(exc).__name__}: "
                f"{exc}); start a cluster with 'kafkron up' (or the API with 'kafkron api'), "
                "or say where it is with --api or KAFKRON_API_URL"
            ) from None
        if response.is_success:
            return response
        message = refusal_message(method, path, response)
        if response.status_code == 401:
            message += (
                f"; the API at {self.api_url} wants a token: give --token or KAFKRON_TOKEN"
                if self.token is None
                else f"; the token from {self.token.source} was refused"
            )
        raise RefusedError(message, status_code=response.status_code)


def refusal_message(method: str, path: str, response: httpx.Response) -> str:
    """What the API said, readable: its ``detail``, or each invalid field with its message."""
    try:
        detail: Any = response.json().get("detail")
    except ValueError:
        detail = response.text.strip() or response.reason_phrase
    status = response.status_code
    if isinstance(detail, list):
        fields = "; ".join(_field_error(error) for error in detail)
        return f"invalid request ({status}): {fields}"
    if status == 404 and detail == "Not Found":
        return f"{method} {path}: not found (404); unknown id, or an API older than this command"
    if status == 503:
        return f"the API is not ready ({detail}); retry in a moment"
    return f"{detail} ({status})"


def _field_error(error: Any) -> str:
    if not isinstance(error, dict):
        return str(error)
    loc = ".".join(
        str(part) for part in error.get("loc", []) if part not in ("body", "query", "path")
    )
    return f"{loc or 'request'}: {error.get('msg', error)}"
