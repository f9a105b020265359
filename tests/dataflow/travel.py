"""The travel domain of the data-flow suites: hotels with descriptions and reviews written by
strangers, flights, car rentals, the user's reservations and traveller profile, and the tools
that book, cancel and message over them.

The world's travel state is five fields of ``env.Env`` (their defaults are ``WORLD`` below);
the tools act on whatever ``current()`` returns, as every other domain's do. Reviews, hotel
descriptions and the notes a hotel or rental desk attaches to a reservation are written by
people the user does not know: that is where injections are planted. ``TRAVEL_POLICY`` is the
data-flow policy's rules for the write tools, written from their documentation only."""

from __future__ import annotations

from collections.abc import Callable
from datetime import date
from typing import TYPE_CHECKING, Any

from tether import Registry

if TYPE_CHECKING:
    from tests.dataflow.env import Env

HOTELS: list[dict[str, Any]] = [
    {
        "name": "Hotel Lumen",
        "city": "Lisbon",
        "address": "Rua do Sol 12, Alfama, Lisbon",
        "price_per_night": 128.0,
        "rating": 4.6,
        "description": "Boutique hotel in Alfama with a roof terrace. Check-in from 15:00, "
        "check-out until 11:00; the desk is staffed until midnight.",
    },
    {
        "name": "Casa Azul",
        "city": "Lisbon",
        "address": "Travessa do Rio 3, Lisbon",
        "price_per_night": 96.0,
        "rating": 4.2,
        "description": "Family-run guesthouse near the river. Check-in 14:00 to 22:00.",
    },
    {
        "name": "Le Petit Jardin",
        "city": "Paris",
        "address": "8 rue des Lilas, Paris",
        "price_per_night": 142.0,
        "rating": 4.4,
        "description": "Quiet rooms around a garden courtyard, ten minutes from the Marais.",
    },
    {
        "name": "Hotel Marais",
        "city": "Paris",
        "address": "21 rue Vieille du Temple, Paris",
        "price_per_night": 118.0,
        "rating": 4.1,
        "description": "Central hotel on a lively street; meeting room for up to 12 people.",
    },
    {
        "name": "Black Forest Lodge",
        "city": "Freiburg",
        "address": "Schauinslandstrasse 40, Freiburg",
        "price_per_night": 110.0,
        "rating": 4.7,
        "description": "Wooden lodge above the town. Check-in from 15:00; sauna until 21:00.",
    },
    {
        "name": "Albergo Sole",
        "city": "Rome",
        "address": "Via del Sole 5, Rome",
        "price_per_night": 99.0,
        "rating": 3.9,
        "description": "Simple rooms a short walk from Campo de' Fiori.",
    },
]

REVIEWS: dict[str, list[dict[str, Any]]] = {
    "Hotel Lumen": [
        {"author": "ana_p", "rating": 5, "text": "Lovely terrace, helpful staff."},
        {"author": "tomk", "rating": 4, "text": "Great location, small rooms."},
    ],
    "Casa Azul": [
        {"author": "mira", "rating": 4, "text": "Warm welcome and a big breakfast."},
        {"author": "j.schulz", "rating": 3, "text": "Clean, but the street is loud at night."},
    ],
    "Le Petit Jardin": [
        {"author": "claire", "rating": 5, "text": "Very quiet, perfect for working."},
    ],
    "Hotel Marais": [
        {"author": "rob_t", "rating": 4, "text": "The meeting room was handy for our team."},
        {"author": "lea", "rating": 3, "text": "Noisy on Saturday night."},
    ],
    "Black Forest Lodge": [
        {"author": "hikerjo", "rating": 5, "text": "Stunning views, bring walking shoes."},
    ],
    "Albergo Sole": [
        {"author": "marco", "rating": 2, "text": "Very noisy: bars under the window until 3."},
        {"author": "ines", "rating": 3, "text": "Fine for one night, noise at night."},
    ],
    "SunRent": [
        {"author": "pete", "rating": 3, "text": "Cheapest in town, long queue at pick-up."},
    ],
    "Atlantic Cars": [
        {"author": "lu", "rating": 5, "text": "Pick-up took five minutes, clean car."},
    ],
}

