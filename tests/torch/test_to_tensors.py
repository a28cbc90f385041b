"""arrow_split.torch: every layout against a plain-Python reference, dtypes, the memory rule."""

from __future__ import annotations

import logging
import os
import pickle
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from arrow_split import (
    ColumnSpec,
    OptionError,
    OptionTypeError,
    RolloutBatch,
    SchemaError,
    Shard,
    split_train_data_by_dp_raw,
    take_rows,
)
from arrow_split._codecs._base import numpy_dtype
from arrow_split.testing.strategies import train_data

torch = pytest.importorskip("torch")

from arrow_split.torch import TensorLayout, to_tensors  # noqa: E402
from tests.error_facts import assert_facts, raises_facts  # noqa: E402

pytestmark = pytest.mark.torch

LAYOUTS: tuple[TensorLayout, ...] = ("per_sample", "packed", "padded", "nested")
RAGGED = ("tokens", "loss_masks", "rollout_log_probs", "rollout_routed_experts")
LAYERS, TOP_K = 3, 2
ROOT = Path(__file__).resolve().parents[2]


def make_train_data(num_samples: int = 8, seed: int = 0) -> dict[str, Any]:
    rng = np.random.default_rng(seed)
    totals = rng.integers(1, 12, num_samples)
    responses = [int(rng.integers(0, total + 1)) for total in totals]
    return {
        "tokens": [rng.integers(0, 50_000, total).tolist() for total in totals],
        "response_lengths": responses,
        "loss_masks": [rng.integers(0, 2, n).tolist() for n in responses],
        "rollout_log_probs": [(-rng.random(n)).astype(np.float32).tolist() for n in responses],
        "rewards": rng.random(num_samples).tolist(),
        "truncated": [bool(flag) for flag in rng.integers(0, 2, num_samples)],
        "rollout_routed_experts": [
            rng.integers(0, 64, (total - 1, LAYERS, TOP_K)).astype(np.int32) for total in totals
        ],
        "prompt": [f"prompt {i}" for i in range(num_samples)],
        "raw_reward": rng.random(num_samples).tolist(),
    }


@pytest.fixture(scope="module")
def batch() -> RolloutBatch:
    return RolloutBatch.from_train_data(make_train_data())


def rows_of(source: RolloutBatch | Shard) -> RolloutBatch:
    """A shard's rows, or a whole batch as it is."""
    return source.rows if isinstance(source, Shard) else source


def sources(batch: RolloutBatch) -> list[RolloutBatch | Shard]:
    """The whole batch and the shards of both split methods (their buffers come from `take`)."""
    strided = split_train_data_by_dp_raw(batch, 3, balance_data=False)
    balanced = split_train_data_by_dp_raw(batch, 2, balance_data=True)
    return [batch, *strided, *balanced]


def reference(
    shard: RolloutBatch | Shard, token_dtype: Any = np.int64, mask_dtype: Any = np.int64
) -> dict[str, Any]:
    """Per-sample numpy arrays (ragged columns) or one array (scalars) from `to_train_data`."""
    train_data = rows_of(shard).to_train_data()
    expected: dict[str, Any] = {}
    for name, spec in shard.specs.items():
        if spec.kind == "per_sample_tensor":
            expected[name] = [np.asarray(sample) for sample in train_data[name]]  # type: ignore[attr-defined]
        elif spec.kind == "per_token":
            dtype = numpy_dtype(spec.value_type)
            dtype = token_dtype if name == "tokens" else mask_dtype if spec.flag else dtype
            expected[name] = [np.asarray(s, dtype=dtype) for s in train_data[name]]  # type: ignore[attr-defined]
        elif spec.kind == "per_sample_scalar":
            expected[name] = np.asarray(train_data[name], dtype=numpy_dtype(spec.value_type))
    return expected


def samples_of(tensors: dict[str, Any], layout: str, name: str, lengths: list[int]) -> list[Any]:
    """One tensor per sample, whatever the layout."""
    value = tensors[name]
    if layout == "per_sample":
        return list(value)
    if layout == "nested":
        return list(value.unbind())
    if layout == "packed":
        return list(torch.split(value, lengths))
    return [row[:length] for row, length in zip(value, lengths, strict=True)]


