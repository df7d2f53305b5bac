"""``perdure temporal setup --url temporal://...`` (or ``python -m perdure_temporal.setup``):
prepare a namespace once.

perdure lists and filters runs by two search attributes, ``PerdureStatus`` and
``PerdureWorkflow`` (both Keyword). Workers never create them at run time; an operator
does, once per namespace: this command through the OperatorService of a self-hosted
cluster (or the dev server, which ``perdure_temporal.devserver`` starts with them), or
on Temporal Cloud with ``tcld namespace search-attributes add --namespace NS
--search-attribute PerdureStatus=Keyword --search-attribute PerdureWorkflow=Keyword``.
"""

from __future__ import annotations

import argparse
import asyncio

from temporalio.api.enums.v1 import IndexedValueType
from temporalio.api.operatorservice.v1 import (
    AddSearchAttributesRequest,
    ListSearchAttributesRequest,
)

from perdure_temporal.connection import connect
from perdure_temporal.url import TemporalUrl
from perdure_temporal.workflow import SEARCH_ATTRIBUTES


async def ensure_search_attributes(url: str) -> list[str]:
    """Create perdure's search attributes on ``url``'s namespace; return those added."""
    config = TemporalUrl.parse(url)
    client = await connect(config.connect_options())
    have = await client.operator_service.list_search_attributes(
        ListSearchAttributesRequest(namespace=config.namespace)
    )
    missing = {
        key.name: IndexedValueType.ValueType(key.indexed_value_type)
        for key in SEARCH_ATTRIBUTES
        if key.name not in have.custom_attributes
    }
    if missing:
        await client.operator_service.add_search_attributes(
            AddSearchAttributesRequest(namespace=config.namespace, search_attributes=missing)
        )
    return sorted(missing)


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m perdure_temporal.setup")
    parser.add_argument("--url", required=True, help="temporal://host:port/namespace")
    ns = parser.parse_args()
    added = asyncio.run(ensure_search_attributes(ns.url))
    print(f"added: {', '.join(added)}" if added else "perdure's search attributes are present")


if __name__ == "__main__":
    main()
