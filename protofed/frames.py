"""A run's records as tables: one row per node and round, one per node. Pure: records and
the summary in, plain rows out (the DataFrames are built from these)."""

from __future__ import annotations

from typing import Any

from node.record import NodeRecord, RoundRecord

NODE_COLUMNS = ("node", "status", "rounds_done", "bytes_sent", "bytes_received", "global_f1",
                "global_accuracy", "local_f1", "local_accuracy", "in_neighbours",
                "out_neighbours", "elapsed_seconds", "dropped_messages", "error")


def round_rows(records: list[NodeRecord]) -> list[dict[str, Any]]:
    """One row per node and recorded round: the global test's F1 and accuracy under the
    method's rule and under every rule (`f1_<rule>`, `accuracy_<rule>`), the local test's,
    bytes sent and received in the round (in all and by message kind: `bytes_sent_<kind>`),
    the round's seconds, how many parts of peers' updates were refused and how many
    in-neighbours were left undrawn (aggregation.judged_per_round)."""
    kinds = sorted({kind for node in records for record in node.rounds
                    for by_peer in (record.bytes_sent_by_peer, record.bytes_received_by_peer)
                    for per_kind in by_peer.values() for kind in per_kind})
    rules = sorted({rule for node in records for record in node.rounds
                    for rule in record.global_test.by_rule})
    return [_round_row(node, record, kinds, rules) for node in records
            for record in node.rounds]


def _round_row(node: NodeRecord, record: RoundRecord, kinds: list[str],
               rules: list[str]) -> dict[str, Any]:
    test = record.global_test
    row: dict[str, Any] = {"node": node.node, "round": record.round, "f1": test.f1,
                           "accuracy": test.accuracy, "rule": test.rule,
                           "local_f1": record.local_test.f1,
                           "local_accuracy": record.local_test.accuracy}
    for rule in rules:
        measured = test.by_rule.get(rule, {})
        row[f"f1_{rule}"] = measured.get("f1")
        row[f"accuracy_{rule}"] = measured.get("accuracy")
    row["bytes_sent"], row["bytes_received"] = record.bytes_sent, record.bytes_received
    for way, by_peer in (("sent", record.bytes_sent_by_peer),
                         ("received", record.bytes_received_by_peer)):
        for kind in kinds:
            row[f"bytes_{way}_{kind}"] = sum(per_kind.get(kind, 0)
                                             for per_kind in by_peer.values())
    row["seconds"] = (record.train_seconds + record.communication_seconds
                      + record.aggregation_seconds + record.evaluation_seconds)
    row["refused"] = len(record.refusals)
    row["missing_peers"] = len(record.missing_peers)
    row["undrawn_peers"] = len(record.undrawn_peers or [])
    return row


def node_rows(summary: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per node of a run's summary: its status, bytes and final metrics."""
    return [{column: node.get(column) for column in NODE_COLUMNS}
            for node in summary["nodes"]]
