"""The ``web:`` section: where ``gpuwarden web`` listens and the credentials it asks for."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from gpuwarden.config import SecretRef, Section
from gpuwarden.units import Duration
from gpuwarden.notifiers.config import check_listener_auth
from gpuwarden.notifiers.receivers import BasicAuth


class WebConfig(Section):
    """The console reads the notifier's state; silences and acks need credentials, always."""

    bind: str = "127.0.0.1"
    """Loopback by default; any other address needs ``token`` or ``basic_auth``."""
    port: int = Field(default=8470, ge=0, le=65535)
    """0: any free port (the address is printed at start)."""
    token: SecretRef | None = None
    """A bearer token (sent as ``Authorization: Bearer``, or typed once into the sign-in page)."""
    basic_auth: BasicAuth | None = None
    """HTTP basic auth instead of a token."""
    source: Literal["spool", "kafka"] = "spool"
    """Where the pages come from: ``spool`` (standalone: what ``gpuwarden run`` writes) or
    ``kafka`` (cluster mode: the ``alerts`` topic, ``control`` with ``notify.control: kafka``,
    and the newest ``gpu.samples``, read by the console itself; see docs/web.md)."""
    retro_max_span: Duration = 7 * 86400.0
    """The longest time range a retro report is generated for from the console."""

    @model_validator(mode="after")
    def _auth_off_loopback(self) -> WebConfig:
        check_listener_auth(self.bind, self.token, self.basic_auth, "read the fleet")
        return self
