"""The airline domain's tools over its database (flights, users, reservations), per `airline/policy.md`.

Mutations check everything they can before they change a row and refuse with the service's own messages
("Reservation X not found", "Gift card balance is not enough", ...). Like the benchmark's API they do not
enforce the booking policy (who may cancel, basic economy changes): the policy says the agent must check that,
and a reward must be able to see an agent that did not. New reservations take the ids HATHAT, HATHAU, HATHAV
and new certificates certificate_3221322.. in order, and the clock is fixed at 2024-05-15T15:00:00, so a
replay is exact.

Left out: seat release on cancellation and seat moves on flight changes (the benchmark does neither).
"""

from __future__ import annotations

from datetime import date, timedelta
from typing import Any, Literal

from tracec.trace_rl.envs.tau2.calculator import calculate
from tracec.trace_rl.envs.tau2.db import Db
from tracec.trace_rl.envs.tau2.toolkit import (
    INT,
    STR,
    Choice,
    ListOf,
    Record,
    ToolError,
    Toolkit,
    param,
    tool,
)

NOW = "2024-05-15T15:00:00"
NEW_RESERVATION_IDS = ("HATHAT", "HATHAU", "HATHAV")
NEW_CERTIFICATE_IDS = ("certificate_3221322", "certificate_3221323", "certificate_3221324")
CABIN = Choice(values=("basic_economy", "economy", "business"))
FLIGHT = Record(fields=(("flight_number", STR), ("date", STR)))
PASSENGER = Record(fields=(("first_name", STR), ("last_name", STR), ("dob", STR)))
PAYMENT = Record(fields=(("payment_id", STR), ("amount", INT)))
AIRPORTS = {
    "ATL": "Atlanta", "BOS": "Boston", "CLT": "Charlotte", "DEN": "Denver", "DFW": "Dallas", "DTW": "Detroit",
    "EWR": "Newark", "IAH": "Houston", "JFK": "New York", "LAS": "Las Vegas", "LAX": "Los Angeles",
    "LGA": "LaGuardia", "MCO": "Orlando", "MIA": "Miami", "MSP": "Minneapolis", "ORD": "Chicago",
    "PHL": "Philadelphia", "PHX": "Phoenix", "SEA": "Seattle", "SFO": "San Francisco",
}  # fmt: skip


def _user(db: Db, user_id: str) -> dict[str, Any]:
    row = db.row("users", user_id)
    if row is None:
        raise ToolError(f"User {user_id} not found")
    return row


def _reservation(db: Db, reservation_id: str) -> dict[str, Any]:
    row = db.row("reservations", reservation_id)
    if row is None:
        raise ToolError(f"Reservation {reservation_id} not found")
    return row


def _flight(db: Db, flight_number: str) -> dict[str, Any]:
    row = db.row("flights", flight_number)
    if row is None:
        raise ToolError(f"Flight {flight_number} not found")
    return row


def _bookable(db: Db, flight_number: str, day: str, cabin: str, seats: int) -> dict[str, Any]:
    """The flight's row for `day` when it can take `seats` more passengers in `cabin`."""
    flight = _flight(db, flight_number)
    instance = flight["dates"].get(day)
    if instance is None:
        raise ToolError(f"Flight {flight_number} not found on date {day}")
    if instance["status"] != "available":
        raise ToolError(f"Flight {flight_number} not available on date {day}")
    if instance["available_seats"][cabin] < seats:
        raise ToolError(f"Not enough seats on flight {flight_number}")
    return instance


def _charge_for_update(db: Db, user_id: str, payment_id: str, amount: int) -> dict[str, Any] | None:
    """Charge (or refund, when negative) one stored card or gift card; the payment record, None when zero."""
    method = _user(db, user_id)["payment_methods"].get(payment_id)
    if method is None:
        raise ToolError("Payment method not found")
    if method["source"] == "certificate":
        raise ToolError("Certificate cannot be used to update reservation")
    if method["source"] == "gift_card" and method["amount"] < amount:
        raise ToolError("Gift card balance is not enough")
    if method["source"] == "gift_card":
        db.edit("users", user_id)["payment_methods"][payment_id]["amount"] -= amount
    return {"payment_id": payment_id, "amount": amount} if amount != 0 else None


