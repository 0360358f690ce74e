-- Fleet-wide limits (taskfuse.store.limits): permits of a bulkhead held as leases, and token
-- buckets shared by every process that talks to one downstream.

-- One row per permit of a bulkhead. A free slot has holder NULL; a held one expires at
-- expires_at (database clock), so a holder that died frees its slot by itself.
CREATE TABLE fleet_slots (
    name       text NOT NULL,
    slot       integer NOT NULL,
    holder     text,
    lease_id   uuid,
    expires_at double precision,
    PRIMARY KEY (name, slot)
);

-- A GCRA token bucket per name: `empty_at` is when the bucket, refilled without a cap, was
-- empty (the same representation as taskfuse.core.ratelimit.TokenBucket).
CREATE TABLE fleet_buckets (
    name     text PRIMARY KEY,
    rate     double precision NOT NULL CHECK (rate > 0),
    burst    double precision NOT NULL CHECK (burst >= 1),
    empty_at double precision NOT NULL
);
