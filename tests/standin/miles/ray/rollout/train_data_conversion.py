"""The classic split of a dict of Python lists: plan, then list indexing per rank and key."""

from miles.utils import object_store
from miles.utils.object_store import ValueSpec
from miles.utils.timer import Timer
from tests.reference_plan import reference_partitions
from tests.reference_split import BATCH_GLOBAL_KEYS

ROLLOUT_DATA_VALUE_SPEC = {"tokens": ValueSpec(codec="typed_ragged")}


def split_train_data_by_dp_raw(args, data, *, dp_size):
    total_lengths = [len(tokens) for tokens in data["tokens"]]
    partitions = reference_partitions(total_lengths, dp_size, bool(args.balance_data))
    shards = []
    for partition in partitions:
        shard = {
            key: value if key in BATCH_GLOBAL_KEYS else [value[row] for row in partition]
            for key, value in data.items()
        }
        shard["partition"] = list(partition)
        shard["total_lengths"] = total_lengths
        shards.append(shard)
    return shards


def split_train_data_by_dp(args, data, train_parallel_config):
    shards = split_train_data_by_dp_raw(args, data, dp_size=train_parallel_config["dp_size"])
    store = object_store.get_instance()
    return [store.put(value=shard, value_spec=ROLLOUT_DATA_VALUE_SPEC) for shard in shards]


def split_train_data_by_dp_scheduled_raw(args, data, *, train_parallel_config):
    raise NotImplementedError("the stand-in has no rollout-side schedule")


def can_schedule_on_rollout_side(args, data, train_parallel_config):
    return False


def process_rollout_data_shard(args, rollout_data):
    total_lengths = rollout_data["total_lengths"]
    Timer().seq_lens = total_lengths
    partition = rollout_data.pop("partition")
    rollout_data["total_lengths"] = [total_lengths[row] for row in partition]
    return rollout_data
