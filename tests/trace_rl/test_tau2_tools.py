"""Hand-checked behaviour of the airline and retail tools: effects, refusals, argument checking, calculate."""

import re

import pytest
from tracec.trace_rl.envs.tau2.airline import airline_toolkit
from tracec.trace_rl.envs.tau2.calculator import calculate
from tracec.trace_rl.envs.tau2.env import Tau2Tools
from tracec.trace_rl.envs.tau2.toolkit import ToolError, check_arguments
from tracec.trace_rl.envs.toolcall import ToolCall, ToolCallError


def _call(env, name, **arguments):
    return env.execute(ToolCall(name=name, arguments=arguments))


BOOKING = {
    "user_id": "mia_li_3668",
    "origin": "JFK",
    "destination": "SEA",
    "flight_type": "one_way",
    "cabin": "economy",
    "flights": [
        {"flight_number": "HAT136", "date": "2024-05-20"},
        {"flight_number": "HAT039", "date": "2024-05-20"},
    ],
    "passengers": [{"first_name": "Mia", "last_name": "Li", "dob": "1990-04-05", "nickname": "dropped"}],
    "payment_methods": [
        {"payment_id": "certificate_7504069", "amount": 250},
        {"payment_id": "credit_card_4421486", "amount": 5},
    ],
    "total_baggages": 3,
    "nonfree_baggages": 0,
    "insurance": "no",
}


def test_book_reservation_charges_books_seats_and_spends_the_certificate(domains):
    env = Tau2Tools(domains["airline"])
    outcome = _call(env, "book_reservation", **BOOKING)
    assert outcome.accepted and outcome.kind == "mutate" and outcome.changed
    reservation = env.db.row("reservations", "HATHAT")
    assert [leg["price"] for leg in reservation["flights"]] == [152, 103]  # economy on 2024-05-20
    assert reservation["passengers"] == [{"first_name": "Mia", "last_name": "Li", "dob": "1990-04-05"}]
    assert reservation["created_at"] == "2024-05-15T15:00:00" and reservation["status"] is None
    user = env.db.row("users", "mia_li_3668")
    assert "certificate_7504069" not in user["payment_methods"] and user["reservations"][-1] == "HATHAT"
    assert env.db.row("flights", "HAT136")["dates"]["2024-05-20"]["available_seats"]["economy"] == 13
    assert env.db.row("flights", "HAT039")["dates"]["2024-05-20"]["available_seats"]["economy"] == 9
    assert {"HATHAT", "HAT136", "mia_li_3668"} <= outcome.revealed
    second = _call(
        env,
        "book_reservation",
        **{**BOOKING, "payment_methods": [{"payment_id": "credit_card_4421486", "amount": 255}]},
    )
    assert second.accepted and env.db.row("reservations", "HATHAU") is not None


@pytest.mark.parametrize(
    ("change", "error"),
    [
        (
            {"payment_methods": [{"payment_id": "credit_card_4421486", "amount": 260}]},
            "Payment amount does not add up, total price is 255, but paid 260",
        ),
        ({"insurance": "yes"}, "Payment amount does not add up, total price is 285, but paid 255"),
        ({"user_id": "nobody_1"}, "User nobody_1 not found"),
        (
            {"payment_methods": [{"payment_id": "certificate_4856383", "amount": 255}]},
            "Not enough balance in payment method certificate_4856383",
        ),
        (
            {"payment_methods": [{"payment_id": "gift_card_1", "amount": 255}]},
            "Payment method gift_card_1 not found",
        ),
        (
            {"flights": [{"flight_number": "HAT136", "date": "1999-01-01"}]},
            "Flight HAT136 not found on date 1999-01-01",
        ),
        (
            {"flights": [{"flight_number": "HAT001", "date": "2024-05-01"}]},
            "Flight HAT001 not available on date 2024-05-01",
        ),
        ({"flights": [{"flight_number": "XXX1", "date": "2024-05-20"}]}, "Flight XXX1 not found"),
        ({"cabin": "first"}, "argument `cabin` must be one of"),
        ({"total_baggages": "three"}, "argument `total_baggages` must be a whole number"),
        ({"flights": [{"flight_number": "HAT136"}]}, "argument `flights[0]` is missing field(s) date"),
    ],
)
def test_book_reservation_refusals_change_nothing(domains, change, error):
    env = Tau2Tools(domains["airline"])
    before = env.db.stable_hash()
    outcome = _call(env, "book_reservation", **{**BOOKING, **change})
    assert not outcome.accepted and error in outcome.error
    assert outcome.content.startswith("Error: ") and not outcome.changed
    assert env.db.stable_hash() == before