def book_reservation(db: Db, a: dict[str, Any]) -> dict[str, Any]:
    user = _user(db, a["user_id"])
    reservation_id = next((rid for rid in NEW_RESERVATION_IDS if db.row("reservations", rid) is None), None)
    if reservation_id is None:
        raise ToolError("Too many reservations")
    cabin, passengers = a["cabin"], a["passengers"]
    legs, booked, total = [], [], 0
    for leg in a["flights"]:
        flight = _flight(db, leg["flight_number"])
        instance = _bookable(db, leg["flight_number"], leg["date"], cabin, len(passengers))
        price = instance["prices"][cabin]
        legs.append(
            {
                "flight_number": leg["flight_number"],
                "origin": flight["origin"],
                "destination": flight["destination"],
                "date": leg["date"],
                "price": price,
            }
        )
        booked.append((leg["flight_number"], leg["date"]))
        total += price * len(passengers)
    if a["insurance"] == "yes":
        total += 30 * len(passengers)
    total += 50 * a["nonfree_baggages"]
    for payment in a["payment_methods"]:
        method = user["payment_methods"].get(payment["payment_id"])
        if method is None:
            raise ToolError(f"Payment method {payment['payment_id']} not found")
        if method["source"] in ("gift_card", "certificate") and method["amount"] < payment["amount"]:
            raise ToolError(f"Not enough balance in payment method {payment['payment_id']}")
    paid = sum(payment["amount"] for payment in a["payment_methods"])
    if paid != total:
        raise ToolError(f"Payment amount does not add up, total price is {total}, but paid {paid}")
    user = db.edit("users", a["user_id"])
    for payment in a["payment_methods"]:
        method = user["payment_methods"].get(payment["payment_id"])
        if method is not None and method["source"] == "gift_card":
            method["amount"] -= payment["amount"]
        elif method is not None and method["source"] == "certificate":
            del user["payment_methods"][payment["payment_id"]]  # a certificate's remainder is not refundable
    for flight_number, day in booked:
        db.edit("flights", flight_number)["dates"][day]["available_seats"][cabin] -= len(passengers)
    reservation = {
        "reservation_id": reservation_id,
        "user_id": a["user_id"],
        "origin": a["origin"],
        "destination": a["destination"],
        "flight_type": a["flight_type"],
        "cabin": cabin,
        "flights": legs,
        "passengers": passengers,
        "payment_history": a["payment_methods"],
        "created_at": NOW,
        "total_baggages": a["total_baggages"],
        "nonfree_baggages": a["nonfree_baggages"],
        "insurance": a["insurance"],
        "status": None,
    }
    db.insert("reservations", reservation_id, reservation)
    user["reservations"].append(reservation_id)
    return reservation


def cancel_reservation(db: Db, a: dict[str, Any]) -> dict[str, Any]:
    _reservation(db, a["reservation_id"])
    reservation = db.edit("reservations", a["reservation_id"])
    refunds = [
        {"payment_id": p["payment_id"], "amount": -p["amount"]} for p in reservation["payment_history"]
    ]
    reservation["payment_history"].extend(refunds)
    reservation["status"] = "cancelled"
    return reservation


def update_reservation_baggages(db: Db, a: dict[str, Any]) -> dict[str, Any]:
    for name in ("total_baggages", "nonfree_baggages"):
        if a[name] < 0:
            raise ToolError(f"{name} cannot be negative")
    old = _reservation(db, a["reservation_id"])
    fee = 50 * max(0, a["nonfree_baggages"] - old["nonfree_baggages"])
    payment = _charge_for_update(db, old["user_id"], a["payment_id"], fee)
    reservation = db.edit("reservations", a["reservation_id"])
    if payment is not None:
        reservation["payment_history"].append(payment)
    reservation["total_baggages"] = a["total_baggages"]
    reservation["nonfree_baggages"] = a["nonfree_baggages"]
    return reservation


