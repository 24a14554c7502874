"""The retail domain's tools over its database (tables products, users, orders), per `retail/policy.md`.

Mutations refuse with the service's own messages ("Order not found", "Non-delivered order cannot be
exchanged", "Payment method should be the original payment method", ...) and change nothing when they do.
Prices follow the benchmark's arithmetic exactly (the same float sums, rounded where it rounds), since the
final database is compared by hash.

Benchmark behaviour kept on purpose: `modify_pending_order_items` gives every modified item the price and
options of the *last* new item (tau2-bench issue #318). Both the gold database and the agent's come from this
same tool, so the reward is unaffected, and the hash stays comparable with the benchmark's.

Left out: the user-identity policy (authenticate first, one user per conversation): the API does not enforce
it.
"""

from __future__ import annotations

import copy
from typing import Any, Literal

from tracec.trace_rl.envs.tau2.calculator import calculate
from tracec.trace_rl.envs.tau2.db import Db
from tracec.trace_rl.envs.tau2.toolkit import STR, Choice, ListOf, ToolError, Toolkit, param, tool

CANCEL_REASONS = ("no longer needed", "ordered by mistake")
ADDRESS_FIELDS = ("address1", "address2", "city", "country", "state", "zip")


def _order(db: Db, order_id: str) -> dict[str, Any]:
    row = db.row("orders", order_id)
    if row is None:
        raise ToolError("Order not found")
    return row


def _user(db: Db, user_id: str) -> dict[str, Any]:
    row = db.row("users", user_id)
    if row is None:
        raise ToolError("User not found")
    return row


def _product(db: Db, product_id: str) -> dict[str, Any]:
    row = db.row("products", product_id)
    if row is None:
        raise ToolError("Product not found")
    return row


def _variant(db: Db, product_id: str, item_id: str) -> dict[str, Any]:
    variant = _product(db, product_id)["variants"].get(item_id)
    if variant is None:
        raise ToolError("Variant not found")
    return variant


def _payment_method(db: Db, user_id: str, payment_method_id: str) -> dict[str, Any]:
    method = _user(db, user_id)["payment_methods"].get(payment_method_id)
    if method is None:
        raise ToolError("Payment method not found")
    return method


def _add_to_gift_card(db: Db, user_id: str, payment_method_id: str, amount: float) -> None:
    card = db.edit("users", user_id)["payment_methods"][payment_method_id]
    card["balance"] = round(card["balance"] + amount, 2)


def _check_items(order: dict[str, Any], item_ids: list[str], message: str) -> None:
    """Every listed item is in the order, counting duplicates."""
    owned = [item["item_id"] for item in order["items"]]
    for item_id in item_ids:
        if item_ids.count(item_id) > owned.count(item_id):
            raise ToolError(message.format(item_id=item_id))


def _price_difference(
    db: Db, order: dict[str, Any], a: dict[str, Any], *, mismatch: str, distinct: bool
) -> tuple[float, dict[str, Any]]:
    """Sum of new minus old prices in the benchmark's order, and the last new variant (see module note)."""
    if len(a["item_ids"]) != len(a["new_item_ids"]):
        raise ToolError(mismatch)
    diff: float = 0
    variant: dict[str, Any] = {}
    for item_id, new_item_id in zip(a["item_ids"], a["new_item_ids"]):
        if distinct and item_id == new_item_id:
            raise ToolError("The new item id should be different from the old item id")
        item = next((item for item in order["items"] if item["item_id"] == item_id), None)
        if item is None:
            raise ToolError(f"Item {item_id} not found")
        variant = _variant(db, item["product_id"], new_item_id)
        if not variant["available"]:
            raise ToolError(f"New item {new_item_id} not found or available")
        diff += variant["price"] - item["price"]
    return diff, variant


def cancel_pending_order(db: Db, a: dict[str, Any]) -> dict[str, Any]:
    order = _order(db, a["order_id"])
    if order["status"] != "pending":
        raise ToolError("Non-pending order cannot be cancelled")
    if a["reason"] not in CANCEL_REASONS:
        raise ToolError("Invalid reason")
    methods = [
        _payment_method(db, order["user_id"], p["payment_method_id"]) for p in order["payment_history"]
    ]
    order = db.edit("orders", a["order_id"])
    refunds = []
    for payment, method in zip(list(order["payment_history"]), methods):
        refunds.append(
            {
                "transaction_type": "refund",
                "amount": payment["amount"],
                "payment_method_id": payment["payment_method_id"],
            }
        )
        if method["source"] == "gift_card":  # gift cards are refunded at once
            _add_to_gift_card(db, order["user_id"], payment["payment_method_id"], payment["amount"])
    order["status"] = "cancelled"
    order["cancel_reason"] = a["reason"]
    order["payment_history"].extend(refunds)
    return order


