"""What every fleet run must show, whatever it did to the fleet: each message sent reached a host once."""

from __future__ import annotations

from service.devstack.fleet_result import FleetResult


def assert_each_message_delivered_once(result: FleetResult) -> None:
    account = result.account
    assert not account.duplicates, f"delivered more than once: {dict(account.duplicates)}"
    assert not account.unexpected, f"pushed but never sent by the run: {account.unexpected}"
    assert not account.unexplained, (
        f"{len(account.unexplained)} message(s) never delivered: {result.summary()['unexplained_losses']}; "
        f"replica logs in {result.workdir}"
    )