def update_reservation_flights(db: Db, a: dict[str, Any]) -> dict[str, Any]:
    old = _reservation(db, a["reservation_id"])
    _user(db, old["user_id"])
    cabin, seats = a["cabin"], len(old["passengers"])
    legs, total = [], 0
    for leg in a["flights"]:
        flight = _flight(db, leg["flight_number"])
        kept = next(
            (
                f
                for f in old["flights"]
                if f["flight_number"] == leg["flight_number"]
                and f["date"] == leg["date"]
                and cabin == old["cabin"]
            ),
            None,
        )
        if kept is not None:  # an unchanged segment keeps the price it was bought at
            legs.append(dict(kept))
            total += kept["price"] * seats
            continue
        instance = _bookable(db, leg["flight_number"], leg["date"], cabin, seats)
        legs.append(
            {
                "flight_number": leg["flight_number"],
                "origin": flight["origin"],
                "destination": flight["destination"],
                "date": leg["date"],
                "price": instance["prices"][cabin],
            }
        )
        total += instance["prices"][cabin] * seats
    total -= sum(f["price"] for f in old["flights"]) * seats
    payment = _charge_for_update(db, old["user_id"], a["payment_id"], total)
    reservation = db.edit("reservations", a["reservation_id"])
    if payment is not None:
        reservation["payment_history"].append(payment)
    reservation["flights"] = legs
    reservation["cabin"] = cabin
    return reservation


def update_reservation_passengers(db: Db, a: dict[str, Any]) -> dict[str, Any]:
    old = _reservation(db, a["reservation_id"])
    if len(a["passengers"]) != len(old["passengers"]):
        raise ToolError("Number of passengers does not match")
    reservation = db.edit("reservations", a["reservation_id"])
    reservation["passengers"] = a["passengers"]
    return reservation


def send_certificate(db: Db, a: dict[str, Any]) -> str:
    if a["amount"] <= 0:
        raise ToolError("Certificate amount must be positive")
    user = _user(db, a["user_id"])
    certificate_id = next((cid for cid in NEW_CERTIFICATE_IDS if cid not in user["payment_methods"]), None)
    if certificate_id is None:
        raise ToolError("Too many certificates")
    methods = db.edit("users", a["user_id"])["payment_methods"]
    methods[certificate_id] = {"source": "certificate", "id": certificate_id, "amount": float(a["amount"])}
    return f"Certificate {certificate_id} added to user {a['user_id']} with amount {a['amount']}."


def _direct(
    db: Db, day: str, origin: str | None, destination: str | None, after: str | None
) -> list[dict[str, Any]]:
    found = []
    for number, flight in db.rows("flights"):
        instance = flight["dates"].get(day)
        if instance is None or instance["status"] != "available":
            continue
        if (origin is not None and flight["origin"] != origin) or (
            destination is not None and flight["destination"] != destination
        ):
            continue
        if after is not None and flight["scheduled_departure_time_est"] < after:
            continue
        found.append(
            {
                "flight_number": number,
                "origin": flight["origin"],
                "destination": flight["destination"],
                "status": "available",
                "date": day,
                "scheduled_departure_time_est": flight["scheduled_departure_time_est"],
                "scheduled_arrival_time_est": flight["scheduled_arrival_time_est"],
                "available_seats": instance["available_seats"],
                "prices": instance["prices"],
            }
        )
    return found


def search_onestop_flight(db: Db, a: dict[str, Any]) -> list[list[dict[str, Any]]]:
    pairs = []
    for first in _direct(db, a["date"], a["origin"], None, None):
        arrival = first["scheduled_arrival_time_est"]
        day = a["date"]
        if arrival.endswith("+1"):  # lands after midnight: the connection leaves the next day
            day = (date.fromisoformat(day) + timedelta(days=1)).isoformat()
            arrival = arrival[:-2]
        pairs += [
            [first, second] for second in _direct(db, day, first["destination"], a["destination"], arrival)
        ]
    return pairs


def _flight_status(db: Db, a: dict[str, Any]) -> str:
    instance = _flight(db, a["flight_number"])["dates"].get(a["date"])
    if instance is None:
        raise ToolError(f"Flight {a['flight_number']} not found on date {a['date']}")
    return str(instance["status"])