def assert_same(tensor: Any, expected: np.ndarray) -> None:
    """Same dtype, shape and bytes."""
    assert tensor.dtype == torch.from_numpy(np.empty(0, expected.dtype)).dtype
    assert tuple(tensor.shape) == expected.shape
    assert tensor.cpu().contiguous().numpy().tobytes() == expected.tobytes()


def assert_matches_reference(
    shard: RolloutBatch | Shard, tensors: dict[str, Any], layout: str, **dtypes: Any
) -> None:
    expected = reference(shard, **dtypes)
    assert list(tensors)[: len(expected)] == list(expected)
    for name, values in expected.items():
        if isinstance(values, np.ndarray):
            assert_same(tensors[name], values)
            continue
        lengths = [len(sample) for sample in values]
        got = samples_of(tensors, layout, name, lengths)
        assert len(got) == len(values) == shard.num_samples
        for tensor, sample in zip(got, values, strict=True):
            assert_same(tensor, sample)


def writable_tensors(tensors: dict[str, Any]) -> list[Any]:
    """Every tensor the caller could write into (nested tensors through their values)."""
    found = []
    for value in tensors.values():
        found.extend(value if isinstance(value, list) else [value])
    return [tensor.values() if tensor.is_nested else tensor for tensor in found]


def read_only_copy(shard: Shard, how: str) -> Shard:
    """The shard as another process reads it from shared memory: immutable Arrow buffers."""
    if how == "ipc":
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, shard.record_batch.schema) as writer:
            writer.write_batch(shard.record_batch)
        frozen = memoryview(sink.getvalue().to_pybytes())
        record_batch = pa.ipc.open_stream(pa.py_buffer(frozen)).read_next_batch()
        return Shard(
            RolloutBatch(record_batch, shard.specs, shard.batch_globals),
            partition=shard.partition,
            batch_total_lengths=shard.batch_total_lengths,
        )
    buffers: list[pickle.PickleBuffer] = []
    payload = pickle.dumps(shard, protocol=5, buffer_callback=buffers.append)
    loaded: Shard = pickle.loads(
        payload, buffers=[memoryview(bytes(buffer.raw())) for buffer in buffers]
    )
    return loaded


def data_address(array: pa.Array) -> int:
    while pa.types.is_large_list(array.type) or pa.types.is_fixed_size_list(array.type):
        array = array.values
    return int(array.buffers()[1].address)


# --- values ------------------------------------------------------------------------------------


@pytest.mark.parametrize("layout", LAYOUTS)
def test_every_layout_matches_reference(batch: RolloutBatch, layout: TensorLayout) -> None:
    for shard in sources(batch):
        assert_matches_reference(shard, to_tensors(shard, layout=layout), layout)


def test_default_layout_is_per_sample(batch: RolloutBatch) -> None:
    tensors = to_tensors(batch)
    assert isinstance(tensors["tokens"], list)
    assert_matches_reference(batch, tensors, "per_sample")


def test_objects_and_globals_are_left_out(batch: RolloutBatch) -> None:
    for layout in LAYOUTS:
        tensors = to_tensors(batch, layout=layout)
        assert "prompt" not in tensors
        assert "raw_reward" not in tensors


def test_packed_cu_seqlens(batch: RolloutBatch) -> None:
    for shard in sources(batch):
        tensors = to_tensors(shard, layout="packed")
        train_data = rows_of(shard).to_train_data()
        for key, name in [
            ("cu_seqlens", "tokens"),
            ("response_cu_seqlens", "loss_masks"),
            ("rollout_routed_experts_cu_seqlens", "rollout_routed_experts"),
        ]:
            cu_seqlens = tensors[key]
            assert cu_seqlens.dtype == torch.int32
            lengths = [len(sample) for sample in train_data[name]]  # type: ignore[attr-defined]
            assert cu_seqlens.tolist() == np.concatenate([[0], np.cumsum(lengths)]).tolist()
            assert tensors[name].shape[0] == cu_seqlens[-1]
        assert tensors["rollout_routed_experts"].shape[1:] == (LAYERS, TOP_K)
        assert tensors["tokens"].dtype == torch.int64


def test_packed_keys_follow_the_schema_not_the_data() -> None:
    """A whole batch without response columns has no `response_cu_seqlens`; an empty one has."""
    plain = RolloutBatch.from_train_data({"tokens": [[1, 2], [3]]})
    assert set(to_tensors(plain, layout="packed")) == {"tokens", "cu_seqlens"}
    batch = RolloutBatch.from_train_data(make_train_data())
    empty = take_rows(batch, np.array([], dtype=np.int64))
    packed = to_tensors(empty, layout="packed")
    for key in ("cu_seqlens", "response_cu_seqlens", "rollout_routed_experts_cu_seqlens"):
        assert packed[key].tolist() == [0]
        assert packed[key].dtype == torch.int32