def test_baggage_and_flight_updates(domains):
    env = Tau2Tools(domains["airline"])
    refused = _call(
        env,
        "update_reservation_baggages",
        reservation_id="NO6JO3",
        total_baggages=4,
        nonfree_baggages=2,
        payment_id="certificate_4856383",
    )
    assert refused.error == "Certificate cannot be used to update reservation"
    bags = _call(
        env,
        "update_reservation_baggages",
        reservation_id="NO6JO3",
        total_baggages="4",
        nonfree_baggages=2.0,
        payment_id="credit_card_1955700",
    )
    reservation = env.db.row("reservations", "NO6JO3")
    assert bags.accepted and reservation["payment_history"][-1] == {
        "payment_id": "credit_card_1955700",
        "amount": 100,
    }
    assert (reservation["total_baggages"], reservation["nonfree_baggages"]) == (4, 2)
    before = env.db.stable_hash()
    same = [{"flight_number": leg["flight_number"], "date": leg["date"]} for leg in reservation["flights"]]
    kept = _call(
        env,
        "update_reservation_flights",
        reservation_id="NO6JO3",
        cabin="business",
        flights=same,
        payment_id="credit_card_1955700",
    )
    assert kept.accepted and not kept.changed and env.db.stable_hash() == before
    cheaper = _call(
        env,
        "update_reservation_flights",
        reservation_id="NO6JO3",
        cabin="economy",
        flights=same,
        payment_id="credit_card_1955700",
    )
    new = sum(
        env.db.row("flights", leg["flight_number"])["dates"][leg["date"]]["prices"]["economy"] for leg in same
    )
    assert cheaper.accepted and env.db.row("reservations", "NO6JO3")["cabin"] == "economy"
    assert env.db.row("reservations", "NO6JO3")["payment_history"][-1]["amount"] == new - (483 + 1991)


def test_cancel_certificate_and_passenger_rules(domains):
    env = Tau2Tools(domains["airline"])
    assert _call(env, "cancel_reservation", reservation_id="NO6JO3").accepted
    reservation = env.db.row("reservations", "NO6JO3")
    assert reservation["status"] == "cancelled"
    assert reservation["payment_history"][-1] == {"payment_id": "credit_card_1955700", "amount": -2504}
    assert _call(env, "send_certificate", user_id="mia_li_3668", amount=150).content == (
        '"Certificate certificate_3221322 added to user mia_li_3668 with amount 150."'
    )
    _call(env, "send_certificate", user_id="mia_li_3668", amount=50)
    methods = env.db.row("users", "mia_li_3668")["payment_methods"]
    assert methods["certificate_3221322"] == {
        "source": "certificate",
        "id": "certificate_3221322",
        "amount": 150.0,
    }
    assert methods["certificate_3221323"]["amount"] == 50.0
    two = [{"first_name": "A", "last_name": "B", "dob": "2000-01-01"}] * 2
    assert _call(env, "update_reservation_passengers", reservation_id="NO6JO3", passengers=two).error == (
        "Number of passengers does not match"
    )
    assert _call(env, "get_reservation_details", reservation_id="nope").error == "Reservation nope not found"


def test_airline_queries(domains):
    env = Tau2Tools(domains["airline"])
    direct = _call(env, "search_direct_flight", origin="JFK", destination="ATL", date="2024-05-20")
    assert direct.kind == "query" and '"flight_number":"HAT136"' in direct.content
    onestop = _call(env, "search_onestop_flight", origin="JFK", destination="SEA", date="2024-05-20")
    assert '"HAT136"' in onestop.content and '"HAT039"' in onestop.content
    assert _call(env, "get_flight_status", flight_number="HAT001", date="2024-05-01").content == '"landed"'
    assert '"iata":"JFK"' in _call(env, "list_all_airports").content


def test_retail_cancel_refunds_a_gift_card_at_once(domains):
    env = Tau2Tools(domains["retail"])
    outcome = _call(env, "cancel_pending_order", order_id="#W6779827", reason="no longer needed")
    order = env.db.row("orders", "#W6779827")
    assert (
        outcome.accepted and order["status"] == "cancelled" and order["cancel_reason"] == "no longer needed"
    )
    assert order["payment_history"][-1] == {
        "transaction_type": "refund",
        "amount": 4079.45,
        "payment_method_id": "gift_card_7219486",
    }
    assert (
        env.db.row("users", "ethan_lopez_6291")["payment_methods"]["gift_card_7219486"]["balance"] == 4128.45
    )
    again = _call(env, "cancel_pending_order", order_id="#W6779827", reason="no longer needed")
    assert again.error == "Non-pending order cannot be cancelled"
    assert "must be one of" in _call(env, "cancel_pending_order", order_id="#W9318778", reason="bored").error


