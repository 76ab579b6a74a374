# SPDX-License-Identifier: Apache-2.0
"""Typed errors of the tkbox daemon API (docs/integration.md, "Errors").

Every refusal the daemon answers is ``{"error": {"code", "message", ...}}``
with an HTTP status; :func:`error_from_reply` turns it into the subclass
of :class:`TkboxError` its code belongs to. A message never holds a secret
value: the daemon's messages name secrets, never their values, and this
module adds only the status, the code and the daemon's own words.
"""

__all__ = [
    "TkboxError",
    "BadRequest",
    "Forbidden",
    "Denied",
    "NotApproved",
    "NotFound",
    "Conflict",
    "TooMany",
    "SignerUnreachable",
    "Unavailable",
    "ApplyRefused",
    "InternalError",
    "ProtocolError",
    "ConnectError",
    "error_from_reply",
]

# Cap on the message kept from a daemon's answer (its own are at most 2 KiB).
_MAX_MESSAGE = 4096


class TkboxError(Exception):
    """A refusal from the daemon: HTTP status, error code, message and the whole error object (``body``)."""

    def __init__(self, status, code, message, body=None):
        self.status = status
        self.code = code
        self.message = message
        self.body = body if body is not None else {}
        super().__init__(message if status is None else "%s (HTTP %s %s)" % (message, status, code))

    def __repr__(self):
        return "%s(status=%r, code=%r, message=%r)" % (type(self).__name__, self.status, self.code, self.message)


class BadRequest(TkboxError):
    """400 ``bad_request`` / ``no_checkout``, 413 ``bad_request``: the request, a field or a value was refused."""


class Forbidden(TkboxError):
    """403 ``forbidden`` (this uid may not use the daemon), ``env_refused``, ``refused`` (the program word)."""


class Denied(TkboxError):
    """403 ``denied``: the signer (or a person) refused the command, or a file of an apply (``path``); nothing ran
    or was written. ``rule_ids``, ``decision_id``."""

    @property
    def rule_ids(self):
        v = self.body.get("rule_ids")
        if isinstance(v, list):
            return [r for r in v if isinstance(r, str)]
        rule = self.body.get("rule")  # an apply's refusal names its one rule
        return [rule] if isinstance(rule, str) else []

    @property
    def path(self):
        v = self.body.get("path")
        return v if isinstance(v, str) else None

    @property
    def decision_id(self):
        v = self.body.get("decision_id")
        return v if isinstance(v, str) else None


class NotApproved(TkboxError):
    """403 ``not_approved``: the decision was ``ask`` and a person rejected it or nobody answered in 2 minutes."""

    @property
    def approval_id(self):
        v = self.body.get("approval_id")
        return v if isinstance(v, str) else None


class NotFound(TkboxError):
    """404 ``no_such_box``, ``no_such_approval``, ``not_found``."""


class Conflict(TkboxError):
    """409: the box's or approval's state does not allow it (``exists``, ``box_running``, ``run_open``, ...)."""


class TooMany(TkboxError):
    """429 ``too_many_boxes``, ``too_many_execs``."""


class Unavailable(TkboxError):
    """503: ``create_failed``, ``not_recorded``, ``export_failed``, ``shutting_down``, ``box_lost``, ``busy``."""


class SignerUnreachable(Unavailable):
    """503 ``signer_unreachable``: the signer did not answer or did not decide; nothing ran."""


class ApplyRefused(TkboxError):
    """422 ``apply_refused``: a file of the patch was refused (``rule``, ``path``); nothing was written."""

    @property
    def rule(self):
        v = self.body.get("rule")
        return v if isinstance(v, str) else None

    @property
    def path(self):
        v = self.body.get("path")
        return v if isinstance(v, str) else None


class InternalError(TkboxError):
    """500 ``internal``, ``apply_partial``."""


class ProtocolError(TkboxError):
    """The daemon's answer broke the protocol (malformed, over a cap, cut): nothing of it was trusted."""

    def __init__(self, message):
        super().__init__(None, "protocol", message, {})


class ConnectError(TkboxError):
    """No daemon answers at the socket."""

    def __init__(self, message):
        super().__init__(None, "connect", message, {})


_BY_CODE = {
    "bad_request": BadRequest,
    "no_checkout": BadRequest,
    "forbidden": Forbidden,
    "env_refused": Forbidden,
    "refused": Forbidden,
    "denied": Denied,
    "not_approved": NotApproved,
    "no_such_box": NotFound,
    "no_such_approval": NotFound,
    "not_found": NotFound,
    "exists": Conflict,
    "box_not_running": Conflict,
    "box_running": Conflict,
    "box_creating": Conflict,
    "box_busy": Conflict,
    "run_open": Conflict,
    "run_closed": Conflict,
    "unrecorded": Conflict,
    "no_patch": Conflict,
    "apply_busy": Conflict,
    "already_answered": Conflict,
    "too_many_boxes": TooMany,
    "too_many_execs": TooMany,
    "signer_unreachable": SignerUnreachable,
    "create_failed": Unavailable,
    "not_recorded": Unavailable,
    "export_failed": Unavailable,
    "shutting_down": Unavailable,
    "box_lost": Unavailable,
    "busy": Unavailable,
    "apply_refused": ApplyRefused,
    "internal": InternalError,
    "apply_partial": InternalError,
}

_BY_STATUS = {
    400: BadRequest,
    413: BadRequest,
    403: Forbidden,
    404: NotFound,
    409: Conflict,
    422: ApplyRefused,
    429: TooMany,
    500: InternalError,
    503: Unavailable,
}


def _clean(text):
    """The daemon's message, cut to a bound, without control characters (it may reach a terminal)."""
    text = text[:_MAX_MESSAGE]
    return "".join(c if (c >= " " and c != "\x7f") or c == "\t" else "?" for c in text)


def error_from_reply(status, reply):
    """The TkboxError for a non-2xx answer: reply is the parsed JSON body (or None when it had none)."""
    err = reply.get("error") if isinstance(reply, dict) else None
    if not isinstance(err, dict):
        return TkboxError(status, None, "the daemon answered HTTP %d" % status, {})
    code = err.get("code") if isinstance(err.get("code"), str) else None
    message = err.get("message") if isinstance(err.get("message"), str) else "the daemon answered HTTP %d" % status
    cls = _BY_CODE.get(code) or _BY_STATUS.get(status) or TkboxError
    return cls(status, code, _clean(message), err)
