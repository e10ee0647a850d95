"""Partition stores: one RocksDB per partition, written in transactions, backed by changelogs."""

from streams.state.partition import PartitionStore
from streams.state.store import Store
from streams.state.transaction import StoreTransaction, TransactionStatus

__all__ = ["PartitionStore", "Store", "StoreTransaction", "TransactionStatus"]
