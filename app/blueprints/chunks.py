"""A job's chunks and their attempt history."""

from __future__ import annotations

from uuid import UUID

from flask import Blueprint, request

from app import auth, input_rules
from app.auth import current_principal
from app.runtime import get_runtime
from app.schemas import chunks as chunk_schemas
from services import chunks

bp = Blueprint("chunks", __name__, url_prefix="/api/v1/jobs/<uuid:job_id>/chunks")
bp.before_request(auth.users_only)

# Built once: building a schema deep-copies every field it declares.
CHUNK_PAGE_QUERY = chunk_schemas.ChunkPageQuerySchema()
CHUNK_LIST = chunk_schemas.ChunkListSchema()
CHUNK = chunk_schemas.ChunkSchema()


@bp.get("")
def list_chunks(job_id: UUID):
    """A page of a job's chunks in order, from the first past `after`."""
    query = CHUNK_PAGE_QUERY.load(input_rules.single_values(request.args))
    views = chunks.list_chunks(
        get_runtime(),
        current_principal(),
        job_id,
        after_index=query["after"],
        limit=query["limit"],
    )
    next_after = views[-1].task.chunk_index if views else query["after"]
    return CHUNK_LIST.dump({"chunks": views, "next_after": next_after})


@bp.get("/<uuid:chunk_id>")
def get_chunk(job_id: UUID, chunk_id: UUID):
    """One chunk with each attempt's worker, outcome and trace id."""
    view = chunks.get_chunk(get_runtime(), current_principal(), job_id, chunk_id)
    return CHUNK.dump(view)
