"""Gold replay on all 164 tasks, the stable hash, the database dump and the `tracec tau2 replay` command."""

import hashlib
import json

import pytest
from tracec.cli import main
from tracec.trace_rl.envs.tau2.db import OPTIONAL_FIELDS
from tracec.trace_rl.envs.tau2.env import Tau2Tools
from tracec.trace_rl.envs.tau2.gold import replay_gold
from tracec.trace_rl.envs.tau2.toolkit import STR, Param, Tool, ToolError, Toolkit
from tracec.trace_rl.envs.toolcall import ToolCall

EXPECTED_REFUSALS = {
    "Product not found": 6,
    "User not found": 9,
    "Order not found": 4,
    "Payment method should be the original payment method": 2,
    "Non-delivered order cannot be exchanged": 1,
    "Insufficient gift card balance to pay for the price difference": 1,
}


def _plain_hash(db):
    return hashlib.sha256(json.dumps(db.to_dict(), sort_keys=True).encode()).hexdigest()


def test_gold_actions_behave_as_in_the_benchmark(domains):
    accepted, refused = 0, {}
    for name, domain in domains.items():
        initial = domain.snapshot.fresh().stable_hash()
        assert len(domain.tasks) == {"airline": 50, "retail": 114}[name]
        for task in domain.tasks.values():
            env, outcomes = replay_gold(domain, task)
            accepted += sum(outcome.accepted for outcome in outcomes)
            failed = [outcome for outcome in outcomes if not outcome.accepted]
            for outcome in failed:
                assert name == "retail", (task.key, outcome.error)
                assert not outcome.changed and outcome.content == f"Error: {outcome.error}"
                refused[outcome.error] = refused.get(outcome.error, 0) + 1
            if failed:  # the refused actions changed nothing: replaying only the others ends the same
                kept = Tau2Tools(domain)
                for action, outcome in zip(task.actions, outcomes):
                    if outcome.accepted:
                        assert kept.execute(ToolCall(name=action.name, arguments=action.arguments)).accepted
                assert kept.db.stable_hash() == env.db.stable_hash(), task.key
        assert domain.snapshot.fresh().stable_hash() == initial, (
            "replays must never touch the shared snapshot"
        )
    assert accepted == 678
    assert refused == EXPECTED_REFUSALS


@pytest.mark.parametrize(
    ("domain", "task_id"), [("airline", "23"), ("airline", "44"), ("retail", "0"), ("retail", "21")]
)
def test_stable_hash_is_sha256_of_sorted_key_json(domains, domain, task_id):
    env, outcomes = replay_gold(domains[domain], domains[domain].task(task_id))
    assert any(outcome.changed for outcome in outcomes)
    assert env.db.stable_hash() == _plain_hash(env.db)
    assert env.db.to_json_text() == json.dumps(env.db.to_dict(), sort_keys=True)
    assert domains[domain].snapshot.fresh().stable_hash() == _plain_hash(domains[domain].snapshot.fresh())


def test_new_reservations_are_hashed_in_key_order(domains):
    env, outcomes = replay_gold(domains["airline"], domains["airline"].task("23"))  # books three reservations
    assert [outcome.tool for outcome in outcomes].count("book_reservation") == 3
    assert {"HATHAT", "HATHAU", "HATHAV"} <= set(env.db.to_dict()["reservations"])
    assert env.db.stable_hash() == _plain_hash(env.db)


def test_a_refused_call_is_rolled_back_even_after_an_edit(domains):
    def edit_then_refuse(db, args):
        db.edit("users", args["user_id"])["email"] = "changed@example.com"
        raise ToolError("refused late")

    toolkit = Toolkit(
        "retail",
        (
            Tool(
                name="late",
                kind="mutate",
                doc="",
                run=edit_then_refuse,
                params=(Param(name="user_id", type=STR, doc=""),),
            ),
        ),
    )
    db = domains["retail"].snapshot.fresh()
    before = db.stable_hash()
    user_id = next(key for key, _ in db.rows("users"))
    with pytest.raises(ToolError, match="refused late"):
        toolkit.call(db, "late", {"user_id": user_id})
    assert db.stable_hash() == before
    assert db.row("users", user_id)["email"] != "changed@example.com"


def test_replay_command_dumps_the_benchmark_shape(data_dir, tmp_path, capsys):
    out = tmp_path / "airline_db.json"
    assert (
        main(
            [
                "tau2",
                "replay",
                "--domain",
                "airline",
                "--task",
                "23",
                "--dump-db",
                str(out),
                "--data-dir",
                str(data_dir),
            ]
        )
        == 0
    )
    printed = capsys.readouterr().out
    dump = json.loads(out.read_text())
    assert set(dump) == {"flights", "users", "reservations"}
    assert all("status" in row for row in dump["reservations"].values())
    assert dump["reservations"]["K1NW8N"]["status"] == "cancelled"  # task 23 cancels it, then books three
    assert [dump["reservations"][rid]["status"] for rid in ("HATHAT", "HATHAU", "HATHAV")] == [None] * 3
    digest = hashlib.sha256(json.dumps(dump, sort_keys=True).encode()).hexdigest()
    assert f"db hash: {digest}" in printed
    assert "refused: 0" in printed
    assert not list(tmp_path.glob(".*.tmp")), "the temp file must be renamed into place"
    assert out.stat().st_mode & 0o777 == 0o644


def test_retail_dump_has_every_optional_order_field(data_dir, tmp_path, capsys):
    out = tmp_path / "retail_db.json"
    assert (
        main(
            [
                "tau2",
                "replay",
                "--domain",
                "retail",
                "--task",
                "0",
                "--dump-db",
                str(out),
                "--data-dir",
                str(data_dir),
            ]
        )
        == 0
    )
    orders = json.loads(out.read_text())["orders"]
    fields = OPTIONAL_FIELDS["retail"]["orders"]
    assert all(set(fields) <= set(order) for order in orders.values())
    exchanged = orders["#W2378156"]
    assert exchanged["status"] == "exchange requested"
    assert exchanged["exchange_items"] == ["1151293680", "4983901480"]
    assert exchanged["cancel_reason"] is None and exchanged["return_items"] is None
    assert "err " not in capsys.readouterr().out


def test_replay_command_reports_refused_gold_actions(data_dir, capsys):
    assert main(["tau2", "replay", "--domain", "retail", "--task", "2", "--data-dir", str(data_dir)]) == 0
    printed = capsys.readouterr().out
    assert "err 2_" in printed and "Product not found" in printed


def test_replay_command_errors(data_dir, tmp_path, capsys):
    assert main(["tau2", "replay", "--domain", "retail", "--task", "9999", "--data-dir", str(data_dir)]) == 1
    assert "no task `9999`" in capsys.readouterr().err
    assert main(["tau2", "replay", "--domain", "retail", "--task", "0", "--data-dir", str(tmp_path)]) == 1
    assert "tau2 data not found" in capsys.readouterr().err
    assert main(["tau2", "replay", "--domain", "telecom", "--task", "0"]) == 2
    assert main(["tau2", "replay", "--task", "0"]) == 2
    nested = tmp_path / "no" / "such" / "dir" / "db.json"
    argv = ["replay", "--domain", "retail", "--task", "0", "--dump-db", str(nested), "--data-dir", str(data_dir)]
    assert main(["tau2", *argv]) == 0  # missing parent folders are created, as for every output of tracec
    assert json.loads(nested.read_text())["orders"]
