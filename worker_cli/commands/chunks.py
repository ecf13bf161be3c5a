"""chunkwise chunks and chunk: a job's chunks, and one chunk with its attempts."""

from __future__ import annotations

import argparse

from worker_cli import tables
from worker_cli.commands.arguments import Command, uuid_text
from worker_cli.commands.invocation import EXIT_HTTP_ERROR, EXIT_OK, Invocation


def list_chunks(cli: Invocation, args: argparse.Namespace) -> int:
    """List a job's chunks."""
    chunks = cli.call(cli.client.list_chunks, args.job)
    cli.print_json(chunks) if cli.as_json else cli.print(tables.chunk_table(chunks["chunks"]))
    return EXIT_OK


def show_chunk(cli: Invocation, args: argparse.Namespace) -> int:
    """Show one chunk, named by id or index, with its attempts."""
    chunk_id = args.chunk
    if chunk_id.isdigit():
        index = int(chunk_id)
        page = cli.call(cli.client.chunk_page, args.job, after=index - 1, limit=1)["chunks"]
        if not page or page[0]["index"] != index:
            cli.warn(
                f"chunkwise: not_found: job {args.job} has no chunk {index} "
                f"(trace id {cli.trace_id})"
            )
            return EXIT_HTTP_ERROR
        chunk_id = page[0]["id"]
    else:
        chunk_id = uuid_text(chunk_id)
    chunk = cli.call(cli.client.get_chunk, args.job, chunk_id)
    cli.print_json(chunk) if cli.as_json else cli.print(tables.chunk_detail(chunk))
    return EXIT_OK


def add_chunks(command: Command) -> None:
    """chunkwise chunks JOB."""
    sub = command("chunks", list_chunks, "list a job's chunks")
    sub.add_argument("job", type=uuid_text, metavar="JOB")


def add_chunk(command: Command) -> None:
    """chunkwise chunk JOB CHUNK."""
    sub = command("chunk", show_chunk, "show one chunk and its attempts")
    sub.add_argument("job", type=uuid_text, metavar="JOB")
    sub.add_argument("chunk", metavar="CHUNK", help="chunk id, or its index")
