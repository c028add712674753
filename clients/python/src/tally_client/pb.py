"""The generated `tally.v1` messages and stubs, under short names."""

from tally_client._proto.tally.v1 import (
    common_pb2,
    delivery_pb2,
    delivery_pb2_grpc,
    job_pb2,
    job_pb2_grpc,
    ledger_pb2,
    ledger_pb2_grpc,
    operations_pb2,
    operations_pb2_grpc,
)

__all__ = [
    "common_pb2",
    "delivery_pb2",
    "delivery_pb2_grpc",
    "job_pb2",
    "job_pb2_grpc",
    "ledger_pb2",
    "ledger_pb2_grpc",
    "operations_pb2",
    "operations_pb2_grpc",
]
