"""The server's log format: readable text lines by default, JSON lines with
JOBNIK_LOG_FORMAT=json, for uvicorn's own loggers and jobnik's alike (`jobnik serve` hands this
configuration to uvicorn, which applies it in every server process)."""

from __future__ import annotations

import logging
from typing import Any, Literal

from jobnik.api.telemetry.requests import request_id

TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
JSON_FIELDS = "%(asctime)s %(levelname)s %(name)s %(process)d %(message)s"


class RequestIdFilter(logging.Filter):
    """Puts the id of the request being served (None outside one) on every record, so a JSON
    line of any logger names its request."""

    def filter(self, record: logging.LogRecord) -> bool:
        if not hasattr(record, "request_id"):
            record.request_id = request_id()
        return True


def log_config(log_format: Literal["text", "json"], level: str = "INFO") -> dict[str, Any]:
    """A `logging.config.dictConfig` for the server: every logger through one stderr handler in
    `log_format`; uvicorn's access log stays off (`jobnik.access` writes one line per request)."""
    formatter: dict[str, Any] = (
        {"()": "pythonjsonlogger.json.JsonFormatter", "fmt": JSON_FIELDS}
        if log_format == "json"
        else {"format": TEXT_FORMAT}
    )
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "filters": {"request_id": {"()": f"{__name__}.RequestIdFilter"}},
        "formatters": {"jobnik": formatter},
        "handlers": {
            "stderr": {
                "class": "logging.StreamHandler",
                "formatter": "jobnik",
                "filters": ["request_id"],
                "stream": "ext://sys.stderr",
            }
        },
        "loggers": {
            "uvicorn": {"handlers": ["stderr"], "level": level, "propagate": False},
            "uvicorn.access": {"handlers": [], "level": "WARNING", "propagate": False},
            "jobnik": {"handlers": ["stderr"], "level": level, "propagate": False},
            "jobnik.access": {"level": level},  # (also under "jobnik": no own handler)
        },
        "root": {"handlers": ["stderr"], "level": "WARNING"},
    }