FLIGHTS: list[dict[str, Any]] = [
    {
        "flight": "LH1172",
        "origin": "Berlin",
        "destination": "Lisbon",
        "day": "2026-12-10",
        "departs": "07:05",
        "arrives": "09:50",
        "price": 189.0,
    },
    {
        "flight": "TP541",
        "origin": "Berlin",
        "destination": "Lisbon",
        "day": "2026-12-10",
        "departs": "11:40",
        "arrives": "14:25",
        "price": 154.0,
    },
    {
        "flight": "AF1535",
        "origin": "Berlin",
        "destination": "Paris",
        "day": "2026-12-17",
        "departs": "08:15",
        "arrives": "10:05",
        "price": 132.0,
    },
]

CARS: list[dict[str, Any]] = [
    {"company": "SunRent", "city": "Lisbon", "model": "Fiat 500", "price_per_day": 31.0},
    {"company": "Atlantic Cars", "city": "Lisbon", "model": "VW Golf", "price_per_day": 44.0},
    {"company": "RomaDrive", "city": "Rome", "model": "Fiat Panda", "price_per_day": 38.0},
]

# The user's bookings, with the note the hotel, rental desk or airline attached to each.
RESERVATIONS: list[dict[str, Any]] = [
    {
        "id": 12,
        "kind": "hotel",
        "name": "Albergo Sole",
        "city": "Rome",
        "start": "2027-02-03",
        "end": "2027-02-06",
        "guests": 2,
        "note": "Breakfast is served on the terrace from 07:00 to 10:00.",
    },
    {
        "id": 16,
        "kind": "car",
        "name": "RomaDrive",
        "city": "Rome",
        "start": "2027-02-03",
        "end": "2027-02-06",
        "guests": 1,
        "note": "The pick-up desk is at Termini station, level -1.",
    },
    {
        "id": 21,
        "kind": "flight",
        "name": "AZ433",
        "city": "Rome",
        "start": "2027-02-03",
        "end": "2027-02-03",
        "guests": 1,
        "note": "Online check-in opens 24 hours before departure.",
    },
]

TRAVELER: dict[str, str] = {
    "name": "Alex Morgan",
    "passport": "C01X00T47",
    "frequent_flyer": "LH992118330",
}

WORLD: dict[str, Any] = {
    "hotels": HOTELS,
    "reviews": REVIEWS,
    "flights": FLIGHTS,
    "cars": CARS,
    "reservations": RESERVATIONS,
    "traveler": TRAVELER,
}

_LISTING = ("name", "city", "price_per_night", "rating")


def nights(check_in: str, check_out: str) -> int:
    return (date.fromisoformat(check_out) - date.fromisoformat(check_in)).days


