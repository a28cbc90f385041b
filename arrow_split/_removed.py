"""Names removed from the public classes, each with what replaced it (CHANGELOG.md).

A removed attribute raises an ``AttributeError`` that names the release and the replacement,
so code written for an older release fails with the fix instead of a bare name.
"""

from __future__ import annotations

__all__ = ["REMOVED", "removed_name_message"]

REMOVED: dict[tuple[str, str], tuple[str, str]] = {
    ("Shard", "layout"): (
        "0.3.0",
        "a shard stores no layout: pass it each time, `shard.to_train_data(layout='actor')` "
        "or `layout='rollout'`",
    ),
    ("Shard", "with_layout"): (
        "0.3.0",
        "`shard.with_layout(layout).to_train_data()` is `shard.to_train_data(layout=layout)`",
    ),
    ("Shard", "make_plan"): (
        "0.3.0",
        "a shard is not a batch: plan the whole batch with "
        "`batch.make_plan(dp_size, balance_data=...)` (or re-plan this shard's rows with "
        "`shard.rows.make_plan(...)`)",
    ),
}
"""``(class name, attribute)`` -> ``(release that removed it, what to use instead)``."""


def removed_name_message(owner: str, name: str) -> str:
    """The ``AttributeError`` message for ``owner.name``: what replaced it, if it was removed."""
    removed = REMOVED.get((owner, name))
    if removed is None:
        return f"{owner!r} object has no attribute {name!r}"
    release, instead = removed
    return f"`{owner}.{name}` was removed in {release}; {instead} (see CHANGELOG.md)"
