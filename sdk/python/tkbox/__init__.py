# SPDX-License-Identifier: Apache-2.0
"""tkbox: a Python client of the tkbox daemon (standard library only).

    from tkbox import Client
    c = Client()
    c.create_box("oci:./img:latest", name="job")
    r = c.exec("job", ["sh", "-c", "echo hi"])
    print(r.exit_code, r.stdout_text)
"""

from .client import Client, Diff, ExecResult, Execution, Secret
from .errors import (
    ApplyRefused,
    BadRequest,
    Conflict,
    ConnectError,
    Denied,
    Forbidden,
    InternalError,
    NotApproved,
    NotFound,
    ProtocolError,
    SignerUnreachable,
    TkboxError,
    TooMany,
    Unavailable,
)

__version__ = "0.1.0"

__all__ = [
    "Client",
    "Diff",
    "ExecResult",
    "Execution",
    "Secret",
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
]
