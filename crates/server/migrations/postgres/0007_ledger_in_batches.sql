-- Bills are stored a row per account per written batch, each column an array with one
-- element per bill: PostgreSQL's work for a batch of ~18 bills falls from ~200 µs to
-- ~110 µs (one tuple and one index entry per row instead of a tuple and two index
-- entries per bill), and the serial commit the ledger's throughput waits on shortens
-- with it. `ledger` stays, as a view of one row per bill, so every read of it is
-- unchanged, and a replica of an earlier build that inserts into it still bills (below).
--
-- The writer builds every row's arrays from one list of typed `Bill`s, so they are of one
-- length and each bill has one of key, user or token. Checks of them per row were
-- measured to cost ~20% (the lengths) to ~60% (the callers, in PL/pgSQL) of the insert;
-- arrays of unequal lengths would read back padded with NULLs.

-- The bills already there may be many: the copy runs without the pool's statement
-- timeout (this transaction only), and with writers kept out, so a replica of an earlier
-- build still writing waits, and fails unbilled once the table is gone, rather than
-- committing a bill after the copy that would be dropped with the table.
SET LOCAL statement_timeout = 0;
LOCK TABLE ledger IN EXCLUSIVE MODE;

CREATE TABLE ledger_batches (
    account_id BIGINT   NOT NULL,
    -- The earliest and the latest `at` of the row's bills: reads of a time range find
    -- their rows by these in the index, then keep the bills within.
    first_at   BIGINT   NOT NULL,
    last_at    BIGINT   NOT NULL,
    at         BIGINT[] NOT NULL,
    key_id     TEXT[]   NOT NULL,
    user_id    BIGINT[] NOT NULL,
    idp        TEXT[]   NOT NULL,
    subject    TEXT[]   NOT NULL,
    survey     TEXT[]   NOT NULL,
    grp        TEXT[]   NOT NULL,
    base       TEXT[]   NOT NULL,
    targets    BIGINT[] NOT NULL,
    request_id TEXT[]   NOT NULL
) WITH (toast_tuple_target = 8160);
CREATE INDEX ledger_batches_account_last_at ON ledger_batches (account_id, last_at);

-- The bills so far, each account's in rows of at most 32, in the order they were written.
INSERT INTO ledger_batches (account_id, first_at, last_at, at, key_id, user_id, idp,
                            subject, survey, grp, base, targets, request_id)
SELECT account_id, MIN(at), MAX(at), array_agg(at ORDER BY id), array_agg(key_id ORDER BY id),
       array_agg(user_id ORDER BY id), array_agg(idp ORDER BY id),
       array_agg(subject ORDER BY id), array_agg(survey ORDER BY id),
       array_agg(grp ORDER BY id), array_agg(base ORDER BY id),
       array_agg(targets ORDER BY id), array_agg(request_id ORDER BY id)
FROM (SELECT *, (row_number() OVER (PARTITION BY account_id ORDER BY id) - 1) / 32 AS part
      FROM ledger) bills
GROUP BY account_id, part;

DROP TABLE ledger;

-- One row per bill. `batch_first_at` and `batch_last_at` are its row's bounds: a read of
-- a time range names them too, so the index narrows the rows before they are unnested.
CREATE VIEW ledger AS
SELECT b.account_id, u.at, u.key_id, u.user_id, u.idp, u.subject, u.survey, u.grp, u.base,
       u.targets, u.request_id, b.first_at AS batch_first_at, b.last_at AS batch_last_at
FROM ledger_batches b
CROSS JOIN LATERAL UNNEST(b.at, b.key_id, b.user_id, b.idp, b.subject, b.survey, b.grp,
                          b.base, b.targets, b.request_id)
    AS u (at, key_id, user_id, idp, subject, survey, grp, base, targets, request_id);

-- A replica of an earlier build inserts into `ledger` during a rolling upgrade: each of
-- its bills becomes a row of one.
CREATE FUNCTION ledger_insert_one() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO ledger_batches (account_id, first_at, last_at, at, key_id, user_id, idp,
                                subject, survey, grp, base, targets, request_id)
    VALUES (NEW.account_id, NEW.at, NEW.at, ARRAY[NEW.at], ARRAY[NEW.key_id],
            ARRAY[NEW.user_id], ARRAY[NEW.idp], ARRAY[NEW.subject], ARRAY[NEW.survey],
            ARRAY[NEW.grp], ARRAY[NEW.base], ARRAY[NEW.targets], ARRAY[NEW.request_id]);
    RETURN NEW;
END
$$;
CREATE TRIGGER ledger_insert_one INSTEAD OF INSERT ON ledger
    FOR EACH ROW EXECUTE FUNCTION ledger_insert_one();
