"""The classic split of a dict of Python lists (the plain-Python reference of the tests)."""

from miles.utils import object_store
from miles.utils.object_store import ValueSpec
from miles.utils.timer import Timer
from tests.reference_split import reference_split

ROLLOUT_DATA_VALUE_SPEC = {"tokens": ValueSpec(codec="typed_ragged")}


def split_train_data_by_dp_raw(args, data, *, dp_size):
    return reference_split(dict(data), dp_size, bool(args.balance_data))


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
