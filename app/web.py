"""``gpuwarden web``: the console (Starlette, Jinja2 templates, uPlot charts) over the notifier's state.

Pages are rendered on the server from :func:`gpuwarden.app.webspool.read_fleet` over a
:class:`gpuwarden.app.webspool.SpoolReader` (the spool, each page reading what it shows) or, with
``web.source: kafka``, from :class:`gpuwarden.app.webcluster.ClusterView` (the topics the
notifier reads); the only script draws the charts. Reading needs the credentials when ``web.token`` or
``web.basic_auth`` is set (it must be off loopback); writing (silences, acks) always needs
them, so a console nobody configured cannot change what pages whom. A browser signs in once
(the sign-in page sets a cookie derived from the credentials, never the credentials
themselves); scripts send ``Authorization`` as they would to the Alertmanager webhook.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import hashlib
import hmac
import logging
import signal
import sys
import time
from dataclasses import replace
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from urllib.parse import parse_qs, quote, urlsplit

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, PlainTextResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.templating import Jinja2Templates

from gpuwarden.app.settings import Settings
from gpuwarden.app.webconfig import WebConfig
from gpuwarden.app.webcluster import ClusterView
from gpuwarden.app.webspool import SpoolReader, read_fleet
from gpuwarden.app.webstate import AlertPage, Chart, Fleet, paginate
from gpuwarden.config import validate
from gpuwarden.contract import Ack, AlertTransition, Silence, record_key
from gpuwarden.humantime import moment, relative, span
from gpuwarden.notifiers.am_server import ListenError, authorized, listen, read_body, serve
from gpuwarden.notifiers.control import ControlRecord, ControlState, warn_each
from gpuwarden.notifiers.control_cli import expired, new_silence, read_state, write_record
from gpuwarden.notifiers.verdict import authorization
from gpuwarden.app.remediate import act_on, describe, trail
from gpuwarden.remediation.act import offer
from gpuwarden.spool import Spool
from gpuwarden.streams.inferencestage import VIEW_METRICS, VIEW_QUANTILES
from gpuwarden.units import parse_duration, parse_time

HERE = Path(__file__).resolve().parent
COOKIE = "gpuwarden_session"
FORM_LIMIT = 16 * 1024
PAGES = (("/", "Fleet"), ("/alerts", "Alerts"), ("/classes", "Task classes"), ("/services", "Inference SLOs"),
         ("/scheduler", "Scheduler"), ("/silences", "Silences"), ("/retro", "Retro reports"))
log = logging.getLogger("gpuwarden.web")
METRIC_NAMES = {"ttft": "time to first token", "itl": "inter-token latency", "e2e": "end to end"}


class Guard:
    """Who may read and who may write; compares in constant time."""

    def __init__(self, cfg: WebConfig) -> None:
        header = authorization(cfg.token, cfg.basic_auth)
        self.basic = cfg.basic_auth is not None
        self.expected = header.encode() if header is not None else None
        self.session = (hmac.new(self.expected, b"gpuwarden web session", hashlib.sha256).hexdigest().encode()
                        if self.expected is not None else None)

    def signed_in(self, request: Request) -> bool:
        if self.expected is None:
            return False
        if request.headers.get("authorization") and authorized(request.headers["authorization"], self.expected):
            return True
        cookie = request.cookies.get(COOKIE, "")
        return self.session is not None and hmac.compare_digest(cookie.encode(), self.session)

    def may_read(self, request: Request) -> bool:
        return self.expected is None or self.signed_in(request)

    def login(self, form: dict[str, str]) -> bool:
        """The sign-in form's fields turned into the header they stand for, compared like one."""
        if self.expected is None:
            return False
        if self.basic:
            creds = f"{form.get('username', '')}:{form.get('password', '')}".encode()
            header = "Basic " + base64.b64encode(creds).decode()
        else:
            header = "Bearer " + form.get("token", "")
        return authorized(header, self.expected)


def _form(body: bytes) -> dict[str, str]:
    return {k: v[-1] for k, v in parse_qs(body.decode("utf-8", "replace"), keep_blank_values=True).items()}


def _local_path(target: str) -> str:
    """Only a path on this console (no scheme, no host) is followed after sign-in."""
    parts = urlsplit(target)
    return target if target.startswith("/") and not target.startswith("//") and not parts.netloc else "/"


def _same_origin(request: Request) -> bool:
    """A browser's form post names its page's origin; one from another site is refused."""
    origin = request.headers.get("origin")
    return origin is None or urlsplit(origin).netloc == request.headers.get("host", "")


def _num(v: float | None, digits: int) -> str:
    return "—" if v is None else f"{v:.{digits}f}"


