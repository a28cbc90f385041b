from miles.ray.rollout.train_data_conversion import split_train_data_by_dp_raw
from miles.utils import object_store


def process_rollout_data(args, rollout_data_ref, dp_rank, dp_size, witness_info):
    from miles.ray.rollout.train_data_conversion import process_rollout_data_shard

    store = object_store.get_instance()
    if args.delay_split_train_data_by_dp:
        get_result = store.get(rollout_data_ref)
        raw = get_result.value
        if witness_info is not None:
            raw = {**raw, "seq_witness_ids": witness_info.witness_ids}
        rollout_data = split_train_data_by_dp_raw(args, raw, dp_size=dp_size)[dp_rank]
    else:
        get_result = store.get(rollout_data_ref[dp_rank])
        rollout_data = dict(get_result.value)
    return process_rollout_data_shard(args, rollout_data), get_result
