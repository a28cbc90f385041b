"""The static types of the train-data dicts that ``to_train_data`` returns.

At run time a train-data dict is a plain ``dict`` (it pickles, saves with ``torch.save`` and
compares as one), and so are these names: ``TrainData``, ``RolloutTrainData`` and
``ActorTrainData`` are ``dict`` when the program runs. For a type checker they are
``dict[str, Any]`` with a typed ``__getitem__`` for every key the library defines
(:data:`arrow_split.KNOWN_COLUMNS`, the derived ``total_lengths``, and the layouts' ``partition``
and ``global_total_lengths``): ``data["tokens"]`` is ``list[list[int]]`` and
``data["rewards"][0]`` a ``float``, while a key of your own (declared with a
:class:`~arrow_split.ColumnSpec`) reads as ``Any``, and the dict passes wherever a
``dict[str, Any]`` is expected.

Why not a ``TypedDict``: a ``TypedDict`` refuses every key it does not list, and the one way to
allow extra keys (PEP 728 ``extra_items``) is unknown to mypy (2.4 included); it is also not
assignable to ``dict[str, Any]``, which user code that takes the train data as a dict expects.

A key you re-declare with another kind (``ColumnSpec("prompt", "per_sample_scalar", ...)``) is
still typed as the library's kind: ``cast`` it. Per-sample objects (``prompt``, ``metadata``,
...) are ``list[Any]``: a prompt may be a str or a list of chat messages.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal, overload

import numpy as np

__all__ = ["ActorTrainData", "RolloutTrainData", "TrainData"]

if TYPE_CHECKING:

    class TrainData(dict[str, Any]):
        """A batch's train data: what :meth:`RolloutBatch.to_train_data` returns."""

        # per-token: one list per sample
        @overload
        def __getitem__(self, key: Literal["tokens", "loss_masks"]) -> list[list[int]]: ...
        @overload
        def __getitem__(
            self,
            key: Literal["rollout_log_probs", "teacher_log_probs", "opd_reverse_kl"],
        ) -> list[list[float]]: ...
        @overload
        def __getitem__(self, key: Literal["rollout_sampling_masks"]) -> list[list[list[int]]]: ...
        # per-sample tensors: one numpy array per sample
        @overload
        def __getitem__(
            self, key: Literal["rollout_routed_experts", "rollout_indexer_topk"]
        ) -> list[np.ndarray]: ...
        # per-sample scalars
        @overload
        def __getitem__(
            self,
            key: Literal[
                "response_lengths",
                "round_number",
                "sample_indices",
                "rollout_ids",
                "rollout_mask_sums",
                "seq_witness_ids",
                "adapter_slots",
                "total_lengths",
                "partition",
                "global_total_lengths",
            ],
        ) -> list[int]: ...
        @overload
        def __getitem__(self, key: Literal["rewards", "raw_reward"]) -> list[float]: ...
        @overload
        def __getitem__(self, key: Literal["truncated", "is_padding"]) -> list[bool]: ...
        # per-sample objects
        @overload
        def __getitem__(self, key: Literal["weight_versions"]) -> list[list[str]]: ...
        @overload
        def __getitem__(
            self, key: Literal["prompt", "metadata", "multimodal_train_inputs"]
        ) -> list[Any]: ...
        # batch-global values
        @overload
        def __getitem__(self, key: Literal["dynamic_global_batch_size", "n_adapters"]) -> int: ...
        @overload
        def __getitem__(self, key: Literal["step_slots", "prompt_group_sizes"]) -> list[int]: ...
        @overload
        def __getitem__(self, key: Literal["step_adapter_names"]) -> list[str]: ...
        @overload
        def __getitem__(self, key: Literal["step_adapter_batch_sizes"]) -> dict[str, int]: ...
        # a key of your own
        @overload
        def __getitem__(self, key: str) -> Any: ...
        def __getitem__(self, key: str) -> Any:
            return super().__getitem__(key)

    class RolloutTrainData(TrainData):
        """A shard in the ``rollout`` layout: ``partition``, the batch's ``total_lengths``."""

    class ActorTrainData(TrainData):
        """A shard in the ``actor`` layout: with ``total_lengths`` and ``global_total_lengths``."""

else:
    TrainData = RolloutTrainData = ActorTrainData = dict