def _chart_data(c: Chart) -> dict[str, object]:
    """The chart's data for console.js (the template's ``tojson`` escapes it for the attribute)."""
    return {"ts": c.ts, "values": c.values, "band": c.band, "fired_at": c.fired_at, "unit": c.unit}


def build_app(settings: Settings) -> Starlette:
    guard = Guard(settings.web)
    view = ClusterView(settings) if settings.web.source == "kafka" else None
    reader = SpoolReader(settings) if view is None else None
    zone = settings.notify.timezone
    templates = Jinja2Templates(directory=str(HERE / "templates"))
    env = templates.env
    env.globals.update(pages=PAGES, zone=zone, num=_num, chart_data=_chart_data)
    env.filters["moment"] = lambda ts: moment(ts, zone)
    env.filters["matchers"] = lambda ms: " ".join(f"{m.label}{m.op}{m.value}" for m in ms)
    env.filters["relative"] = relative
    env.filters["span"] = lambda s: "—" if s is None else span(s)
    env.globals["remediation_offer"] = lambda a: offer(settings.remediation, a)

    def page(request: Request, name: str, status: int = 200, **context: object) -> Response:
        if not guard.may_read(request):
            return RedirectResponse(f"/login?next={quote(request.url.path)}", 303)
        return templates.TemplateResponse(request, name, {"signed_in": guard.signed_in(request),
                                                          "can_write": guard.expected is not None,
                                                          **context}, status_code=status)

    async def control_state() -> ControlState:
        """Silences and acks: the view's copy of the control topic in cluster mode with
        ``notify.control: kafka``, else where ``notify.control`` keeps them (the console's
        open spool for ``spool``)."""
        if reader is not None and settings.notify.control == "spool":
            state, problems = await asyncio.to_thread(reader.control)
            warn_each(problems)
            return state
        if view is None or settings.notify.control != "kafka":
            return await read_state(settings)
        return view.replica.control if view.replica is not None else ControlState()

    async def current(engine: bool = True) -> Fleet:
        """The pages' state; ``engine``: with the engine's tables (nodes, classes, services)."""
        if view is not None:
            return view.fleet(time.time(), await control_state())
        assert reader is not None
        return await asyncio.to_thread(read_fleet, reader, await control_state(), time.time(), engine=engine)

    async def firing() -> dict[str, AlertTransition]:
        if view is not None:
            return view.replica.firing if view.replica is not None else {}
        assert reader is not None
        return await asyncio.to_thread(reader.firing)

    async def write(record: ControlRecord) -> None:
        """Written where ``notify.control`` says; in cluster mode the page that follows waits
        (a few seconds at most) for the view to have read it back from the topic."""
        if reader is not None and settings.notify.control == "spool":
            await asyncio.to_thread(reader.write, record)
        else:
            await write_record(settings, record)
        if view is not None and settings.notify.control == "kafka":
            key = record_key(record)
            await view.has(lambda r: r.control.records.get(key) == record)

    async def fleet_page(request: Request, name: str, engine: bool = False, fleet: Fleet | None = None,
                         **context: object) -> Response:
        """A page from the fleet's state (``fleet``, else read now: with the engine's tables for ``engine``)."""
        if not guard.may_read(request):
            return RedirectResponse(f"/login?next={quote(request.url.path)}", 303)
        fleet = fleet or await current(engine)
        shown = {c.alert.fingerprint: c.alert for _, cards in fleet.groups for c in cards}
        return page(request, name, fleet=fleet, now=time.time(), cluster=view is not None, open_alerts=shown, **context)

    async def overview(request: Request) -> Response:
        return await fleet_page(request, "fleet.html", engine=True)

    async def alerts(request: Request) -> Response:
        """One page of the open alerts (``?page=N``, or ``?alert=FP`` for the page holding it),
        the charts of those shown alone read."""
        if not guard.may_read(request):
            return RedirectResponse(f"/login?next={quote(request.url.path)}", 303)
        q = request.query_params
        fleet, listed = await listing(int(q["page"]) if q.get("page", "").isdigit() else 1, q.get("alert", ""))
        return await fleet_page(request, "alerts.html", fleet=fleet, alert_page=listed)

    async def listing(number: int, fingerprint: str) -> tuple[Fleet, AlertPage]:
        fleet = await current(engine=False)
        listed = paginate(fleet.groups, number, fingerprint=fingerprint)
        if reader is not None:
            charts = await asyncio.to_thread(reader.charts, [c.alert for c in listed.cards()], fleet.as_of)
            listed = replace(listed, groups=[
                (labels, [replace(c, chart=charts.get(c.alert.fingerprint)) for c in cards], n)
                for labels, cards, n in listed.groups])
        return fleet, listed

    async def classes(request: Request) -> Response:
        return await fleet_page(request, "classes.html", engine=True)

    async def services(request: Request) -> Response:
        return await fleet_page(request, "services.html", engine=True, quantiles=VIEW_QUANTILES,
                                metrics=VIEW_METRICS, metric_names=METRIC_NAMES)

    async def scheduler(request: Request) -> Response:
        """Queue waits, retries and GPU-hours per partition (``report scheduler``'s), the last week
        unless ``?since=`` says otherwise."""
        from gpuwarden.history.queues import from_spool

        now = time.time()
        try:
            since = parse_time(request.query_params.get("since") or "7d", now) or 0.0
        except ValueError as e:
            return await fleet_page(request, "scheduler.html", report=None, error=str(e), since=now)
        if reader is not None:
            report = await asyncio.to_thread(reader.scheduler, by="partition", since=since, until=now)
        else:
            with Spool(settings.spool.path, settings.spool.max_bytes, settings.spool.max_age) as spool:
                report = await asyncio.to_thread(from_spool, spool, by="partition", since=since, until=now,
                                                 topic_prefix=settings.kafka.topic_prefix)
        return await fleet_page(request, "scheduler.html", report=report, error="", since=since)

    async def silences(request: Request) -> Response:
        return await fleet_page(request, "silences.html", error=request.query_params.get("error", ""))

    def refuse_write(request: Request) -> Response | None:
        if guard.expected is None:
            return PlainTextResponse("silences and acks need credentials: set web.token or web.basic_auth "
                                     "in the config and sign in\n", 403)
        if not guard.signed_in(request):
            return PlainTextResponse("sign in first (/login)\n", 401, headers={
                "WWW-Authenticate": f'{"Basic" if guard.basic else "Bearer"} realm="gpuwarden"'})
        if not _same_origin(request):
            return PlainTextResponse("a form from another site\n", 403)
        return None

    async def change_silences(request: Request, make: Callable[[Request], Awaitable[Silence]]) -> Response:
        """Signed-in writes only; a bad matcher or an unknown silence comes back as the page's error."""
        if (refused := refuse_write(request)) is not None:
            return refused
        try:
            record = await make(request)
        except (ValueError, LookupError) as e:
            return RedirectResponse(f"/silences?error={quote(str(e))}", 303)
        await write(record)
        return RedirectResponse("/silences", 303)

    async def new_from_form(request: Request) -> Silence:
        form = _form(await read_body(request, FORM_LIMIT))
        duration = parse_duration(form.get("duration", "1h") or "1h")
        return new_silence(form.get("matchers", "").split(), duration, form.get("by", "").strip() or "web",
                           form.get("comment", ""), time.time())

    async def ended(request: Request) -> Silence:
        return expired(await control_state(), request.path_params["sid"], time.time())

    async def add_silence(request: Request) -> Response:
        return await change_silences(request, new_from_form)

    async def expire_silence(request: Request) -> Response:
        return await change_silences(request, ended)

    async def ack(request: Request) -> Response:
        if (refused := refuse_write(request)) is not None:
            return refused
        fp = request.path_params["fp"]
        if fp not in await firing():
            return PlainTextResponse(f"no open alert {fp}\n", 404)
        form = _form(await read_body(request, FORM_LIMIT))
        await write(Ack(fingerprint=fp, by=form.get("by", "").strip() or "web", at=time.time(),
                                         comment=form.get("comment", "")))
        return RedirectResponse(f"/alerts?alert={fp}#alert-{fp}", 303)

    async def remediation(request: Request) -> Response:
        """An alert's drain or resume (docs/remediation.md): what it offers and its audit trail;
        a signed-in POST acts, as ``gpuwarden act`` does, and the page says what came of it."""
        fp = request.path_params["fp"]
        if request.method == "POST":
            if (refused := refuse_write(request)) is not None:
                return refused
            form = _form(await read_body(request, FORM_LIMIT))
            if form.get("action") not in ("drain", "resume"):
                return PlainTextResponse("expected action=drain or action=resume\n", 400)
            got = await asyncio.to_thread(act_on, settings, fp, form["action"], form.get("by", "").strip() or "web",
                                          await firing())
            said = got if isinstance(got, str) else describe(got)
            return RedirectResponse(f"/alerts/{fp}/remediation?said={quote(said)}", 303)
        alert = (await firing()).get(fp)
        return page(request, "remediation.html", fp=fp, alert=alert, now=time.time(),
                    offered=offer(settings.remediation, alert) if alert else None,
                    backend=settings.remediation.backend, said=request.query_params.get("said", ""),
                    records=await asyncio.to_thread(trail, settings, fp))

    async def retro(request: Request) -> Response:
        q = request.query_params
        if "since" not in q:
            return await fleet_page(request, "retro.html", error="")
        if not guard.may_read(request):
            return RedirectResponse(f"/login?next={quote('/retro')}", 303)
        now = time.time()
        try:
            since, until = parse_time(q["since"], now), parse_time(q.get("until") or "0s ago", now)
        except ValueError as e:
            return await fleet_page(request, "retro.html", error=str(e))
        if since is None or until is None or until <= since or until - since > settings.web.retro_max_span:
            return await fleet_page(request, "retro.html", error=(
                f"expected a start before the end, at most {span(settings.web.retro_max_span)} apart"))
        from gpuwarden.app.replay import retro_html
        from gpuwarden.history.sources import ReplayError

        try:
            body = await asyncio.to_thread(retro_html, settings, since, until)
        except ReplayError as e:
            return await fleet_page(request, "retro.html", error=str(e))
        return HTMLResponse(body)

    async def login(request: Request) -> Response:
        target = _local_path(request.query_params.get("next", "/"))
        if request.method == "POST":
            if guard.login(_form(await read_body(request, FORM_LIMIT))):
                resp = RedirectResponse(target, 303)
                assert guard.session is not None
                resp.set_cookie(COOKIE, guard.session.decode(), httponly=True, samesite="strict",
                                secure=request.url.scheme == "https")
                return resp
            return templates.TemplateResponse(request, "login.html", {
                "basic": guard.basic, "next": target, "error": "those credentials are not the configured ones",
                "configured": guard.expected is not None}, status_code=401)
        return templates.TemplateResponse(request, "login.html", {
            "basic": guard.basic, "next": target, "error": "", "configured": guard.expected is not None})

    async def logout(request: Request) -> Response:
        resp = RedirectResponse("/", 303)
        resp.delete_cookie(COOKIE)
        return resp

    async def warm() -> None:
        """The spool's indexes, the engine state and the first page of alerts' charts, read once at
        start so that the first pages asked for need not (a failure here, the page says)."""
        assert reader is not None
        try:
            await asyncio.to_thread(reader.warm)
            await listing(1, "")
        except Exception as e:  # noqa: BLE001 - the pages report what is wrong when asked
            log.warning("gpuwarden web: reading the spool at start: %s", e)

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        """In cluster mode the topics are followed for as long as the console serves; over a spool,
        its indexes are built and the engine state loaded while the first page is asked for."""
        if reader is not None:
            warming = asyncio.create_task(warm())
            try:
                yield
            finally:
                await warming
                reader.close()
            return
        assert view is not None
        stop = asyncio.Event()
        task = asyncio.create_task(view.run(stop))
        try:
            yield
        finally:
            stop.set()
            await task

    return Starlette(lifespan=lifespan, routes=[
        Route("/", overview), Route("/alerts", alerts), Route("/classes", classes), Route("/services", services), Route("/scheduler", scheduler),
        Route("/silences", silences), Route("/silences", add_silence, methods=["POST"]),
        Route("/silences/{sid}/expire", expire_silence, methods=["POST"]),
        Route("/alerts/{fp}/ack", ack, methods=["POST"]), Route("/retro", retro),
        Route("/alerts/{fp}/remediation", remediation, methods=["GET", "POST"]),
        Route("/login", login, methods=["GET", "POST"]), Route("/logout", logout, methods=["POST"]),
        Mount("/static", StaticFiles(directory=str(HERE / "static")), name="static"),
    ])


def cmd_web(args: argparse.Namespace, settings: Settings) -> int:
    """``gpuwarden web``: serve until Ctrl-C; exit 1 when the address cannot be bound, 2 (ConfigError,
    said by the CLI) when ``--bind`` leaves loopback without credentials."""
    given = {k: v for k, v in (("bind", args.bind), ("port", args.port), ("source", args.source)) if v is not None}
    web = validate(WebConfig, {**settings.web.model_dump(exclude_unset=True), **given},
                   "web (config, --bind, --port, --source)")
    settings = settings.model_copy(update={"web": web})
    asgi = build_app(settings)
    try:
        sock = listen(settings.web.bind, settings.web.port, "web")
    except ListenError as e:
        print(f"gpuwarden web: {e}", file=sys.stderr)
        return 1
    host, port = sock.getsockname()[:2]
    source = f"Kafka {settings.kafka.bootstrap}" if settings.web.source == "kafka" else f"spool {settings.spool.path}"
    print(f"gpuwarden web: console at http://{f'[{host}]' if ':' in host else host}:{port}/ ({source})",
          file=sys.stderr, flush=True)

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        await serve(sock, asgi, stop, lifespan=True)

    asyncio.run(main())
    return 0