@pytest.mark.parametrize("multiple", [None, 1, 4, 16])
def test_padded_shapes_and_masks(batch: RolloutBatch, multiple: int | None) -> None:
    for shard in sources(batch):
        tensors = to_tensors(shard, layout="padded", pad_to_multiple_of=multiple, pad_value=-1)
        train_data = rows_of(shard).to_train_data()
        n = shard.num_samples
        for name, mask_key in [("tokens", "attention_mask"), ("loss_masks", "response_mask")]:
            lengths = [len(sample) for sample in train_data[name]]  # type: ignore[attr-defined]
            width = max(lengths, default=0)
            if multiple is not None:
                width = -(-width // multiple) * multiple
            mask = tensors[mask_key]
            assert mask.dtype == torch.bool
            assert mask.shape == (n, width) == tensors[name].shape
            assert mask.sum(dim=1).tolist() == lengths
            assert mask.tolist() == [[j < length for j in range(width)] for length in lengths]
        attention, response = tensors["attention_mask"], tensors["response_mask"]
        assert (tensors["tokens"][~attention] == -1).all()
        assert (tensors["rollout_log_probs"][~response] == -1.0).all()
        assert (tensors["loss_masks"][~response] == 0).all()  # a flag pads with 0, never -1
        experts = tensors["rollout_routed_experts"]
        rows = [len(sample) for sample in train_data["rollout_routed_experts"]]  # type: ignore[attr-defined]
        width = max(rows, default=0) if multiple is None else -(-max(rows) // multiple) * multiple
        assert experts.shape == (n, width, LAYERS, TOP_K)
        for row, count in zip(experts, rows, strict=True):
            assert (row[count:] == -1).all()


def test_tensor_column_in_every_layout(batch: RolloutBatch) -> None:
    shard = split_train_data_by_dp_raw(batch, 2, balance_data=True)[1]
    expected = reference(shard)["rollout_routed_experts"]
    per_sample = to_tensors(shard)["rollout_routed_experts"]
    assert [tuple(t.shape) for t in per_sample] == [sample.shape for sample in expected]
    packed = to_tensors(shard, layout="packed")["rollout_routed_experts"]
    assert tuple(packed.shape) == (sum(len(s) for s in expected), LAYERS, TOP_K)
    assert packed.dtype == torch.int32
    nested = to_tensors(shard, layout="nested")["rollout_routed_experts"]
    assert nested.is_nested
    assert nested.shape[0] == shard.num_samples
    assert tuple(nested.shape[2:]) == (LAYERS, TOP_K)
    for tensor, sample in zip(nested.unbind(), expected, strict=True):
        assert_same(tensor, sample)


def test_nested_columns_of_one_length_group_share_the_jagged_dim(batch: RolloutBatch) -> None:
    tensors = to_tensors(batch, layout="nested", mask_dtype=torch.float32)
    masks, log_probs = tensors["loss_masks"], tensors["rollout_log_probs"]
    assert masks.shape == log_probs.shape
    product = (masks * log_probs).values()
    assert torch.equal(product, masks.values() * log_probs.values())
    assert tensors["tokens"].shape[0] == batch.num_samples


@pytest.mark.parametrize("layout", LAYOUTS)
def test_empty_shard(batch: RolloutBatch, layout: TensorLayout) -> None:
    empty = take_rows(batch, np.array([], dtype=np.int64))
    tensors = to_tensors(empty, layout=layout, pad_to_multiple_of=8)
    assert_matches_reference(empty, tensors, layout)
    assert tensors["rewards"].shape == (0,)
    experts = tensors["rollout_routed_experts"]
    if layout == "per_sample":
        assert experts == []
    elif layout == "packed":
        assert tuple(experts.shape) == (0, LAYERS, TOP_K)
    elif layout == "padded":
        assert tuple(experts.shape) == (0, 0, LAYERS, TOP_K)
        assert tuple(tensors["attention_mask"].shape) == (0, 0)
    else:
        assert experts.shape[0] == 0


# --- dtypes and device -------------------------------------------------------------------------


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize(
    ("token_dtype", "mask_dtype"),
    [
        ("int64", "int64"),
        ("int32", "bool"),
        ("int32", "uint8"),
        ("int64", "int32"),
        ("int64", "float32"),
    ],
)
def test_dtypes(
    batch: RolloutBatch, layout: TensorLayout, token_dtype: str, mask_dtype: str
) -> None:
    shard = split_train_data_by_dp_raw(batch, 2, balance_data=False)[0]
    tensors = to_tensors(
        shard,
        layout=layout,
        token_dtype=getattr(torch, token_dtype),
        mask_dtype=getattr(torch, mask_dtype),
    )
    assert_matches_reference(
        shard, tensors, layout, token_dtype=np.dtype(token_dtype), mask_dtype=np.dtype(mask_dtype)
    )
    assert tensors["rewards"].dtype == torch.float64
    assert tensors["truncated"].dtype == torch.bool
    assert tensors["response_lengths"].dtype == torch.int64


DEVICES = ["cpu", torch.device("cpu")]
if torch.cuda.is_available():
    DEVICES += ["cuda", torch.device("cuda:0")]


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("device", DEVICES, ids=str)
def test_device(batch: RolloutBatch, layout: TensorLayout, device: Any) -> None:
    shard = split_train_data_by_dp_raw(batch, 2, balance_data=True)[0]
    tensors = to_tensors(shard, layout=layout, device=device)
    wanted = torch.device(device).type
    for tensor in writable_tensors(tensors):
        assert tensor.device.type == wanted
    assert_matches_reference(shard, tensors, layout)


# --- memory ------------------------------------------------------------------------------------


def test_per_sample_views_share_one_storage(batch: RolloutBatch) -> None:
    for shard in sources(batch):
        tensors = to_tensors(shard)
        for name in RAGGED:
            pointers = {t.untyped_storage().data_ptr() for t in tensors[name]}
            assert len(pointers) == 1
            starts = [t.storage_offset() for t in tensors[name]]
            sizes = [t.numel() for t in tensors[name]]
            assert starts == np.concatenate([[0], np.cumsum(sizes)[:-1]]).tolist()[: len(starts)]


ZERO_COPY = {"token_dtype": torch.int32, "mask_dtype": torch.uint8, "id_dtype": None}


@pytest.mark.parametrize("layout", LAYOUTS)
def test_private_buffers_are_shared_not_copied(batch: RolloutBatch, layout: TensorLayout) -> None:
    shard = split_train_data_by_dp_raw(batch, 4, balance_data=True)[1]
    tensors = to_tensors(shard, layout=layout, **ZERO_COPY)
    for name in [*RAGGED, "rewards", "response_lengths"]:
        tensor = tensors[name]
        if layout == "per_sample" and isinstance(tensor, list):
            pointer = tensor[0].untyped_storage().data_ptr()
        elif layout == "nested" and tensor.is_nested:
            pointer = tensor.values().data_ptr()
        elif layout == "padded" and name in RAGGED:
            continue  # padding always allocates
        else:
            pointer = tensor.data_ptr()
        assert pointer == data_address(shard.record_batch.column(name)), name


def test_a_write_into_a_private_buffer_reaches_the_shard(batch: RolloutBatch) -> None:
    shard = split_train_data_by_dp_raw(batch, 2, balance_data=False)[0]
    tensors = to_tensors(shard, layout="packed", **ZERO_COPY)
    tensors["tokens"][0] = 123_456
    tensors["rewards"][0] = 0.5
    assert shard.record_batch.column("tokens").values[0].as_py() == 123_456
    assert shard.record_batch.column("rewards")[0].as_py() == 0.5


def test_converted_dtypes_are_copies(batch: RolloutBatch) -> None:
    shard = split_train_data_by_dp_raw(batch, 2, balance_data=False)[0]
    before = shard.record_batch.column("tokens").values.to_pylist()
    tensors = to_tensors(shard, layout="packed", token_dtype=torch.int64)
    tensors["tokens"].fill_(7)
    assert shard.record_batch.column("tokens").values.to_pylist() == before


@pytest.mark.parametrize("how", ["ipc", "pickle5"])
@pytest.mark.parametrize("layout", LAYOUTS)
def test_read_only_buffers_are_copied(batch: RolloutBatch, layout: TensorLayout, how: str) -> None:
    shard = split_train_data_by_dp_raw(batch, 2, balance_data=True)[0]
    frozen = read_only_copy(shard, how)
    assert not frozen.record_batch.column("tokens").values.buffers()[1].is_mutable
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        tensors = to_tensors(frozen, layout=layout, **ZERO_COPY)
        for tensor in writable_tensors(tensors):
            tensor.fill_(True if tensor.dtype == torch.bool else 7)
    assert caught == []
    assert frozen.record_batch.equals(shard.record_batch)
    assert frozen.to_train_data(layout="actor").keys() == shard.to_train_data(layout="actor").keys()
    assert_matches_reference(frozen, to_tensors(frozen, layout=layout), layout)


def test_nested_leaves_no_log_filter_behind(batch: RolloutBatch) -> None:
    logger = logging.getLogger("torch.fx._symbolic_trace")
    before = list(logger.filters)
    to_tensors(batch, layout="nested")
    assert logger.filters == before


def run_python(code: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )


def test_nested_prints_no_torch_warning() -> None:
    code = (
        "import warnings; warnings.simplefilter('error')\n"
        "from arrow_split import RolloutBatch\n"
        "from arrow_split.torch import to_tensors\n"
        "batch = RolloutBatch.from_train_data({'tokens': [[1, 2], [3]]})\n"
        "to_tensors(batch, layout='nested')\n"
        "print('done')\n"
    )
    result = run_python(code)
    assert result.returncode == 0, result.stderr
    assert result.stdout == "done\n"
    assert result.stderr == ""


def test_import_without_torch_says_how_to_install() -> None:
    code = (
        "import sys\n"
        "sys.modules['torch'] = None\n"
        "try:\n"
        "    import arrow_split.torch\n"
        "except ImportError as error:\n"
        "    print(error)\n"
        "    print(error.__cause__ is None and error.__suppress_context__)\n"
    )
    result = run_python(code)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        "arrow_split.torch needs PyTorch; install it with `pip install arrow-split[torch]`",
        "True",
    ]


# --- properties --------------------------------------------------------------------------------


@given(data=train_data(max_samples=6, cap=6), dp_size=st.integers(1, 3), balance=st.booleans())
@example(data={"tokens": []}, dp_size=1, balance=False)
@example(
    data={"tokens": [[5]], "response_lengths": [0], "loss_masks": [[]]}, dp_size=2, balance=False
)
def test_layouts_agree(data: dict[str, Any], dp_size: int, balance: bool) -> None:
    batch = RolloutBatch.from_train_data(data)
    balance = balance and batch.num_samples > 0 and batch.num_samples % dp_size == 0
    for shard in split_train_data_by_dp_raw(batch, dp_size, balance_data=balance):
        per_sample = to_tensors(shard)
        packed = to_tensors(shard, layout="packed")
        padded = to_tensors(shard, layout="padded", pad_to_multiple_of=4)
        for name, value in per_sample.items():
            if not isinstance(value, list):
                assert torch.equal(value, packed[name])
                assert torch.equal(value, padded[name])
                continue
            lengths = [len(sample) for sample in value]
            flat = torch.cat(value) if value else packed[name][:0]
            assert torch.equal(flat, packed[name])
            for sample, row in zip(value, padded[name], strict=True):
                assert torch.equal(sample, row[: len(sample)])
            assert max(lengths, default=0) <= padded[name].shape[1] < max(lengths, default=0) + 4
        assert packed["cu_seqlens"].tolist() == [0, *np.cumsum(shard.total_lengths).tolist()]
        assert_matches_reference(shard, per_sample, "per_sample")


# --- errors ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "error", "facts"),
    [
        (
            {"layout": "flat"},
            OptionError,
            {},
        ),
        (
            {"token_dtype": torch.float32},
            OptionError,
            {},
        ),
        ({"token_dtype": "int64"}, OptionTypeError, {}),
        ({"mask_dtype": torch.float64}, OptionError, {}),
        # an option out of range is the option's mistake (as `RankBlock(threads=0)`), not the
        # data's ValueRangeError it was
        ({"pad_to_multiple_of": 0}, OptionError, {"got": "0", "mistake": "option_value"}),
        ({"pad_to_multiple_of": -8}, OptionError, {"got": "-8", "mistake": "option_value"}),
        ({"pad_to_multiple_of": 2**21}, OptionError, {"mistake": "option_value"}),
        (
            {"pad_to_multiple_of": 2.0},
            OptionTypeError,
            {"got": "float 2.0", "mistake": "option_type"},
        ),
        (
            {"pad_to_multiple_of": True},
            OptionTypeError,
            {"got": "bool True", "mistake": "option_type"},
        ),
        ({"pad_value": "0"}, OptionTypeError, {}),
        (
            {"pad_value": None},
            OptionTypeError,
            {},
        ),
        (
            {"device": "gpu0"},
            OptionError,
            {},
        ),
        (
            {"device": 0.5},
            OptionTypeError,
            {},
        ),
    ],
)
def test_bad_arguments(
    batch: RolloutBatch, kwargs: dict[str, Any], error: type[Exception], facts: dict[str, Any]
) -> None:
    (key,) = kwargs
    with raises_facts(error, key=key, **facts) as caught:
        to_tensors(batch, **kwargs)
    assert type(caught.value) is error


