"""What the adapters' ``perdure demo`` stories share, so neither adapter imports the other.

``services``: the payment service and mail relay the demos' tools call, and the order they
refund. ``story``: the demo's own bookkeeping (marks on the timeline, waiting for a run to
stop, the history's lines, the ledger verdict). Each adapter's ``demo`` module tells its
story with these; ``perdure._cli.demo`` only finds that module.
"""
