import importlib

from miles.ray.rollout.train_data_conversion import (
    ROLLOUT_DATA_VALUE_SPEC,
    split_train_data_by_dp,
)
from miles.utils import object_store


class RolloutManager:
    """Generates a step's train data with `args.rollout_function_path` and puts it for the ranks."""

    def __init__(self, args, train_parallel_config):
        self.args = args
        self.train_parallel_config = train_parallel_config
        module, name = args.rollout_function_path.rsplit(".", 1)
        self.generate_rollout = getattr(importlib.import_module(module), name)
        object_store.init_instance(args, contribute_segment=False)

    def generate(self, rollout_id):
        data = self.generate_rollout(self.args, rollout_id)
        if self.args.delay_split_train_data_by_dp:
            data_ref = object_store.get_instance().put(
                value=data, value_spec=ROLLOUT_DATA_VALUE_SPEC
            )
        else:
            data_ref = split_train_data_by_dp(self.args, data, self.train_parallel_config)
        return dict(data_ref=data_ref)
