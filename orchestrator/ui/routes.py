"""The pages and the JSON they poll. Every GET only reads; the one POST (cancel) ends a job as `dlrun cancel`
does. Pages are Jinja2 templates with autoescape on; what a page's script draws it sets as text."""
from __future__ import annotations

import asyncio
from importlib.resources import files

import jinja2
from aiohttp import web

from orchestrator.errors import DlrunError
from orchestrator.state.db import Store
from orchestrator.state.job_pages import JobFilter
from orchestrator.state.records import JobRecord
from orchestrator.ui import views

TOKEN_HEADER = "X-Dlrun-Token"  # where a POST carries the token (a page of another origin cannot set it)
TOKEN_KEY: web.AppKey[str] = web.AppKey("token", str)
STORE_KEY: web.AppKey[Store] = web.AppKey("store", Store)
CURVES_KEY: web.AppKey[views.Curves] = web.AppKey("curves", views.Curves)
PER_PAGE = 50
PACKAGE = files("orchestrator.ui")
STATIC = {"ui.js": "text/javascript", "ui.css": "text/css"}
_env = jinja2.Environment(loader=jinja2.PackageLoader("orchestrator.ui", "templates"),
                          autoescape=True, undefined=jinja2.StrictUndefined)


def _page(request: web.Request, template: str, **values) -> web.Response:
    html = _env.get_template(template).render(token=request.app[TOKEN_KEY], token_header=TOKEN_HEADER, **values)
    return web.Response(text=html, content_type="text/html")


def _store(request: web.Request) -> Store:
    return request.app[STORE_KEY]


def _int(request: web.Request, name: str, default: int) -> int:
    try:
        return max(0, int(request.query.get(name, default)))
    except ValueError:
        return default


def _filter(request: web.Request) -> JobFilter:
    q = request.query
    return JobFilter(status=q.get("status") or None, backend=q.get("backend") or None,
                     schedule=q.get("schedule") or None, name=q.get("name") or None)


def _job(request: web.Request) -> JobRecord:
    job = _store(request).get_job(request.match_info["job"])
    if job is None:
        raise web.HTTPNotFound(text="no such job\n")
    return job


async def jobs_page(request: web.Request) -> web.Response:
    store = _store(request)
    data = views.jobs_view(store, _filter(request), _int(request, "page", 0), PER_PAGE)
    return _page(request, "jobs.html", initial=data, choices=views.filter_choices(store))


async def jobs_json(request: web.Request) -> web.Response:
    return web.json_response(views.jobs_view(_store(request), _filter(request), _int(request, "page", 0), PER_PAGE))


async def job_page(request: web.Request) -> web.Response:
    job = _job(request)
    store = _store(request)
    return _page(request, "job.html", job=job, initial=views.job_view(store, job, request.app[CURVES_KEY]),
                 plan=views.plan_view(store, job))


async def job_json(request: web.Request) -> web.Response:
    return web.json_response(views.job_view(_store(request), _job(request), request.app[CURVES_KEY]))


async def log_json(request: web.Request) -> web.Response:
    job = _job(request)
    try:
        after = int(request.query.get("after", -1))
    except ValueError:
        after = -1
    return web.json_response(views.log_view(job.id, after))


async def cancel(request: web.Request) -> web.Response:
    """End the job as `dlrun cancel` does (stop its Ray job; its supervisor, or this, tears down)."""
    job = _job(request)
    path = _store(request).path
    try:
        text = await asyncio.get_running_loop().run_in_executor(None, _cancel, path, job.id)
    except DlrunError as e:  # e.g. a cloud refused the teardown: said as `dlrun cancel` says it
        return web.json_response({"message": f"not cancelled: {e.message}"}, status=502)
    return web.json_response({"message": text})


def _cancel(path, job_id: str) -> str:
    """In a worker thread, with its own connection to the store (the server's serves the pages meanwhile)."""
    from orchestrator.cli.status import cancel_text
    from orchestrator.runs.cancel import cancel_job

    store = Store(path)
    try:
        job = store.get_job(job_id)
        if job is None:
            return f"{job_id}: no such job"
        return cancel_text(cancel_job(store, job))
    finally:
        store.close()


async def schedules_page(request: web.Request) -> web.Response:
    return _page(request, "schedules.html", schedules=views.schedules_view(_store(request)))


async def cost_page(request: web.Request) -> web.Response:
    return _page(request, "cost.html", cost=views.cost_view(_store(request)))


async def static(request: web.Request) -> web.Response:
    name = request.match_info["name"]
    if name not in STATIC:
        raise web.HTTPNotFound()
    return web.Response(body=(PACKAGE / "static" / name).read_bytes(), content_type=STATIC[name])


def add_routes(app: web.Application) -> None:
    app[CURVES_KEY] = views.Curves()
    app.router.add_get("/", jobs_page)
    app.router.add_get("/api/jobs", jobs_json)
    app.router.add_get("/jobs/{job}", job_page)
    app.router.add_get("/api/jobs/{job}", job_json)
    app.router.add_get("/api/jobs/{job}/log", log_json)
    app.router.add_post("/api/jobs/{job}/cancel", cancel)
    app.router.add_get("/schedules", schedules_page)
    app.router.add_get("/cost", cost_page)
    app.router.add_get("/static/{name}", static)