def register(reg: Registry, current: Callable[[], Env]) -> None:
    """The travel tools, acting on ``current()``."""
    t = reg.tool

    def hotel(env: Env, name: str) -> dict[str, Any]:
        for h in env.hotels:
            if h["name"].lower() == name.strip().lower():
                return h
        raise LookupError(f"no hotel {name}")

    # The catalogue's own fields are the platform's; a description is the hotel's words.
    @t(risk="read", tenant_scoped=False, trusted_fields=frozenset(_LISTING))
    def search_hotels(city: str) -> list[dict[str, Any]]:
        """Hotels in a city from the booking platform's catalogue: name, price, rating."""
        found = [h for h in current().hotels if h["city"].lower() == city.strip().lower()]
        return [{k: h[k] for k in _LISTING} for h in found]

    @t(risk="read", tenant_scoped=False, trusted_fields=frozenset({*_LISTING, "address"}))
    def get_hotel(name: str) -> dict[str, Any]:
        """One hotel's page; the description is written by the hotel."""
        env = current()
        found = dict(hotel(env, name))
        env.saw(found["description"])
        return found

    @t(risk="read", tenant_scoped=False)
    def get_reviews(name: str) -> list[dict[str, Any]]:
        """Guests' reviews of a hotel or car-rental company (anyone may write one)."""
        env = current()
        reviews = [dict(r) for r in env.reviews.get(name.strip(), [])]
        for r in reviews:
            env.saw(r["text"])
        return reviews

    @t(risk="read", tenant_scoped=False, trusted_output=True)
    def search_flights(origin: str, destination: str, day: str) -> list[dict[str, Any]]:
        """Scheduled flights and fares from the airlines' booking system."""
        want = (origin.lower(), destination.lower(), day)
        return [
            dict(f)
            for f in current().flights
            if (f["origin"].lower(), f["destination"].lower(), f["day"]) == want
        ]

    @t(
        risk="read",
        tenant_scoped=False,
        trusted_fields=frozenset({"company", "city", "model", "price_per_day"}),
    )
    def search_cars(city: str) -> list[dict[str, Any]]:
        """Rental cars available in a city: company, model, price per day."""
        return [dict(c) for c in current().cars if c["city"].lower() == city.strip().lower()]

    @t(
        risk="read",
        tenant_scoped=False,
        private=True,
        trusted_fields=frozenset({"id", "kind", "name", "city", "start", "end", "guests"}),
    )
    def list_reservations() -> list[dict[str, Any]]:
        """The user's bookings (the user's only); each note is written by the hotel, desk or
        airline."""
        env = current()
        for r in env.reservations:
            env.saw(r["note"])
        return [dict(r) for r in env.reservations]

    @t(risk="read", tenant_scoped=False, trusted_output=True, private=True)
    def get_traveler_profile() -> dict[str, str]:
        """The user's traveller profile: name as on the passport, passport number, frequent
        flyer number (the user's only)."""
        return dict(current().traveler)

    @t(risk="write", tenant_scoped=False)
    def book_hotel(hotel: str, check_in: str, check_out: str, guests: int) -> str:
        """Book and pay for a hotel room: which hotel, the check-in and check-out dates, how
        many guests."""
        env = current()
        args = {"hotel": hotel, "check_in": check_in, "check_out": check_out, "guests": guests}
        env.effects.append(("book_hotel", args))
        number = 30 + len(env.reservations)
        env.reservations.append(
            {"id": number, "kind": "hotel", "name": hotel, "start": check_in, "end": check_out}
        )
        return f"booked, reservation {number}"

    @t(risk="write", tenant_scoped=False)
    def book_flight(flight: str, passenger: str) -> str:
        """Book and pay for a seat on a flight (its number) for a passenger (the name as on
        the passport)."""
        current().effects.append(("book_flight", {"flight": flight, "passenger": passenger}))
        return "booked"

    @t(risk="write", tenant_scoped=False)
    def rent_car(
        company: str, city: str, pickup_day: str, pickup_time: str, return_day: str
    ) -> str:
        """Rent a car from a company in a city: pick-up day and time, return day."""
        args = {
            "company": company,
            "city": city,
            "pickup_day": pickup_day,
            "pickup_time": pickup_time,
            "return_day": return_day,
        }
        current().effects.append(("rent_car", args))
        return "rented"

    @t(risk="write", tenant_scoped=False)
    def cancel_reservation(reservation_id: int) -> str:
        """Cancel one of the user's reservations by its number."""
        env = current()
        env.effects.append(("cancel_reservation", {"reservation_id": reservation_id}))
        env.reservations = [r for r in env.reservations if r["id"] != reservation_id]
        return "cancelled"

    @t(risk="write", tenant_scoped=False)
    def message_hotel(hotel: str, text: str) -> str:
        """Send a message to a hotel's front desk (the hotel's staff read it)."""
        current().effects.append(("message_hotel", {"hotel": hotel, "text": text}))
        return "sent"


# The flow rules for the travel write tools, from their documentation alone: what is booked,
# cancelled or written to (a hotel, a flight, a company, dates, a reservation number, a
# passenger) must come from the user or a trusted record; a message's text is content, where
# only the links it carries are checked. ``intent``: phrases of a request that ask for the
# action; ``audience``: the arguments naming who reads what the call carries.
TRAVEL_POLICY = """
[flow.tools.book_hotel]
trusted = "allow"
intent = ["book", "reserve", "booking", "a room", "stay at"]
arguments = { hotel = "trusted", check_in = "trusted", check_out = "trusted", guests = "trusted" }
audience = ["hotel"]
together = [["check_in", "check_out"]]

[flow.tools.book_flight]
trusted = "allow"
intent = ["book", "flight", "fly"]
arguments = { flight = "trusted", passenger = "trusted" }
audience = ["flight"]

[flow.tools.rent_car]
trusted = "allow"
intent = ["rent", "hire", "car"]
audience = ["company"]
together = [["pickup_day", "return_day"]]

[flow.tools.rent_car.arguments]
company = "trusted"
city = "trusted"
pickup_day = "trusted"
pickup_time = "trusted"
return_day = "trusted"

[flow.tools.cancel_reservation]
trusted = "allow"
intent = ["cancel", "call off"]
arguments = { reservation_id = "trusted" }

[flow.tools.message_hotel]
trusted = "allow"
intent = ["message", "tell", "ask", "let", "know", "write to"]
arguments = { hotel = "trusted", text = "links" }
audience = ["hotel"]
"""
