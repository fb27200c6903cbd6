"""Host-side access to a netstor device: register client over an abstract transport."""
from .regs import (CsrClient, AsyncCsrClient, SchemaMismatch, IndirectError, schema_hash)

__all__ = ["CsrClient", "AsyncCsrClient", "SchemaMismatch", "IndirectError", "schema_hash"]