def test_not_a_batch() -> None:
    with pytest.raises(SchemaError) as caught:
        to_tensors({"tokens": [[1]]})  # type: ignore[arg-type]
    assert_facts(caught.value, {"key": "shard"})


@pytest.mark.parametrize(
    "kwargs",
    [{"pad_value": 0.5}, {"pad_value": 2**40, "token_dtype": torch.int32}, {"pad_value": 10**400}],
)
def test_pad_value_out_of_range(batch: RolloutBatch, kwargs: dict[str, Any]) -> None:
    # an option value its column cannot hold: OptionError, as `expert_tensors` gives for it
    with raises_facts(OptionError, key="pad_value", mistake="option_value") as caught:
        to_tensors(batch, layout="padded", **kwargs)  # it does not fit `tokens`
    assert type(caught.value) is OptionError


def test_a_pad_value_a_float_column_cannot_hold() -> None:
    spec = ColumnSpec("halves", "per_token", pa.float16(), length="response")
    data = {
        "tokens": [np.arange(5), np.arange(3)],
        "response_lengths": [2, 1],
        "loss_masks": [np.ones(2, np.uint8), np.ones(1, np.uint8)],
        "halves": [np.ones(2, np.float16), np.ones(1, np.float16)],
    }
    batch = RolloutBatch.from_train_data(data, specs=[spec])
    with raises_facts(OptionError, key="pad_value", got="100000"):  # fits `tokens`, not float16
        to_tensors(batch, layout="padded", pad_value=100_000)
    assert to_tensors(batch, layout="padded", pad_value=7)["halves"].tolist() == [
        [1.0, 1.0],
        [1.0, 7.0],
    ]


