"""The controller's API token: where it lives, how it is made and how clients read it.

The controller (``netstor controller``) makes the token on its first start: 32 random bytes
from :mod:`secrets` as URL-safe text, written to a new file that only its owner may read or
write (0600, in a 0700 folder), and reads it back on later starts. Clients -- the ``netstor
api`` command, the storage agents' heartbeats -- read the same file and send the token as
``Authorization: Bearer <token>``.

The file: ``--token-file`` (controller and clients), else ``$NETSTOR_TOKEN_FILE``, else
``$XDG_STATE_HOME/netstor/controller.token``, else ``~/.local/state/netstor/controller.token``.
A token file that others may read, that is not a regular file or that another user owns is
refused (:class:`TokenError`), as ssh refuses a private key others may read: whoever reads it
may change every table.

Only the standard library: the agents (a lower layer than the controller) import this module.
"""
from __future__ import annotations

import hmac
import os
import secrets
import stat
from pathlib import Path

__all__ = ["TokenError", "default_token_file", "load_or_create_token", "read_token",
           "token_matches", "auth_header"]

#: bytes of randomness in a new token (URL-safe base64: 43 characters)
TOKEN_BYTES = 32
#: a token file is a line of text; more than this is not one
_MAX_FILE = 4096


class TokenError(RuntimeError):
    """A token file that is missing, unsafe or malformed (the message says which and how to
    fix it)."""


def default_token_file() -> Path:
    """``$NETSTOR_TOKEN_FILE``, else ``$XDG_STATE_HOME/netstor/controller.token``, else
    ``~/.local/state/netstor/controller.token``."""
    env = os.environ.get("NETSTOR_TOKEN_FILE")
    if env:
        return Path(env).expanduser()
    state = os.environ.get("XDG_STATE_HOME")
    base = Path(state).expanduser() if state else Path.home() / ".local" / "state"
    return base / "netstor" / "controller.token"


def _check_and_read(path: Path) -> str:
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    except FileNotFoundError:
        raise
    except OSError as e:
        raise TokenError(f"token file {path}: cannot open ({e.strerror}; a symbolic link is "
                         "refused)") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise TokenError(f"token file {path} is not a regular file")
        if hasattr(os, "getuid") and st.st_uid != os.getuid():
            raise TokenError(f"token file {path} belongs to uid {st.st_uid}, not to this "
                             f"user (uid {os.getuid()})")
        if st.st_mode & 0o077:
            raise TokenError(f"token file {path} may be read by others (mode "
                             f"{stat.S_IMODE(st.st_mode):04o}): chmod 600 it, or delete it "
                             "and restart the controller for a new token")
        data = os.read(fd, _MAX_FILE + 1)
    finally:
        os.close(fd)
    if len(data) > _MAX_FILE:
        raise TokenError(f"token file {path} is longer than {_MAX_FILE} bytes")
    try:
        token = data.decode("ascii").strip()
    except UnicodeDecodeError:
        raise TokenError(f"token file {path} is not ASCII text") from None
    if len(token) < 16 or not token.isprintable() or " " in token:
        raise TokenError(f"token file {path} holds no token (16 or more printable characters "
                         "without spaces)")
    return token


def load_or_create_token(path=None) -> tuple[str, bool]:
    """The controller's side: ``(token, created)``. A missing file is created with a new token
    (0600; missing folders 0700); an existing one is checked and read."""
    path = Path(path).expanduser() if path else default_token_file()
    try:
        return _check_and_read(path), False
    except FileNotFoundError:
        pass
    try:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    except OSError as e:
        raise TokenError(f"token file {path}: cannot make its folder ({e.strerror})") from None
    token = secrets.token_urlsafe(TOKEN_BYTES)
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
    try:
        fd = os.open(path, flags, 0o600)
    except FileExistsError:                 # another controller made it first: use that one
        return _check_and_read(path), False
    except OSError as e:
        raise TokenError(f"token file {path}: cannot create ({e.strerror})") from None
    try:
        os.fchmod(fd, 0o600)                # whatever the umask
        os.write(fd, (token + "\n").encode())
        os.fsync(fd)
    finally:
        os.close(fd)
    return token, True


def read_token(path=None) -> str | None:
    """The clients' side: the token, or None when the file does not exist (a controller that
    has never started here). An unsafe or malformed file raises :class:`TokenError`."""
    path = Path(path).expanduser() if path else default_token_file()
    try:
        return _check_and_read(path)
    except FileNotFoundError:
        return None


def auth_header(path=None) -> dict:
    """``{"Authorization": "Bearer <token>"}`` from the token file, or ``{}`` without one: the
    headers a client adds to its requests (the agents' heartbeats)."""
    token = read_token(path)
    return {"Authorization": f"Bearer {token}"} if token else {}


def token_matches(header_value, token: str) -> bool:
    """Does an ``Authorization`` header carry ``token``? Compared in constant time."""
    if not header_value or not token:
        return False
    scheme, _, given = str(header_value).strip().partition(" ")
    if scheme.lower() != "bearer":
        return False
    return hmac.compare_digest(given.strip().encode("utf-8", "replace"), token.encode())