def _check_date(day: str) -> None:
    try:
        date.fromisoformat(day)
    except ValueError:
        raise ToolError(f"date must be YYYY-MM-DD, got {day!r}") from None


def _airports(db: Db, a: dict[str, Any]) -> list[dict[str, str]]:
    return [{"iata": iata, "city": city} for iata, city in AIRPORTS.items()]


def _search_direct(db: Db, a: dict[str, Any]) -> list[dict[str, Any]]:
    return _direct(db, a["date"], a["origin"], a["destination"], None)


def _search_onestop(db: Db, a: dict[str, Any]) -> list[list[dict[str, Any]]]:
    _check_date(a["date"])
    return search_onestop_flight(db, a)


FLIGHTS = ListOf(item=FLIGHT)
TRIP = (
    param("origin", doc="IATA code, e.g. 'JFK'"),
    param("destination", doc="IATA code"),
    param("date", doc="YYYY-MM-DD"),
)


def airline_toolkit() -> Toolkit:
    q: Literal["query"] = "query"
    m: Literal["mutate"] = "mutate"
    return Toolkit("airline", (
        tool("book_reservation", m, book_reservation, "Book a reservation; payments add up to the price.",
             param("user_id"), param("origin"), param("destination"),
             param("flight_type", Choice(values=("one_way", "round_trip"))), param("cabin", CABIN),
             param("flights", FLIGHTS, "every segment of the trip"),
             param("passengers", ListOf(item=PASSENGER)),
             param("payment_methods", ListOf(item=PAYMENT)), param("total_baggages", INT),
             param("nonfree_baggages", INT), param("insurance", Choice(values=("yes", "no")))),
        tool("calculate", q, lambda db, a: calculate(a["expression"]),
             "Evaluate arithmetic with + - * / and parentheses.", param("expression")),
        tool("cancel_reservation", m, cancel_reservation,
             "Cancel a whole reservation; payments are refunded to their methods.",
             param("reservation_id", doc="e.g. 'ZFA04Y'")),
        tool("get_flight_status", q, _flight_status, "The status of a flight on a date.",
             param("flight_number"), param("date", doc="YYYY-MM-DD")),
        tool("get_reservation_details", q, lambda db, a: _reservation(db, a["reservation_id"]),
             "The details of a reservation.", param("reservation_id")),
        tool("get_user_details", q, lambda db, a: _user(db, a["user_id"]),
             "A user's profile: payment methods, membership, reservation ids.",
             param("user_id", doc="e.g. 'sara_doe_496'")),
        tool("list_all_airports", q, _airports, "All airports served: IATA code and city."),
        tool("search_direct_flight", q, _search_direct,
             "Bookable direct flights between two airports on a date.", *TRIP),
        tool("search_onestop_flight", q, _search_onestop,
             "Bookable one-stop connections (pairs of flights) between two airports on a date.", *TRIP),
        tool("send_certificate", m, send_certificate, "Send a travel certificate to a user.",
             param("user_id"), param("amount", INT, "dollars")),
        tool("transfer_to_human_agents", q, lambda db, a: "Transfer successful",
             "Hand the user over to a human agent, with a summary of the issue.", param("summary")),
        tool("update_reservation_baggages", m, update_reservation_baggages,
             "Set the checked bags of a reservation; extra non-free bags cost $50 each.",
             param("reservation_id"), param("total_baggages", INT), param("nonfree_baggages", INT),
             param("payment_id", doc="a payment method id from the user's profile")),
        tool("update_reservation_flights", m, update_reservation_flights,
             "Replace the flights (and cabin) of a reservation; pay or get back the difference.",
             param("reservation_id"), param("cabin", CABIN),
             param("flights", FLIGHTS, "every segment of the new trip, kept ones too"),
             param("payment_id", doc="a credit card or gift card from the user's profile")),
        tool("update_reservation_passengers", m, update_reservation_passengers,
             "Replace the passenger details of a reservation (same number of passengers).",
             param("reservation_id"), param("passengers", ListOf(item=PASSENGER))),
    ))  # fmt: skip
