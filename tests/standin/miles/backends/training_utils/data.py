from miles.utils.data import process_rollout_data


def get_rollout_data(args, rollout_data_ref, dp_rank, dp_size, witness_info=None):
    rollout_data, get_result = process_rollout_data(
        args, rollout_data_ref, dp_rank, dp_size, witness_info
    )
    with get_result:
        return rollout_data
