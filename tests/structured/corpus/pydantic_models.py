"""Pydantic models of the corpus (tests/structured/corpus; docs/architecture.md §8,
"Structured outputs"): the shapes applications hand to the openai SDK's
`client.beta.chat.completions.parse(..., response_format=Model)`. make_corpus.py turns each
into the strict JSON Schema the SDK sends (pydantic.json); the end-to-end tests parse the
server's answers back into these classes.

Covered: nested models, Optional, Literal, list[...], Enum, dict-free strict objects,
recursive models through $defs/$ref, date/datetime/UUID fields (format), constrained
fields (Field bounds, pattern)."""
from __future__ import annotations

import datetime
import enum
import uuid
from typing import Literal, Optional

from pydantic import BaseModel, Field


class Weather(BaseModel):
    city: str
    temperature_c: float
    conditions: Literal["sunny", "cloudy", "rain", "snow"]


class Color(str, enum.Enum):
    red = "red"
    green = "green"
    blue = "blue"


class Address(BaseModel):
    street: str
    city: str
    postal_code: Optional[str] = None
    country: Literal["US", "DE", "FR", "JP"]


class Person(BaseModel):
    name: str
    age: int = Field(ge=0, le=150)
    email: Optional[str] = None
    favourite_color: Color
    addresses: list[Address]


class Step(BaseModel):
    explanation: str
    output: str


class MathReasoning(BaseModel):
    steps: list[Step]
    final_answer: str


class TreeNode(BaseModel):
    value: int
    children: list[TreeNode]


class Comment(BaseModel):
    author: str
    text: str = Field(max_length=40)
    replies: Optional[list[Comment]] = None


class Event(BaseModel):
    id: uuid.UUID
    title: str = Field(min_length=1, max_length=30)
    day: datetime.date
    starts_at: datetime.datetime
    attendees: list[str] = Field(max_length=3)


class Severity(enum.IntEnum):
    low = 1
    medium = 2
    high = 3


class Ticket(BaseModel):
    kind: Literal["bug"]
    severity: Severity
    code: str = Field(pattern=r"^[A-Z]{3}-[0-9]{1,4}$")
    tags: list[Literal["ui", "backend", "docs"]]
    assignee: Optional[Person] = None


class Entity(BaseModel):
    text: str
    label: Literal["PERSON", "ORG", "LOC", "DATE"]


class Extraction(BaseModel):
    entities: list[Entity]
    sentiment: Literal["positive", "neutral", "negative"]
    confidence: float = Field(ge=0, le=1)


class Flags(BaseModel):
    enabled: bool
    note: Optional[str]
    count: Optional[int]


class Operation(BaseModel):
    op: Literal["add", "mul"]
    args: list[Expression]


class Expression(BaseModel):
    value: Optional[int] = None
    operation: Optional[Operation] = None


class Verdict(BaseModel):
    label: Literal["spam", "ham"]
    confidence: int = Field(ge=0, le=100)
    flagged: bool


class Booking(BaseModel):
    guest: str = Field(max_length=12)
    nights: int = Field(ge=1, le=14)
    room: Literal["single", "double", "suite"]
    check_in: datetime.date
    breakfast: Optional[bool]


# Every output of these is bounded: the grammar closes, EOS follows, finish_reason is
# "stop" (the SDK's parse() refuses a "length" finish even when the JSON is whole).
BOUNDED = [Verdict, Booking]
MODELS = [Weather, Person, MathReasoning, TreeNode, Comment, Event, Ticket, Extraction, Flags, Expression, Verdict, Booking]
for _m in MODELS + [Address, Step, Entity, Operation]:
    _m.model_rebuild()