def test_column_clashing_with_an_extra_key() -> None:
    spec = ColumnSpec("cu_seqlens", "per_sample_scalar", pa.int64())
    batch = RolloutBatch.from_train_data({"tokens": [[1], [2]], "cu_seqlens": [0, 1]}, specs=[spec])
    assert to_tensors(batch)["cu_seqlens"].tolist() == [0, 1]
    with raises_facts(SchemaError, key="cu_seqlens"):
        to_tensors(batch, layout="packed")


def test_declared_columns_get_keys_from_their_length_rule() -> None:
    specs = [
        ColumnSpec("position_ids", "per_token", pa.uint16(), length="tokens"),
        ColumnSpec("advantages", "per_token", pa.float32(), length="response"),
        ColumnSpec("is_tool", "per_token", pa.bool_()),
        ColumnSpec("hidden", "per_sample_tensor", pa.float32()),
    ]
    data = {
        "tokens": [[1, 2, 3], [4]],
        "response_lengths": [2, 1],
        "position_ids": [[0, 1, 2], [0]],
        "advantages": [[0.5, 0.25], [1.0]],
        "is_tool": [[True], [False, True]],
        "hidden": [np.ones((2, 4), np.float32), np.zeros((0, 4), np.float32)],
    }
    batch = RolloutBatch.from_train_data(data, specs=specs)
    packed = to_tensors(batch, layout="packed")
    assert list(packed)[-4:] == [
        "cu_seqlens",
        "response_cu_seqlens",
        "is_tool_cu_seqlens",
        "hidden_cu_seqlens",
    ]
    assert packed["is_tool_cu_seqlens"].tolist() == [0, 1, 3]
    assert packed["hidden_cu_seqlens"].tolist() == [0, 2, 2]
    padded = to_tensors(batch, layout="padded", pad_value=9)
    assert padded["position_ids"].dtype == torch.uint16
    assert padded["position_ids"].to(torch.int32).tolist() == [[0, 1, 2], [0, 9, 9]]
    assert padded["is_tool"].tolist() == [[True, False], [False, True]]  # bool pads False
    assert padded["hidden"].shape == (2, 2, 4)
    assert set(padded) - set(data) == {"attention_mask", "response_mask"}
    for layout in LAYOUTS:
        assert_matches_reference(batch, to_tensors(batch, layout=layout), layout)