def exchange_delivered_order_items(db: Db, a: dict[str, Any]) -> dict[str, Any]:
    order = _order(db, a["order_id"])
    if order["status"] != "delivered":
        raise ToolError("Non-delivered order cannot be exchanged")
    _check_items(order, a["item_ids"], "Number of {item_id} not found.")
    diff, _ = _price_difference(
        db, order, a, mismatch="The number of items to be exchanged should match.", distinct=False
    )
    diff = round(diff, 2)
    method = _payment_method(db, order["user_id"], a["payment_method_id"])
    if method["source"] == "gift_card" and method["balance"] < diff:
        raise ToolError("Insufficient gift card balance to pay for the price difference")
    order = db.edit("orders", a["order_id"])
    order["status"] = "exchange requested"
    order["exchange_items"] = sorted(a["item_ids"])
    order["exchange_new_items"] = sorted(a["new_item_ids"])
    order["exchange_payment_method_id"] = a["payment_method_id"]
    order["exchange_price_difference"] = diff
    return order


def modify_pending_order_items(db: Db, a: dict[str, Any]) -> dict[str, Any]:
    order = _order(db, a["order_id"])
    if order["status"] != "pending":
        raise ToolError("Non-pending order cannot be modified")
    _check_items(order, a["item_ids"], "{item_id} not found")
    diff, variant = _price_difference(
        db, order, a, mismatch="The number of items to be exchanged should match", distinct=True
    )
    method = _payment_method(db, order["user_id"], a["payment_method_id"])
    if method["source"] == "gift_card" and method["balance"] < diff:
        raise ToolError("Insufficient gift card balance to pay for the new item")
    order = db.edit("orders", a["order_id"])
    order["payment_history"].append(
        {
            "transaction_type": "payment" if diff > 0 else "refund",
            "amount": float(abs(diff)),
            "payment_method_id": a["payment_method_id"],
        }
    )
    if method["source"] == "gift_card":
        _add_to_gift_card(db, order["user_id"], a["payment_method_id"], -diff)
    for item_id, new_item_id in zip(a["item_ids"], a["new_item_ids"]):
        item = next(item for item in order["items"] if item["item_id"] == item_id)
        item["item_id"] = new_item_id
        item["price"] = variant["price"]
        item["options"] = copy.deepcopy(variant["options"])
    order["status"] = "pending (item modified)"
    return order


def modify_pending_order_payment(db: Db, a: dict[str, Any]) -> dict[str, Any]:
    order = _order(db, a["order_id"])
    if "pending" not in order["status"]:
        raise ToolError("Non-pending order cannot be modified")
    method = _payment_method(db, order["user_id"], a["payment_method_id"])
    history = order["payment_history"]
    if len(history) != 1 or history[0]["transaction_type"] != "payment":
        raise ToolError("There should be exactly one payment for a pending order")
    old_id, amount = history[0]["payment_method_id"], history[0]["amount"]
    if old_id == a["payment_method_id"]:
        raise ToolError("The new payment method should be different from the current one")
    if method["source"] == "gift_card" and method["balance"] < amount:
        raise ToolError("Insufficient gift card balance to pay for the order")
    old_method = _payment_method(db, order["user_id"], old_id)
    order = db.edit("orders", a["order_id"])
    order["payment_history"] += [
        {"transaction_type": "payment", "amount": amount, "payment_method_id": a["payment_method_id"]},
        {"transaction_type": "refund", "amount": amount, "payment_method_id": old_id},
    ]
    if method["source"] == "gift_card":
        _add_to_gift_card(db, order["user_id"], a["payment_method_id"], -amount)
    if old_method["source"] == "gift_card":
        _add_to_gift_card(db, order["user_id"], old_id, amount)
    return order


def modify_pending_order_address(db: Db, a: dict[str, Any]) -> dict[str, Any]:
    if "pending" not in _order(db, a["order_id"])["status"]:
        raise ToolError("Non-pending order cannot be modified")
    order = db.edit("orders", a["order_id"])
    order["address"] = {name: a[name] for name in ADDRESS_FIELDS}
    return order


def modify_user_address(db: Db, a: dict[str, Any]) -> dict[str, Any]:
    _user(db, a["user_id"])
    user = db.edit("users", a["user_id"])
    user["address"] = {name: a[name] for name in ADDRESS_FIELDS}
    return user


def return_delivered_order_items(db: Db, a: dict[str, Any]) -> dict[str, Any]:
    order = _order(db, a["order_id"])
    if order["status"] != "delivered":
        raise ToolError("Non-delivered order cannot be returned")
    method = _payment_method(db, order["user_id"], a["payment_method_id"])
    if (
        method["source"] != "gift_card"
        and a["payment_method_id"] != order["payment_history"][0]["payment_method_id"]
    ):
        raise ToolError("Payment method should be the original payment method")
    _check_items(order, a["item_ids"], "Some item not found")
    order = db.edit("orders", a["order_id"])
    order["status"] = "return requested"
    order["return_items"] = sorted(a["item_ids"])
    order["return_payment_method_id"] = a["payment_method_id"]
    return order


