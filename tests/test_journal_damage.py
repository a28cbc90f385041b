"""Journal damage (issue 29): corruption reported, never repaired by deletion; locks; identity."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from arrow_split import (
    ArrowSplitError,
    JournalError,
    OptionTypeError,
    RolloutBatchBuilder,
    SchemaError,
)

REPO_ROOT = Path(__file__).resolve().parent.parent


def _group(first: int, count: int = 2) -> dict[str, list[object]]:
    return {
        "tokens": [[first + i, 2, 3] for i in range(count)],
        "response_lengths": [1] * count,
        "rewards": [float(i) for i in range(count)],
        "sample_indices": list(range(first, first + count)),
    }


def _journal(folder: Path, groups: int = 3) -> Path:
    builder = RolloutBatchBuilder(journal=folder, identity="sample_indices")
    for index in range(groups):
        builder.extend(_group(2 * index))
    builder.close()
    return folder / "step-000000.journal"


def _offsets(path: Path) -> list[int]:
    import struct

    frame = struct.Struct("<4s8sQQQI")
    data, offsets, at = path.read_bytes(), [], 0
    while at < len(data):
        offsets.append(at)
        at += frame.size + frame.unpack_from(data, at)[3]
    return offsets


def test_one_bad_byte_is_reported_not_truncated(tmp_path: Path) -> None:
    path = _journal(tmp_path)
    offsets = _offsets(path)
    data = bytearray(path.read_bytes())
    data[offsets[1] + 60] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(JournalError, match=r"damaged at offset \d+ .*2 whole record\(s\) follow"):
        RolloutBatchBuilder.recover(tmp_path)
    assert path.read_bytes() == bytes(data)
    salvaged = RolloutBatchBuilder.recover(tmp_path, salvage=True)
    assert len(salvaged) == 4
    assert len(salvaged.salvaged) >= 1
    assert (tmp_path / "step-000000.journal.damaged").read_bytes() == bytes(data)


def test_a_duplicated_record_is_reported_and_salvaged_once(tmp_path: Path) -> None:
    path = _journal(tmp_path)
    offsets = _offsets(path)
    data = path.read_bytes()
    path.write_bytes(data + data[offsets[1] : offsets[2]])
    with pytest.raises(JournalError, match="again, or out of order"):
        RolloutBatchBuilder.recover(tmp_path)
    assert len(RolloutBatchBuilder.recover(tmp_path, salvage=True)) == 6


def test_a_record_spliced_from_another_journal_is_refused(tmp_path: Path) -> None:
    path = _journal(tmp_path / "a")
    other = _journal(tmp_path / "b")
    spliced = other.read_bytes()[_offsets(other)[1] : _offsets(other)[2]]
    path.write_bytes(path.read_bytes() + spliced)
    with pytest.raises(JournalError, match="another journal"):
        RolloutBatchBuilder.recover(tmp_path / "a")


@settings(max_examples=30, deadline=None)
@given(st.data())
def test_damage_is_recovered_or_named_never_dropped(data: st.DataObject) -> None:
    import tempfile

    with tempfile.TemporaryDirectory() as folder:
        path = _journal(Path(folder))
        original = path.read_bytes()
        damaged = bytearray(original)
        how = data.draw(st.sampled_from(["flip", "cut", "swap"]))
        offsets = _offsets(path)
        if how == "flip":
            damaged[data.draw(st.integers(0, len(original) - 1))] ^= data.draw(st.integers(1, 255))
        elif how == "cut":
            damaged = damaged[: data.draw(st.integers(offsets[1], len(original) - 1))]
        else:
            a, b, c = offsets[1], offsets[2], offsets[3]
            damaged = damaged[:a] + damaged[b:c] + damaged[a:b] + damaged[c:]
        path.write_bytes(bytes(damaged))
        try:
            builder = RolloutBatchBuilder.recover(folder)
        except JournalError:
            assert path.read_bytes() == bytes(damaged)  # nothing changed
            return
        kept = path.read_bytes()
        assert bytes(damaged).startswith(kept)  # only a torn tail was cut
        whole = sum(offset + 1 <= len(kept) for offset in offsets[1:])
        if how != "cut":
            assert len(builder) == 6
        else:
            assert len(builder) >= 2 * (whole - 1)
        builder.close()


def test_two_builders_on_one_folder_second_gets_a_typed_error(tmp_path: Path) -> None:
    code = textwrap.dedent(
        """
        import sys
        from arrow_split import ArrowSplitError, JournalError, RolloutBatchBuilder
        try:
            RolloutBatchBuilder.recover(sys.argv[1])
        except JournalError as error:
            print("refused", error)
        """
    )
    builder = RolloutBatchBuilder(journal=tmp_path, identity="sample_indices")
    builder.extend(_group(0))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    done = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path)],
        capture_output=True,
        text=True,
        check=False,
        cwd=REPO_ROOT,
        env=env,
    )
    assert done.stdout.startswith("refused"), done.stderr
    assert "in use by process" in done.stdout
    with pytest.raises(JournalError, match="in use by process"):
        RolloutBatchBuilder(journal=tmp_path)
    builder.extend(_group(2))
    builder.close()
    assert len(RolloutBatchBuilder.recover(tmp_path)) == 4


def test_an_existing_step_dump_is_never_overwritten(tmp_path: Path) -> None:
    _journal(tmp_path, 1)
    (tmp_path / "step-000001.arrow").write_bytes(b"keep me")
    builder = RolloutBatchBuilder.recover(tmp_path)
    builder.finish()
    builder.extend(_group(10))
    builder.finish()
    assert (tmp_path / "step-000001.arrow").read_bytes() == b"keep me"
    assert (tmp_path / "step-000002.arrow").exists()


@pytest.mark.parametrize("identity", ["nope", "raw_reward", "", "tokens"])
def test_the_identity_key_is_checked_when_the_builder_is_made(identity: str) -> None:
    with pytest.raises(SchemaError, match="`identity`"):
        RolloutBatchBuilder(identity=identity)


def test_a_sample_without_identity_is_refused() -> None:
    builder = RolloutBatchBuilder(identity="sample_indices")
    group = _group(0)
    group["sample_indices"] = [None, None]
    with pytest.raises(ArrowSplitError, match="None"):
        builder.extend(group)
    assert len(builder) == 0


@pytest.mark.parametrize("journal", [None, 123, True, ["a"], b"folder"])
def test_bad_journal_arguments_are_typed_errors(journal: object) -> None:
    with pytest.raises(OptionTypeError, match="`journal` must be a path"):
        RolloutBatchBuilder.recover(journal)  # type: ignore[arg-type]
    if journal is not None:
        with pytest.raises(OptionTypeError, match="`journal` must be a path"):
            RolloutBatchBuilder(journal=journal)  # type: ignore[arg-type]


def test_a_crafted_journal_value_runs_no_code(tmp_path: Path) -> None:
    import base64
    import pickle

    from arrow_split._journal import unpickle_v1

    marker = tmp_path / "ran"

    class Evil:
        def __reduce__(self) -> tuple[object, ...]:
            return (os.system, (f"touch {marker}",))

    text = base64.b64encode(pickle.dumps(Evil())).decode()
    with pytest.raises(JournalError, match="does not read"):
        unpickle_v1(text)
    assert not marker.exists()


def test_a_header_flag_that_is_not_a_bool_is_refused(tmp_path: Path) -> None:
    from arrow_split._journal import parse_header

    header = {
        "journal_version": "2",
        "library_version": "x",
        "declared": [],
        "step": 0,
        "allow_nonfinite": "False",
        "exact_floats": False,
        "identity": None,
    }
    with pytest.raises(JournalError, match="`allow_nonfinite` must be bool"):
        parse_header(header, "f", 0)


def test_recovered_step_decodes_plain_objects_only_unless_trusted(tmp_path):
    from arrow_split import RolloutBatchBuilder

    group = {
        "tokens": [[1, 2, 3]],
        "response_lengths": [1],
        "metadata": [{"source": "a"}],
    }
    builder = RolloutBatchBuilder(journal=tmp_path)
    builder.extend(group)
    builder.close()
    recovered = RolloutBatchBuilder.recover(tmp_path)
    batch = recovered.finish()
    assert batch.trust_objects is False
    assert batch.to_train_data()["metadata"] == [{"source": "a"}]
    recovered.extend(group)
    assert recovered.finish().trust_objects is True
    recovered.close()
    builder = RolloutBatchBuilder(journal=tmp_path / "other")
    builder.extend(group)
    builder.close()
    trusted = RolloutBatchBuilder.recover(tmp_path / "other", trust_objects=True)
    assert trusted.finish().trust_objects is True
    trusted.close()