def test_micro_batches_are_slices_with_their_own_cu_seqlens() -> None:
    from arrow_split.torch import to_micro_batches

    batch = RolloutBatch.from_train_data(
        {"tokens": [[1, 2, 3], [4, 5], [6], [7, 8, 9, 10]], "rewards": [0.0, 1.0, 2.0, 3.0]}
    )
    shard = split_train_data_by_dp_raw(batch, 1, balance_data=False)[0]
    parts = to_micro_batches(shard, [0, 1, 3, 4], layout="packed")
    assert [part["cu_seqlens"].tolist() for part in parts] == [[0, 3], [0, 2, 3], [0, 4]]
    assert [part["tokens"].tolist() for part in parts] == [[1, 2, 3], [4, 5, 6], [7, 8, 9, 10]]
    assert [part["rewards"].tolist() for part in parts] == [[0.0], [1.0, 2.0], [3.0]]
    whole = to_tensors(shard, layout="packed", token_dtype=torch.int32)["tokens"]
    sliced = to_micro_batches(shard, [0, 2, 4], layout="packed", token_dtype=torch.int32)
    # Views of the shard's private buffer: no second gather.
    assert sliced[1]["tokens"].data_ptr() == whole[5:].data_ptr()


@pytest.mark.parametrize(
    ("offsets", "error"),
    [
        ([0, 2], OptionError),
        ([0, 3, 2, 4], OptionError),
        ([0.0, 4.0], OptionTypeError),
        ([True, True], OptionTypeError),
        ([1, 4], OptionError),
    ],
)
def test_bad_micro_batch_offsets(offsets: list[Any], error: type) -> None:
    from arrow_split.torch import to_micro_batches

    batch = RolloutBatch.from_train_data({"tokens": [[1], [2], [3], [4]]})
    with raises_facts(error, key="micro_batch_offsets") as caught:
        to_micro_batches(batch, offsets)
    assert type(caught.value) is error


