"""The controller's pure core: the ledger (leases, nodes, the request and lease state machines,
report matching, liveness), placement and victim choice, the backfill plan, volunteer selection
and reserves. Plain data in, plain data and effects out; the clock is passed in. It imports no
gRPC, SQLite or clock, so the tests and the trace-driven simulator drive it as the live
controller does."""
