"""The API's documentation pages, ``/docs`` (Swagger UI) and ``/redoc``, with every file
served by the API itself.

FastAPI's default pages load Swagger UI, ReDoc, a favicon and Google fonts from CDNs: blank
on a machine without internet. Here the JavaScript and CSS come from the ``fastapi-offline``
package (installed from PyPI with kafkron, never committed), mounted at ``/docs-assets``;
create the app with ``docs_url=None, redoc_url=None`` and call :func:`install_api_docs`.
Swagger UI's validator badge (a request to validator.swagger.io) is turned off, and the
pages carry a Content-Security-Policy that lets the browser load nothing from elsewhere.
"""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path

from fastapi import FastAPI
from fastapi.openapi.docs import (
    get_redoc_html,
    get_swagger_ui_html,
    get_swagger_ui_oauth2_redirect_html,
)
from fastapi.responses import HTMLResponse
from fastapi.staticfiles import StaticFiles

ASSETS_URL = "/docs-assets"
DOCS_CONTENT_SECURITY_POLICY = (
    "default-src 'self'; script-src 'self' 'unsafe-inline'; style-src 'self' 'unsafe-inline'; "
    "img-src 'self' data:; font-src 'self' data:; connect-src 'self'; worker-src 'self' blob:; "
    "object-src 'none'; base-uri 'none'; frame-ancestors 'none'"
)
"""The pages' inline start-up scripts and styles run; nothing loads from elsewhere (ReDoc's
side menu shows a logo from cdn.redoc.ly: the browser refuses it, the menu shows no logo)."""
ASSET_NAMES = ("swagger-ui-bundle.js", "swagger-ui.css", "redoc.standalone.js", "favicon.png")


def assets_dir() -> Path:
    """The folder of Swagger UI's and ReDoc's files in the installed ``fastapi-offline``."""
    return Path(str(files("fastapi_offline") / "static"))


def _same_origin_only(page: HTMLResponse) -> HTMLResponse:
    page.headers["content-security-policy"] = DOCS_CONTENT_SECURITY_POLICY
    return page


def install_api_docs(app: FastAPI) -> None:
    """Serve ``/docs``, its OAuth2 redirect page and ``/redoc`` from local files."""
    folder = assets_dir()
    missing = [name for name in ASSET_NAMES if not (folder / name).is_file()]
    if missing:  # a package layout we do not know: say so at start, not as a blank page
        raise RuntimeError(
            f"fastapi-offline has no {', '.join(missing)} in {folder}; "
            "reinstall kafkron's dependencies (pip install -e .)"
        )
    app.mount(ASSETS_URL, StaticFiles(directory=folder), name="docs-assets")
    assert app.openapi_url is not None
    openapi_url = app.openapi_url
    redirect_url = app.swagger_ui_oauth2_redirect_url or "/docs/oauth2-redirect"
    favicon = f"{ASSETS_URL}/favicon.png"

    @app.get("/docs", include_in_schema=False)
    def swagger_ui() -> HTMLResponse:
        return _same_origin_only(
            get_swagger_ui_html(
                openapi_url=openapi_url,
                title=f"{app.title} - Swagger UI",
                oauth2_redirect_url=redirect_url,
                swagger_js_url=f"{ASSETS_URL}/swagger-ui-bundle.js",
                swagger_css_url=f"{ASSETS_URL}/swagger-ui.css",
                swagger_favicon_url=favicon,
                swagger_ui_parameters={**(app.swagger_ui_parameters or {}), "validatorUrl": None},
            )
        )

    @app.get(redirect_url, include_in_schema=False)
    def swagger_ui_redirect() -> HTMLResponse:
        return _same_origin_only(get_swagger_ui_oauth2_redirect_html())

    @app.get("/redoc", include_in_schema=False)
    def redoc() -> HTMLResponse:
        return _same_origin_only(
            get_redoc_html(
                openapi_url=openapi_url,
                title=f"{app.title} - ReDoc",
                redoc_js_url=f"{ASSETS_URL}/redoc.standalone.js",
                redoc_favicon_url=favicon,
                with_google_fonts=False,
            )
        )