@pytest.mark.parametrize("layout", ["per_sample", "packed", "padded"])
def test_padding_rows_are_marked_in_the_tensors(layout: TensorLayout) -> None:
    data = {
        "tokens": [[1, 2, 3], [4, 5], [6, 7, 8, 9]],
        "response_lengths": [2, 1, 2],
        "loss_masks": [[1, 1], [1], [1, 0]],
        "sample_indices": [0, 1, 2],
    }
    shards = split_train_data_by_dp_raw(data, 2, balance_data=True, pad_to_dp=True)
    tensors = to_tensors(shards[1], layout=layout)
    assert tensors["is_padding"].tolist() == [False, True]
    assert tensors["sample_indices"].tolist() == [1, -1]


@pytest.mark.parametrize(
    "multiple",
    [np.int64(4), np.array(4), torch.tensor(4), torch.tensor(4, dtype=torch.int32)],
    ids=["numpy-int", "0-d-array", "0-d-tensor", "0-d-int32-tensor"],
)
def test_pad_to_multiple_of_takes_any_integer_scalar(batch: RolloutBatch, multiple: Any) -> None:
    # the one rule of an int argument: a 0-d tensor is accepted wherever a 0-d array is
    padded = to_tensors(batch, layout="padded", pad_to_multiple_of=multiple)
    assert padded["tokens"].shape[1] % 4 == 0  # type: ignore[union-attr]


@pytest.mark.parametrize("multiple", [torch.tensor(True), torch.tensor(4.0), np.array(True)])
def test_pad_to_multiple_of_refuses_a_bool_or_float_scalar(
    batch: RolloutBatch, multiple: Any
) -> None:
    with pytest.raises(OptionTypeError) as caught:
        to_tensors(batch, layout="padded", pad_to_multiple_of=multiple)
    assert caught.value.key == "pad_to_multiple_of"