def test_retail_modify_items_applies_the_benchmarks_last_variant_rule(domains):
    env = Tau2Tools(domains["retail"])
    keyboard = _other_variant(env, "1656367028", "6342039236")
    clock = _other_variant(env, "2344688344", "9850781806")
    outcome = _call(
        env,
        "modify_pending_order_items",
        order_id="#W9318778",
        item_ids=["6342039236", "9850781806"],
        new_item_ids=[keyboard["item_id"], clock["item_id"]],
        payment_method_id="credit_card_7862034",
    )
    assert outcome.accepted
    order = env.db.row("orders", "#W9318778")
    assert order["status"] == "pending (item modified)"
    changed = [item for item in order["items"] if item["item_id"] in (keyboard["item_id"], clock["item_id"])]
    assert len(changed) == 2
    assert all(item["price"] == clock["price"] and item["options"] == clock["options"] for item in changed)
    diff = 0 + (keyboard["price"] - 244.91) + (clock["price"] - 184.48)
    assert order["payment_history"][-1] == {
        "transaction_type": "payment" if diff > 0 else "refund",
        "amount": abs(diff),
        "payment_method_id": "credit_card_7862034",
    }
    again = _call(
        env,
        "modify_pending_order_items",
        order_id="#W9318778",
        item_ids=[],
        new_item_ids=[],
        payment_method_id="credit_card_7862034",
    )
    assert again.error == "Non-pending order cannot be modified"


def _other_variant(env, product_id, item_id):
    variants = env.db.row("products", product_id)["variants"].values()
    return next(v for v in variants if v["available"] and v["item_id"] != item_id)


def test_retail_refusals_from_the_gold_tasks(domains):
    env = Tau2Tools(domains["retail"])
    assert (
        _call(
            env,
            "return_delivered_order_items",
            order_id="#W5490111",
            item_ids=["4579334072"],
            payment_method_id="paypal_9497703",
        ).error
        == "Payment method should be the original payment method"
    )
    assert _call(
        env,
        "exchange_delivered_order_items",
        order_id="#W4316152",
        item_ids=["7292993796", "7292993796"],
        new_item_ids=["3761330360", "9647374798"],
        payment_method_id="gift_card_7245904",
    ).error == ("Insufficient gift card balance to pay for the price difference")
    assert _call(env, "get_order_details", order_id="#9502126").error == "Order not found"
    assert (
        _call(env, "get_product_details", product_id=6086499569).error == "Product not found"
    )  # int id read as text


def test_retail_lookups(domains):
    env = Tau2Tools(domains["retail"])
    found = _call(env, "find_user_id_by_email", email="Noah.Brown7922@example.com")
    assert found.content == '"noah_brown_6181"' and found.revealed == {"noah_brown_6181"}
    assert _call(env, "find_user_id_by_name_zip", first_name="Yusuf", last_name="Rossi", zip="19122").accepted
    catalogue = _call(env, "list_all_product_types")
    assert '"T-Shirt":"9523456873"' in catalogue.content and "9523456873" in catalogue.revealed


def test_argument_checking_and_unknown_tools(domains):
    env = Tau2Tools(domains["retail"])
    assert _call(env, "get_order_details").error == "get_order_details() is missing argument(s) order_id"
    assert "unexpected argument(s) id" in _call(env, "get_order_details", order_id="#W1", id=1).error
    assert (
        "must be a list"
        in _call(
            env, "return_delivered_order_items", order_id="#W1", item_ids="1", payment_method_id="x"
        ).error
    )
    assert "must be a string, got True" in _call(env, "get_order_details", order_id=True).error
    assert "must be a string, got [1]" in _call(env, "get_order_details", order_id=[1]).error
    unknown = _call(env, "delete_everything", confirm=True)
    assert unknown.kind == "invalid" and unknown.tool == "delete_everything" and "not found" in unknown.error
    malformed = env.execute(ToolCallError(message="malformed <action> at column 3: expected a value"))
    assert malformed.kind == "invalid" and malformed.tool is None and "expected a value" in malformed.content


def test_whole_numbers_are_read_like_the_benchmark_models_read_them():
    spec = airline_toolkit().tools["send_certificate"]
    for given, expected in [(150, 150), (150.0, 150), ("150", 150), (" 150.00 ", 150)]:
        assert check_arguments(spec, {"user_id": "u", "amount": given})["amount"] == expected
    for bad in (True, 150.5, "150.5", "a lot", None):
        with pytest.raises(ToolError, match="`amount` must be a whole number"):
            check_arguments(spec, {"user_id": "u", "amount": bad})


def test_calculate():
    assert calculate("2 * ((350 - 122) + (499 - 127))") == "1200.0"
    assert calculate("10 / 4 - -1") == "3.5"
    assert calculate("1 / 3") == "0.33"
    for bad, message in [
        ("2 ** 3", "unexpected"),
        ("1 / 0", "division by zero"),
        ("import os", "Invalid characters"),
        ("(1 + 2", "missing `)`"),
        ("1 +", "ends too early"),
        ("1.2.3", "unexpected"),
    ]:
        with pytest.raises(ToolError, match=re.escape(message)):
            calculate(bad)
