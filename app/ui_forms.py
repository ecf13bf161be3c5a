"""How the dashboard's forms say what is wrong: in the form's words, a label by its line."""

from __future__ import annotations

from markupsafe import Markup
from marshmallow.fields import Field

from app import input_rules
from services import csvjobs

# Fields whose every refusal means one thing, said the way the form would say it.
ONE_REASON = {
    "chunks": f"must be a whole number from 1 to {csvjobs.MAX_CHUNKS}",
    "priority": "must be a whole number from 0 to 255",
    "status": "not a job status: choose one from the list",
    "cursor": "not a page of this list: start again from the first page",
}
REQUIRED = Field.default_error_messages["required"]
# Reasons already said plainly stand: text PostgreSQL cannot store (a NUL, say), a filter
# given twice.
STANDING = frozenset(
    {input_rules.text_problem("\x00"), input_rules.text_problem("\ud800"), input_rules.GIVEN_TWICE}
)
# A refused label line is quoted up to this many characters.
QUOTED_LINE = 40


def labels_by_line(messages: dict, lines: list[tuple[int, str]]) -> dict:
    """A form's messages with the bad labels named by their line, as the user knows them
    (the schema names them by their place in a list)."""
    messages = dict(messages)
    by_item = messages.pop("label", None)
    if by_item is None:
        return messages
    return {
        **messages,
        "labels": [
            _on_line(*lines[index], message)
            for index, found in sorted(by_item.items())
            for message in found
        ],
    }


def _on_line(number: int, line: str, message: str) -> Markup:
    quoted = line if len(line) <= QUOTED_LINE else line[: QUOTED_LINE - 1] + "…"
    # Isolated: a bidi override in the line must not reorder the message around it.
    return Markup("line {} (<bdi>{}</bdi>): {}").format(number, quoted, message)


def in_form_words(fields: dict) -> dict[str, list[str]]:
    """Each refused field's messages in the words its form uses."""
    return {
        name: list(dict.fromkeys(_in_words(name, message) for message in messages))
        for name, messages in fields.items()
    }


def _in_words(name: str, message: str) -> str:
    if message in STANDING:
        return message
    if name in ONE_REASON:
        return ONE_REASON[name]
    return "required" if message == REQUIRED else message
