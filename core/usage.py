"""Usage: what a run used of its engine's model (input, output and cache tokens) and what that
cost, added up from the engine's own usage records in the run's output.

Owns turning an engine's `usage` events into one run's figures (per-turn records as they come;
Codex's running thread totals as differences to the thread's figures before), pricing tokens the
engine put no cost on from the price table, and sums over runs. Parsing a line is the engine's;
the price table is core.settings'; recording a run's figures and showing them is core.views'.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from core.engines import codex, engine_for
from core.engines.base import EngineEvent

TOKEN_FIELDS = ("input", "output", "cache_read", "cache_write")
PER_TOKENS = 1_000_000  # prices are in USD per million tokens

SOURCE_ENGINE = "engine"
SOURCE_PRICES = "price table"

# The model an engine runs when its settings name none, for pricing its tokens.
DEFAULT_MODELS = {"codex": codex.DEFAULT_MODEL}

Tokens = dict[str, int]
Prices = Mapping[str, Mapping[str, float]]


@dataclass
class Usage:
    """Tokens and cost of one run or a sum of runs. `cost_usd` is what is known; `unpriced`
    counts tokens that had neither an engine's cost nor a price in the table."""

    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    cost_usd: float = 0.0
    unpriced_tokens: int = 0
    sources: set[str] = field(default_factory=set)
    models: set[str] = field(default_factory=set)
    runs: int = 0

    @property
    def total_tokens(self) -> int:
        return (
            self.input_tokens
            + self.output_tokens
            + self.cache_read_tokens
            + self.cache_write_tokens
        )

    def add_tokens(self, tokens: Tokens) -> None:
        self.input_tokens += tokens.get("input", 0)
        self.output_tokens += tokens.get("output", 0)
        self.cache_read_tokens += tokens.get("cache_read", 0)
        self.cache_write_tokens += tokens.get("cache_write", 0)

    def add(self, other: Usage) -> None:
        self.input_tokens += other.input_tokens
        self.output_tokens += other.output_tokens
        self.cache_read_tokens += other.cache_read_tokens
        self.cache_write_tokens += other.cache_write_tokens
        self.cost_usd += other.cost_usd
        self.unpriced_tokens += other.unpriced_tokens
        self.sources |= other.sources
        self.models |= other.models
        self.runs += other.runs

    def to_json(self) -> dict[str, Any]:
        return {
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "cache_read_tokens": self.cache_read_tokens,
            "cache_write_tokens": self.cache_write_tokens,
            "total_tokens": self.total_tokens,
            # None: nothing is known of a cost (no tokens, or none of them priced)
            "cost_usd": round(self.cost_usd, 6) if self.sources else None,
            "cost_complete": self.unpriced_tokens == 0,
            "unpriced_tokens": self.unpriced_tokens,
            "cost_source": " and ".join(sorted(self.sources)) or None,
            "models": sorted(self.models),
            "runs": self.runs,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Usage:
        return cls(
            input_tokens=int(data.get("input_tokens") or 0),
            output_tokens=int(data.get("output_tokens") or 0),
            cache_read_tokens=int(data.get("cache_read_tokens") or 0),
            cache_write_tokens=int(data.get("cache_write_tokens") or 0),
            cost_usd=float(data.get("cost_usd") or 0.0),
            unpriced_tokens=int(data.get("unpriced_tokens") or 0),
            sources=set(str(data["cost_source"]).split(" and "))
            if data.get("cost_source")
            else set(),
            models=set(data.get("models") or ()),
            runs=int(data.get("runs") or 0),
        )


def total(usages: Iterable[Usage]) -> Usage:
    out = Usage()
    for usage in usages:
        out.add(usage)
    return out


def price_for(model: str | None, prices: Prices) -> Mapping[str, float] | None:
    """The table's price of `model`: its own entry, or the longest entry it starts with
    followed by `-` (a dated release such as claude-sonnet-4-5-20250929)."""
    if not model:
        return None
    if model in prices:
        return prices[model]
    best = max((name for name in prices if model.startswith(name + "-")), key=len, default=None)
    return prices[best] if best is not None else None


def cost_of(tokens: Tokens, price: Mapping[str, float]) -> float:
    return sum(tokens.get(f, 0) * float(price.get(f, 0.0)) for f in TOKEN_FIELDS) / PER_TOKENS


def _tokens_of(event: EngineEvent) -> Tokens:
    raw = event.data.get("tokens")
    raw = raw if isinstance(raw, dict) else {}
    return {f: int(raw.get(f) or 0) for f in TOKEN_FIELDS}


def _difference(now: Tokens, before: Tokens) -> Tokens:
    return {f: max(0, now.get(f, 0) - before.get(f, 0)) for f in TOKEN_FIELDS}


def _not_below(now: Tokens, before: Tokens) -> bool:
    return all(now.get(f, 0) >= before.get(f, 0) for f in TOKEN_FIELDS)


def usage_of_output(
    engine: str,
    chunks: Iterable[str],
    *,
    prices: Prices,
    model: str | None = None,
    threads: Mapping[str, Tokens] | None = None,
    parent_session: str | None = None,
) -> tuple[Usage, dict[str, Tokens]]:
    """One run's usage from its stdout, chunk by chunk as it was stored (each chunk holds whole
    lines, so two attempts' lines are never read as one).

    `model` prices tokens when the engine names none; `threads` holds the running totals each
    engine session had before this run (for engines whose figures are cumulative), and
    `parent_session` the session a fork started from, whose totals a fork's first figures may
    carry on. Returns the usage and each session's running totals at the run's end."""
    eng = engine_for(engine)  # a new instance: parsing keeps state along one stream
    usage = Usage(runs=1)
    seen: dict[str, Tokens] = {}
    before_run = dict(threads or {})
    session = ""
    current_model = model
    for chunk in chunks:
        for line in chunk.splitlines():
            for event in eng.parse_line(line):
                if event.kind == "session":
                    session = str(event.data.get("session_id") or session)
                    if event.data.get("model"):
                        current_model = str(event.data["model"])
                elif event.kind == "usage":
                    tokens = _tokens_of(event)
                    if event.data.get("cumulative"):
                        before = seen.get(session) or before_run.get(session)
                        if before is None and parent_session in before_run:
                            parent = before_run[parent_session]
                            before = parent if _not_below(tokens, parent) else None
                        seen[session] = tokens
                        tokens = _difference(tokens, before or {})
                    _count(usage, event.data, tokens, current_model, prices)
    return usage, seen


def _count(
    usage: Usage, data: Mapping[str, Any], tokens: Tokens, model: str | None, prices: Prices
) -> None:
    usage.add_tokens(tokens)
    models = [str(m) for m in data.get("models") or ()] or ([model] if model else [])
    usage.models.update(models)
    cost = data.get("cost_usd")
    if isinstance(cost, (int, float)) and not isinstance(cost, bool):
        usage.cost_usd += float(cost)
        usage.sources.add(SOURCE_ENGINE)
        return
    amount = sum(tokens.values())
    if not amount:
        return
    price = price_for(models[0], prices) if len(models) == 1 else None
    if price is None:
        usage.unpriced_tokens += amount
        return
    usage.cost_usd += cost_of(tokens, price)
    usage.sources.add(SOURCE_PRICES)


# -- in words, for the CLI and the GUI ------------------------------------------------------------


def count_text(n: int) -> str:
    """12 · 3.4k · 1.2M tokens."""
    if n < 1000:
        return str(n)
    if n < 1_000_000:
        return f"{n / 1000:.1f}k"
    return f"{n / 1_000_000:.1f}M"


def cost_text(figures: Mapping[str, Any]) -> str:
    """`$0.0123`, `$0.0123 + 4.1k unpriced tokens`, `no cost known` or `—` (nothing used)."""
    cost = figures.get("cost_usd")
    unpriced = int(figures.get("unpriced_tokens") or 0)
    if cost is None:
        return f"{count_text(unpriced)} unpriced tokens" if unpriced else "—"
    amount = f"${cost:.4f}" if cost < 1 else f"${cost:,.2f}"
    return amount + (f" + {count_text(unpriced)} unpriced tokens" if unpriced else "")


def tokens_text(figures: Mapping[str, Any]) -> str:
    """`11.6k in · 150 out · 0 cache read · 0 cache write`."""
    return " · ".join(
        f"{count_text(int(figures.get(f + '_tokens') or 0))} {label}"
        for f, label in (
            ("input", "in"),
            ("output", "out"),
            ("cache_read", "cache read"),
            ("cache_write", "cache write"),
        )
    )


def summary_text(figures: Mapping[str, Any]) -> str:
    """One line: the cost, then the tokens (`—` when nothing was used)."""
    if not figures.get("total_tokens") and figures.get("cost_usd") is None:
        return "—"
    return f"{cost_text(figures)}  ({tokens_text(figures)})"