def find_user_id_by_email(db: Db, a: dict[str, Any]) -> str:
    for user_id, user in db.rows("users"):
        if user["email"].lower() == a["email"].strip().lower():  # addresses are case-insensitive
            return user_id
    raise ToolError("User not found")


def find_user_id_by_name_zip(db: Db, a: dict[str, Any]) -> str:
    first, last = a["first_name"].strip().lower(), a["last_name"].strip().lower()
    for user_id, user in db.rows("users"):
        name = user["name"]
        if (
            name["first_name"].lower() == first
            and name["last_name"].lower() == last
            and user["address"]["zip"] == a["zip"]
        ):
            return user_id
    raise ToolError("User not found")


def get_item_details(db: Db, a: dict[str, Any]) -> dict[str, Any]:
    for _, product in db.rows("products"):
        if a["item_id"] in product["variants"]:
            return dict(product["variants"][a["item_id"]])
    raise ToolError("Item not found")


ORDER_ID = param("order_id", doc="e.g. '#W0000000', with the leading '#'")
ITEM_IDS = param("item_ids", ListOf(item=STR), "item ids, duplicates allowed")
NEW_ITEM_IDS = param("new_item_ids", ListOf(item=STR), "same length and product as item_ids")
PAYMENT_METHOD_ID = param("payment_method_id", doc="e.g. 'gift_card_0000000' or 'credit_card_0000000'")
ADDRESS = tuple(param(name) for name in ADDRESS_FIELDS)


def _catalogue(db: Db, a: dict[str, Any]) -> dict[str, str]:
    return {product["name"]: product_id for product_id, product in sorted(db.rows("products"))}


def retail_toolkit() -> Toolkit:
    q: Literal["query"] = "query"
    m: Literal["mutate"] = "mutate"
    return Toolkit("retail", (
        tool("calculate", q, lambda db, a: calculate(a["expression"]),
             "Evaluate arithmetic with + - * / and parentheses.", param("expression")),
        tool("cancel_pending_order", m, cancel_pending_order,
             "Cancel a pending order; the payment is refunded.",
             ORDER_ID, param("reason", Choice(values=CANCEL_REASONS))),
        tool("exchange_delivered_order_items", m, exchange_delivered_order_items,
             "Exchange items of a delivered order for other options of the same products.",
             ORDER_ID, ITEM_IDS, NEW_ITEM_IDS, PAYMENT_METHOD_ID),
        tool("find_user_id_by_email", q, find_user_id_by_email, "The user id for an email address.",
             param("email"), reveals="value"),
        tool("find_user_id_by_name_zip", q, find_user_id_by_name_zip,
             "The user id for a first name, last name and zip code.",
             param("first_name"), param("last_name"), param("zip"), reveals="value"),
        tool("get_item_details", q, get_item_details, "An item's options, price and availability.",
             param("item_id")),
        tool("get_order_details", q, lambda db, a: _order(db, a["order_id"]),
             "The status, items, payments and fulfilments of an order.", ORDER_ID),
        tool("get_product_details", q, lambda db, a: _product(db, a["product_id"]),
             "A product and all its variant items.", param("product_id", doc="not an item id")),
        tool("get_user_details", q, lambda db, a: _user(db, a["user_id"]),
             "A user's profile: address, payment methods, order ids.", param("user_id")),
        tool("list_all_product_types", q, _catalogue, "Every product name with its product id.",
             reveals="values"),
        tool("modify_pending_order_address", m, modify_pending_order_address,
             "Change the shipping address of a pending order.", ORDER_ID, *ADDRESS),
        tool("modify_pending_order_items", m, modify_pending_order_items,
             "Change items of a pending order to other options of the same products (once per order).",
             ORDER_ID, ITEM_IDS, NEW_ITEM_IDS, PAYMENT_METHOD_ID),
        tool("modify_pending_order_payment", m, modify_pending_order_payment,
             "Pay a pending order with another of the user's payment methods.", ORDER_ID, PAYMENT_METHOD_ID),
        tool("modify_user_address", m, modify_user_address, "Change a user's default address.",
             param("user_id"), *ADDRESS),
        tool("return_delivered_order_items", m, return_delivered_order_items,
             "Request the return of items of a delivered order; refund to the original method or a gift card",
             ORDER_ID, ITEM_IDS, PAYMENT_METHOD_ID),
        tool("transfer_to_human_agents", q, lambda db, a: "Transfer successful",
             "Hand the user over to a human agent, with a summary of the issue.", param("summary")),
    ))  # fmt: skip
