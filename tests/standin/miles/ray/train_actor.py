from miles.utils import object_store


class TrainRayActor:
    """One data-parallel rank: builds its store at start, takes its rows of each step."""

    def __init__(self, args, dp_rank, dp_size):
        self.args, self.dp_rank, self.dp_size = args, dp_rank, dp_size
        object_store.init_instance(args)

    def get_rollout_data(self, data_ref, witness_info=None):
        from miles.backends.training_utils.data import get_rollout_data

        return get_rollout_data(self.args, data_ref, self.dp_rank, self.dp_size, witness_info)
